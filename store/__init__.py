"""The artefact store every stage stands on: fingerprints, manifests and atomic publish
(`artefacts`), the stage template (`stage`), shard leases (`lease`), the persistent score cache
(`score_cache`), fault-injection drills (`faults`) and artefact inspection (`inspection`)."""
