"""Task runner from the `run` config section: how shard tasks are spread out.

sequential (tasks run one after another in the flow), thread, process, or the engines users
already operate: Dask (`prefect-dask`) and Ray (`prefect-ray`), local or at an existing address.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ctxsim.flows.config import ConfigError
from ctxsim.store.stage import RunParams


def make_task_runner(run: RunParams) -> Any | None:
    kind = run.task_runner
    if kind == "sequential":
        return None
    if kind == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=run.max_workers)
    if kind == "process":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner(max_workers=run.max_workers)
    if kind == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError:
            raise ConfigError("run.task_runner: dask needs `pip install prefect-dask`") from None
        if run.runner_address:
            return DaskTaskRunner(address=run.runner_address)
        return DaskTaskRunner(
            cluster_kwargs={
                "n_workers": run.max_workers,
                "threads_per_worker": 1,
                "processes": True,
            }
        )
    if kind == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError:
            raise ConfigError("run.task_runner: ray needs `pip install prefect-ray`") from None
        init: dict[str, Any] = {"num_cpus": run.max_workers, "include_dashboard": False}
        return RayTaskRunner(
            address=run.runner_address, init_kwargs=None if run.runner_address else init
        )
    raise ConfigError(
        f"run.task_runner: unknown runner {kind!r} (sequential, thread, process, dask, ray)"
    )


def shard_options(
    run: RunParams,
    log: Callable[[str], None] | None = None,
    cluster_gpus: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """Ray ``remote`` options of every shard task of a run: ``run.gpus_per_task`` GPUs each.

    Only Ray schedules by GPU (``num_gpus``); the other runners ignore the setting (logged).
    A Ray task asking for a GPU the cluster does not have would wait forever, so when the
    cluster (the local one started for the run, or the one at ``run.runner_address``) has no
    GPU at all the request is dropped with a warning and shards run on CPU; asking for more
    GPUs per task than the cluster has in total fails at once. Call it inside the flow, once
    the task runner has connected to its cluster.
    """
    want = run.gpus_per_task
    if want < 0:
        raise ConfigError(f"run.gpus_per_task must be >= 0, got {want:g}")
    if want == 0 or run.task_runner == "sequential":
        return {}
    say = log or (lambda msg: None)
    if run.task_runner != "ray":
        say(
            f"run.gpus_per_task={want:g} ignored: only run.task_runner=ray reserves GPUs per "
            f"task ({run.task_runner} shards use whatever GPU their process sees)"
        )
        return {}
    have = (cluster_gpus or _ray_cluster_gpus)()
    if have <= 0:
        say(
            f"run.gpus_per_task={want:g} ignored: the Ray cluster has no GPU (a task asking "
            "for one would wait forever); shards run on CPU"
        )
        return {}
    if want > have:
        raise ConfigError(
            f"run.gpus_per_task={want:g} but the Ray cluster has {have:g} GPU(s) in all: no "
            "shard task could ever be scheduled"
        )
    return {"num_gpus": want}


@contextlib.contextmanager
def submit_options(options: dict[str, Any]) -> Iterator[None]:
    """Apply :func:`shard_options` to the ``.submit`` calls made inside the block."""
    if not options:
        yield
        return
    from prefect_ray.context import remote_options

    with remote_options(**options):
        yield


def _ray_cluster_gpus() -> float:
    """GPUs of the Ray cluster this process is connected to (the RayTaskRunner's)."""
    import ray

    if not ray.is_initialized():
        return 0.0
    return float(ray.cluster_resources().get("GPU", 0.0))
