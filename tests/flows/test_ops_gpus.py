"""GPUs where there are none: run.gpus_per_task and `ctxsim worker --gpus` on a GPU-less host.

run.gpus_per_task is honoured by the Ray runner where GPUs exist, never a silent hang without.

README "Scaling to N GPUs on one host": `ctxsim run --set run.task_runner=ray --set
run.max_workers=4 --set run.gpus_per_task=1`. A Ray task asking for a GPU that the cluster does
not have waits forever, so on a GPU-less cluster the request is dropped (with a warning).
"""

from __future__ import annotations

import pytest

from ctxsim.flows import ops
from ctxsim.flows.runners import shard_options, submit_options
from ctxsim.store.stage import RunParams


def _run(**kw: object) -> RunParams:
    return RunParams(**kw)


def test_no_gpus_requested_means_no_options() -> None:
    assert shard_options(_run(task_runner="ray"), cluster_gpus=lambda: 4) == {}
    assert shard_options(_run(task_runner="sequential", gpus_per_task=1)) == {}


def test_ray_with_gpus_reserves_them_per_task() -> None:
    opts = shard_options(_run(task_runner="ray", gpus_per_task=1), cluster_gpus=lambda: 4)
    assert opts == {"num_gpus": 1.0}
    opts = shard_options(_run(task_runner="ray", gpus_per_task=0.5), cluster_gpus=lambda: 1)
    assert opts == {"num_gpus": 0.5}


def test_ray_without_gpus_ignores_the_request_and_says_so() -> None:
    said: list[str] = []
    opts = shard_options(
        _run(task_runner="ray", gpus_per_task=1), said.append, cluster_gpus=lambda: 0
    )
    assert opts == {}
    assert len(said) == 1 and "no GPU" in said[0] and "gpus_per_task=1" in said[0]


def test_more_gpus_per_task_than_the_cluster_has_fails_fast() -> None:
    with pytest.raises(ValueError, match="2 GPU"):
        shard_options(_run(task_runner="ray", gpus_per_task=4), cluster_gpus=lambda: 2)


@pytest.mark.parametrize("runner", ["thread", "process", "dask"])
def test_other_runners_ignore_gpus_per_task_with_a_message(runner: str) -> None:
    said: list[str] = []
    opts = shard_options(
        _run(task_runner=runner, gpus_per_task=1), said.append, cluster_gpus=lambda: 8
    )
    assert opts == {} and len(said) == 1 and "only run.task_runner=ray" in said[0]


def test_submit_options_sets_ray_remote_options() -> None:
    pytest.importorskip("prefect_ray")
    from prefect_ray.context import RemoteOptionsContext

    with submit_options({"num_gpus": 1.0}):
        assert RemoteOptionsContext.get().current_remote_options == {"num_gpus": 1.0}
    assert RemoteOptionsContext.get().current_remote_options == {}
    with submit_options({}):
        assert RemoteOptionsContext.get().current_remote_options == {}


@pytest.mark.integration
def test_gpu_request_on_a_gpu_less_local_ray_is_dropped_not_left_waiting() -> None:
    """A real local Ray cluster without GPUs (what RayTaskRunner starts for `ctxsim run`)."""
    ray = pytest.importorskip("ray")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has GPUs")
    assert not ray.is_initialized()
    ray.init(num_cpus=1, include_dashboard=False, namespace="ctxsim-test")
    try:
        # Why: a task asking for a GPU the cluster lacks is never scheduled.
        stuck = ray.remote(num_gpus=1)(lambda: 1).remote()
        ready, _ = ray.wait([stuck], timeout=5)
        assert ready == []
        ray.cancel(stuck, force=True)

        said: list[str] = []
        opts = shard_options(RunParams(task_runner="ray", gpus_per_task=1), said.append)
        assert opts == {} and "no GPU" in said[0]
        assert ray.get(ray.remote(**opts or {"num_cpus": 1})(lambda: 2).remote(), timeout=60) == 2
    finally:
        ray.shutdown()


def test_worker_gpus_all_without_gpus_warns_about_the_cpu_fallback() -> None:
    assert "CPU worker" in ops.gpu_note("all", [], starting=False)
    assert ops.gpu_note("all", ["0", "1"], starting=True, detected=["0", "1"]) is None
    assert ops.gpu_note(None, [], starting=True) is None


def test_worker_gpu_indices_warn_only_when_starting_on_a_gpu_less_host() -> None:
    assert ops.gpu_note("0,1", ["0", "1"], starting=False, detected=[]) is None  # --dry-run
    assert "no GPU" in ops.gpu_note("0,1", ["0", "1"], starting=True, detected=[])
    assert ops.gpu_note("0,1", ["0", "1"], starting=True, detected=["0", "1"]) is None


def test_worker_cli_warns_on_stderr_and_still_prints_the_specs() -> None:
    import json

    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    res = CliRunner().invoke(
        app, ["worker", "--gpus", "all", "--dry-run"], env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert res.exit_code == 0, res.output
    assert "no GPU found" in res.stderr
    assert [s["name"] for s in json.loads(res.stdout)] == ["ctxsim-cpu0"]
