"""Flows for deployments (prefect.yaml entrypoints): the whole pipeline, or one stage.

A deployment loads its flow from a file, so the task runner chosen in the config (thread,
process, Dask, Ray) must be applied at run time: these flows read the config and call the
pipeline flow as a subflow with that runner (what ``ctxsim run`` does via run_pipeline).
A stage flow runs the pipeline *up to* that stage: upstream stages are reused by fingerprint,
so deploying `retrieve` alone never recomputes `shard` that a nightly run already published.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from ctxsim.flows.pipeline import run_pipeline
from ctxsim.store.errors import InputError
from ctxsim.tasks import STAGES


@flow(name="ctxsim", log_prints=False, persist_result=False)  # prints: see pipeline_flow
def pipeline(
    config: str = "configs/quickstart.yaml",
    overrides: list[str] | None = None,
    root: str | None = None,
    until: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The whole pipeline for one config file (or up to `until`), with the config's runner."""
    return run_pipeline(config, overrides, root, until, run_id)


@flow(name="ctxsim-stage", log_prints=False, persist_result=False)  # prints: see pipeline_flow
def stage_flow(
    stage: str,
    config: str = "configs/quickstart.yaml",
    overrides: list[str] | None = None,
    root: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """One stage (and whatever upstream stages are not published yet)."""
    if stage not in STAGES:
        raise InputError(f"stage {stage!r} is not a stage; known: {', '.join(STAGES)}")
    return run_pipeline(config, overrides, root, stage, run_id)
