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


@pytest.mark.parametrize("runner", ["ray", "process"])
def test_workers_in_other_processes_are_handed_the_runs_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: str
) -> None:
    """Ray, Dask and the process runner ship the run's settings to their workers and a local
    cluster's workers inherit its environment: both carry the address of the server this run
    started."""
    import os

    import httpx
    from prefect.context import serialize_context

    from ctxsim.flows.pipeline import api_for_other_processes

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with api_for_other_processes("sequential"):  # one interpreter: Prefect's own ephemeral mode
        assert "PREFECT_API_URL" not in os.environ
    with api_for_other_processes(runner):
        url = os.environ["PREFECT_API_URL"]
        assert serialize_context()["settings_context"]["settings"]["api"]["url"] == url
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    assert "PREFECT_API_URL" not in os.environ
    with pytest.raises(httpx.TransportError):  # stopped with the run
        httpx.get(f"{url}/health", timeout=5)
