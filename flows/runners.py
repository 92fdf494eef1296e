"""Task runner from the `run` config section: how shard tasks are spread out.

sequential (tasks run one after another in the flow), thread, process, or the engines users
already operate: Dask (`prefect-dask`) and Ray (`prefect-ray`), local or at an existing address.
"""

from __future__ import annotations

from typing import Any

from tasks.base import RunParams


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
            raise ValueError("run.task_runner: dask needs `pip install prefect-dask`") from None
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
            raise ValueError("run.task_runner: ray needs `pip install prefect-ray`") from None
        init: dict[str, Any] = {"num_cpus": run.max_workers, "include_dashboard": False}
        return RayTaskRunner(
            address=run.runner_address, init_kwargs=None if run.runner_address else init
        )
    raise ValueError(
        f"run.task_runner: unknown runner {kind!r} (sequential, thread, process, dask, ray)"
    )
