"""Reading an artefact by the path a run record names (store/artefacts.py ``artefact_at``) and the
CPU-seconds its manifest records (``Artefact.cpu_seconds``, ``total_cpu_seconds``): what the
benches add up for a run's stages, through the store rather than a hand-read manifest."""

from __future__ import annotations

import pyarrow as pa

from ctxsim.store.artefacts import ArtefactStore, artefact_at, total_cpu_seconds
from ctxsim.store.stage import RunParams, Stage, StageParams, resolve_stage, run_stage_locally


class _Rows(Stage):
    name = "rows"
    Params = StageParams

    def run_shard(self, ctx, shard):
        return pa.table({"x": list(range(50))}), {"n": 50}


def test_an_artefact_is_read_back_by_its_path_with_its_cpu_seconds(tmp_path):
    store = ArtefactStore(tmp_path)
    art, _ = run_stage_locally(resolve_stage(_Rows(), StageParams(), RunParams(), store, {}))
    again = artefact_at(str(art.path))
    assert again is not None and again.fingerprint == art.fingerprint and again.stage == "rows"
    assert again.read_table().num_rows == 50
    cpu = again.cpu_seconds
    assert cpu is not None and cpu >= 0.0
    missing = tmp_path / "rows" / "0123456789abcdef"
    assert artefact_at(missing) is None
    assert total_cpu_seconds([art.path, missing, art.path]) == 2 * cpu


def test_an_artefact_without_recorded_cpu_seconds_counts_zero(tmp_path):
    store = ArtefactStore(tmp_path)
    art, _ = run_stage_locally(resolve_stage(_Rows(), StageParams(), RunParams(), store, {}))
    art.manifest["stats"].pop("cpu_seconds")
    assert art.cpu_seconds is None
    assert artefact_at(art.path, verify=True) is not None  # the published one is intact
