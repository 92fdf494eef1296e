"""The pipeline flow: stage order, one Prefect task per shard, reuse by fingerprint.

The artefact store, not Prefect's result cache, decides what is done: a stage whose fingerprint
is published is reused, a shard whose done-marker matches its bytes is skipped. So rerunning a
run id, or retrying a deployed flow run, recomputes only what is missing.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait

from ctxsim.flows.config import ConfigError, PipelineConfig, load_config, select_stages
from ctxsim.flows.console import console_line
from ctxsim.flows.run_records import process_identity
from ctxsim.flows.runners import make_task_runner, shard_options, submit_options
from ctxsim.store.artefacts import Artefact, ArtefactStore, safe_name
from ctxsim.store.stage import (
    ResolvedStage,
    RunParams,
    compute_shard,
    get_logger,
    publish_stage,
    resolve_stage,
)
from ctxsim.tasks import load_stage

#: OSErrors that say the input itself is wrong: another try reads the same bytes.
PERMANENT_OS_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def is_transient(exc: BaseException | None) -> bool:
    """Worth a retry: what can pass on a second try (I/O hiccups other than a missing or
    unreadable file or a full disk, lost connections, time-outs, CUDA out-of-memory). Everything
    else (bad input, shape errors, store errors, a corrupt gzip member) fails at once."""
    import errno
    import gzip
    import zlib

    if exc is None:
        return False
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return False  # seconds later the disk is as full: say so once
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if _is_cuda_oom(exc):
        return True
    if isinstance(exc, (gzip.BadGzipFile, zlib.error, EOFError, *PERMANENT_OS_ERRORS)):
        return False
    return isinstance(exc, OSError)


def _is_cuda_oom(exc: BaseException) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False
    return isinstance(exc, torch.OutOfMemoryError)


def _retry_condition(task: Any, task_run: Any, state: Any) -> bool:
    try:
        state.result()
    except Exception as exc:  # noqa: BLE001 - we classify it
        return is_transient(exc)
    return False


def plan_spec(plan: ResolvedStage) -> dict[str, Any]:
    """A picklable description of a plan, so shard tasks can run in other processes/hosts."""
    return {
        "root": str(Path(plan.store.root).resolve()),
        # relative input paths of the config (corpus, STS folders, models) are read from here
        "cwd": str(Path.cwd()),
        "stage": plan.stage.name,
        "params": plan.params.model_dump(mode="json"),
        "run": plan.run.model_dump(mode="json"),
        "upstream": {k: a.fingerprint for k, a in plan.upstream.items()},
    }


def plan_from_spec(spec: dict[str, Any]) -> ResolvedStage:
    store = ArtefactStore(spec["root"])
    stage = load_stage(spec["stage"])
    upstream = {k: store.require(k, fp) for k, fp in spec["upstream"].items()}
    return resolve_stage(
        stage, stage.Params(**spec["params"]), RunParams(**spec["run"]), store, upstream
    )


@task(
    name="stage-shard",
    task_run_name="{spec[stage]}-shard-{shard}",
    retries=2,
    retry_delay_seconds=3,
    retry_condition_fn=_retry_condition,
    cache_policy=NO_CACHE,
    persist_result=False,
)
def shard_task(spec: dict[str, Any], shard: int) -> dict[str, Any]:
    """Compute one shard of one stage (or confirm it was done before); compute_shard does the
    per-process set-up."""
    _enter_run_directory(spec.get("cwd"))
    return compute_shard(plan_from_spec(spec), shard)


def _enter_run_directory(cwd: str | None) -> None:
    """Read relative config paths where the run started, also in a Dask/Ray worker on another
    host (whose own working directory is anywhere): hosts share the checkout path."""

    if not cwd or os.getcwd() == cwd:
        return
    if not Path(cwd).is_dir():
        raise FileNotFoundError(
            f"the run's working directory {cwd} does not exist on this worker host; every host "
            "needs the checkout (and the data the config names) at the same path"
        )
    os.chdir(cwd)


def _stats_artifact(name: str, art: Artefact, reused: bool) -> None:
    rows = [
        {"stat": "fingerprint", "value": art.fingerprint},
        {"stat": "rows", "value": art.num_rows},
    ]
    rows.append({"stat": "reused", "value": reused})
    rows += [{"stat": k, "value": v} for k, v in sorted(art.stats.items())]
    try:
        create_table_artifact(
            key=f"ctxsim-{name}".replace("_", "-").lower(),
            table=rows,
            description=f"Stage `{name}` → {art.path}",
        )
        report = art.files_dir / "report.md"  # a stage's own report (label: its diagnostics)
        if report.is_file():
            create_markdown_artifact(
                key=f"ctxsim-{name}-report".replace("_", "-").lower(),
                markdown=report.read_text(),
                description=f"Stage `{name}` report",
            )
    except Exception as exc:  # noqa: BLE001 - an artifact must never fail a stage
        get_logger().warning("could not publish the %s artifact: %s", name, exc)


def new_run_id() -> str:
    """A fresh run id: ``run-<UTC-ish local time>-<4 hex>``."""
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


_DEFAULT_THREADS: list[int] = []


def effective_run(run: RunParams) -> RunParams:
    """``run`` with ``torch_threads: 0`` (torch's default) replaced by the count torch uses in
    this process (read once, before any stage sets it). A stage whose output depends on the
    thread count (float sums split over threads: trained weights) declares it with
    ``run_fields = (..., "torch_threads")`` and so fingerprints the count it trains with; every
    shard process, local or remote, is set to that count (store.stage._process_setup)."""
    if run.torch_threads > 0:
        return run
    if not _DEFAULT_THREADS:
        import torch

        _DEFAULT_THREADS.append(torch.get_num_threads())
    return run.model_copy(update={"torch_threads": _DEFAULT_THREADS[0]})


def _run_shards(
    plan: Any, n: int, cfg: PipelineConfig, options: dict[str, Any], use_prefect: bool
) -> list[dict[str, Any]]:
    """Compute the ``n`` shards of ``plan``: Prefect tasks submitted at once (``options``: the
    task runner's), one after another, or (``use_prefect`` false) in this process; their infos."""
    spec = plan_spec(plan)
    if use_prefect and cfg.run.task_runner != "sequential":
        with submit_options(options):
            futures = [shard_task.submit(spec, s) for s in range(n)]
        wait(futures)
        return [f.result() for f in futures]
    if use_prefect:
        return [shard_task(spec, s) for s in range(n)]
    return [compute_shard(plan, s) for s in range(n)]


def _stage_record(
    art: Artefact, reused: bool, by_other: bool, computed: int, t0: float
) -> dict[str, Any]:
    """A stage's entry in the run record (``t0``: when the stage started, perf_counter)."""
    return {
        "fingerprint": art.fingerprint,
        "status": "reused" if reused else "completed",
        **({"computed_by": "another run"} if by_other else {}),
        "rows": art.num_rows,
        "shards": len(art.parts),
        "shards_computed": computed,
        "seconds": round(time.perf_counter() - t0, 3),
        "path": str(art.path),
    }


def execute(
    cfg: PipelineConfig,
    until: str | None = None,
    run_id: str | None = None,
    use_prefect: bool = True,
) -> dict[str, Any]:
    """Run (or reuse) every stage in order; record the run under ROOT/runs/<run-id>.json."""
    log = get_logger()
    store = ArtefactStore(cfg.run.root)
    run_id = safe_name(run_id or new_run_id(), "run id")
    record: dict[str, Any] = {
        "run_id": run_id,
        "config_source": cfg.source,
        "config": cfg.to_dict(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "status": "running",
        "stages": {},
        **process_identity(),  # lets `ctxsim runs` tell a killed run ("crashed") from a live one
    }
    store.write_run(run_id, record)
    artefacts: dict[str, Artefact] = {}
    run = effective_run(cfg.run)  # the record keeps the config as given
    try:
        options = shard_options(cfg.run, log.warning) if use_prefect else {}
        for name in select_stages(cfg, until):
            stage = load_stage(name)
            needed = stage.inputs_for(cfg.stages[name])
            missing = [i for i in needed if i not in artefacts]
            if missing:
                raise ConfigError(f"stage {name!r} needs {missing}, which this config does not run")
            upstream = {i: artefacts[i] for i in needed}
            optional = stage.optional_inputs_for(cfg.stages[name])
            upstream |= {i: artefacts[i] for i in optional if i in artefacts}
            plan = resolve_stage(stage, cfg.stages[name], run, store, upstream)
            t0 = time.perf_counter()
            art = plan.published()
            reused = art is not None
            computed, by_other = 0, False
            if art is None:
                n = stage.num_shards(plan.context())
                infos = _run_shards(plan, n, cfg, options, use_prefect)
                computed = sum(not i.get("reused") for i in infos)
                # a concurrent run of the same stage may have published it while we waited on
                # its shard leases: then this run computed nothing and must not claim it
                art = plan.published() if computed == 0 else None
                by_other = reused = art is not None
                if art is None:
                    art = publish_stage(plan, n, infos)
                    by_other = reused = art.by_other
                store.remove_empty_partial(name, art.fingerprint)
            line = (
                "%s %s: %s (%d rows, %d shards computed, %.1fs)",
                "reused (computed by another run)"
                if by_other
                else ("reused" if reused else "published"),
                name,
                art.fingerprint,
                art.num_rows,
                computed,
                time.perf_counter() - t0,
            )
            log.info(*line)
            console_line(*line)
            artefacts[name] = art
            record["stages"][name] = _stage_record(art, reused, by_other, computed, t0)
            store.write_run(run_id, record)
            if use_prefect:
                _stats_artifact(name, art, reused)
    except BaseException as exc:
        record["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        record["error"] = f"{type(exc).__name__}: {exc}"
        record["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        store.write_run(run_id, record)
        raise
    record["status"] = "completed"
    record["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    store.write_run(run_id, record)
    return record


# log_prints stays off: stages log through Prefect's logger, and Prefect's print patch breaks
# libraries that capture stdout to parse it (dill's nestedglobals, used by `datasets` to hash
# the trainer's transforms, then logged a disassembly and found no globals).
@flow(name="ctxsim-pipeline", log_prints=False, persist_result=False)
def pipeline_flow(
    config: str | None = "configs/quickstart.yaml",
    overrides: list[str] | None = None,
    root: str | None = None,
    until: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The whole pipeline (or up to `until`) for one config file; reuses finished artefacts."""
    cfg = load_config(config, overrides, root)
    return execute(cfg, until=until, run_id=run_id)


def run_pipeline(
    config: str | None,
    overrides: list[str] | None = None,
    root: str | None = None,
    until: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Entry point for the CLI: picks the task runner from the config, then runs the flow."""
    cfg = load_config(config, overrides, root)
    if not os.environ.get("PREFECT_API_URL"):
        from ctxsim.flows.server_guard import tie_ephemeral_server_to_this_process

        tie_ephemeral_server_to_this_process()
    runner = make_task_runner(cfg.run)
    flow_ = pipeline_flow.with_options(task_runner=runner) if runner is not None else pipeline_flow
    with api_for_other_processes(cfg.run.task_runner):
        return flow_(
            config=str(Path(config)) if config else None,
            overrides=overrides,
            root=root,
            until=until,
            run_id=run_id,
        )


#: task runners whose shard tasks run in other interpreters (Ray's and Dask's workers, and the
#: process runner's spawned ones)
REMOTE_RUNNERS = ("ray", "dask", "process")


@contextmanager
def api_for_other_processes(task_runner: str) -> Iterator[None]:
    """Without a PREFECT_API_URL, the temporary API server started here, and its address given
    to the run's settings (which Ray, Dask and the process runner ship to their workers) and
    environment (which a local Ray or Dask cluster's workers inherit): a worker told no address
    started a server of its own on the same database and timed out ("Timed out while attempting
    to connect to ephemeral Prefect API server"), or, under the process runner, logged an
    "EventsWorker failed to process item" error for every task event. Stopped when the run
    ends."""
    if os.environ.get("PREFECT_API_URL") or task_runner not in REMOTE_RUNNERS:
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = SubprocessASGIServer()
    server.start()
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield
    finally:
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogHandler

        APILogHandler().flush()  # what is queued reaches the server before it stops
        EventsWorker.drain_all(timeout=5)
        os.environ.pop("PREFECT_API_URL", None)
        server.stop()
