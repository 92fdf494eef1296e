"""A fingerprint promises the same output: training stages fingerprint the thread count they
train with (a retrained discriminator under one fingerprint with another thread count wrote a
different model.safetensors)."""

from __future__ import annotations

import pytest

from ctxsim.store.stage import RunParams


@pytest.mark.parametrize("name", ["discriminator", "generator", "train"])
def test_training_stages_fingerprint_the_thread_count(tmp_path, name):
    from ctxsim.flows.pipeline import effective_run
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import resolve_stage
    from ctxsim.tasks import load_stage

    stage, store = load_stage(name), ArtefactStore(tmp_path)

    def fp(threads: int) -> str:
        run = effective_run(RunParams(torch_threads=threads))
        return resolve_stage(stage, stage.Params(), run, store, {}).fingerprint

    assert fp(1) != fp(2)
    default = effective_run(RunParams()).torch_threads
    assert default > 0 and fp(0) == fp(default)


def test_the_pipeline_resolves_stages_with_the_effective_thread_count(tmp_path, monkeypatch):
    """Every stage of a run, and the shard processes its spec reaches, get the explicit count."""
    from ctxsim.flows import pipeline
    from ctxsim.flows.config import load_config
    from tests.conftest import REPO, SAMPLE

    seen: list[RunParams] = []

    class Stop(Exception):
        pass

    def spy(stage, params, run, store, upstream):
        seen.append(run)
        raise Stop

    monkeypatch.setattr(pipeline, "resolve_stage", spy)
    cfg = load_config(
        REPO / "configs" / "quickstart.yaml", [f"shard.paths=['{SAMPLE}']"], str(tmp_path)
    )
    assert cfg.run.torch_threads == 0
    with pytest.raises(Stop):
        pipeline.execute(cfg, use_prefect=False)
    assert seen[0].torch_threads == pipeline.effective_run(cfg.run).torch_threads > 0
    record = next(iter(pipeline.ArtefactStore(tmp_path).list_runs()))
    assert record["config"]["run"]["torch_threads"] == 0  # the record keeps the config as given
