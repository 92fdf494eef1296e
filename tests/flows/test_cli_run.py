"""`ctxsim run` against a cluster it cannot reach: one clear line, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import ctxsim.flows.pipeline
from ctxsim.flows.cli import app


def _unreachable(*args: object, **kwargs: object) -> None:
    raise ConnectionError("ray client connection timeout")


def test_unreachable_ray_cluster_is_one_error_line_with_the_auth_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ctxsim.flows.pipeline, "run_pipeline", _unreachable)
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--root",
            str(tmp_path),
            "--set",
            "run.task_runner=ray",
            "--set",
            "run.runner_address=ray://127.0.0.1:1",
        ],
    )
    assert res.exit_code == 1
    assert "cannot reach the ray cluster at run.runner_address=ray://127.0.0.1:1" in res.stderr
    assert "RAY_AUTH_MODE=token" in res.stderr
    assert "Traceback" not in res.output


def test_connection_errors_without_a_cluster_address_are_not_relabelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ctxsim.flows.pipeline, "run_pipeline", _unreachable)
    res = CliRunner().invoke(app, ["run", "--root", str(tmp_path)])
    assert isinstance(res.exception, ConnectionError)


def test_flows_leave_print_to_the_libraries() -> None:
    """Prefect's log_prints patch turns print() into log records, which blinds libraries that
    capture stdout to parse it: dill's nestedglobals (datasets' fingerprint of the trainer's
    transforms) then logged a bytecode disassembly at train time and found no globals."""
    from ctxsim.flows.stage_flows import pipeline, stage_flow

    for f in (ctxsim.flows.pipeline.pipeline_flow, pipeline, stage_flow):
        assert f.log_prints is False, f.name


def test_a_dask_run_without_a_server_shares_its_own_with_the_workers(tmp_path: Path) -> None:
    """Without PREFECT_API_URL the run's temporary server is the workers' too: each worker used
    to boot one of its own on the same database (migrations racing: "duplicate column name"),
    and the workers' events failed to reach it ("EventsWorker failed to process item")."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    argv = [sys.executable, "-m", "ctxsim.flows.cli", "run", "--config"]
    argv += [str(REPO / "configs" / "quickstart.yaml"), "--until", "contexts", "--no-progress"]
    for kv in ("task_runner=dask", "max_workers=2", "torch_threads=1", f"root={tmp_path}"):
        argv += ["--set", f"run.{kv}"]
    res = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "contexts       completed" in out
    for bad in ("failed to process", "OperationalError", "Error logging to API", "Traceback"):
        assert bad not in out, out[-3000:]


def test_workers_in_other_processes_are_handed_the_runs_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray and Dask ship the run's settings to their workers and a local cluster's workers
    inherit its environment: both carry the address of the server this run started."""
    import os

    import httpx
    from prefect.context import serialize_context

    from ctxsim.flows.pipeline import api_for_other_processes

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with api_for_other_processes("sequential"):  # one interpreter: Prefect's own ephemeral mode
        assert "PREFECT_API_URL" not in os.environ
    with api_for_other_processes("ray"):
        url = os.environ["PREFECT_API_URL"]
        assert serialize_context()["settings_context"]["settings"]["api"]["url"] == url
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    assert "PREFECT_API_URL" not in os.environ
    with pytest.raises(httpx.TransportError):  # stopped with the run
        httpx.get(f"{url}/health", timeout=5)
