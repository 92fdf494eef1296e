"""Helpers for the operations tests: real Prefect servers, workers and CLI calls on loopback."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

from ctxsim.flows import ops

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
OPS_CONFIG = "tests/ops_config.yaml"
SPINE = ("shard", "contexts", "queries")
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_extra_env() -> dict[str, str]:
    """Fast scheduler/late-run loops so a test sees scheduled runs within seconds."""
    return {
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
        "PREFECT_SERVER_SERVICES_LATE_RUNS_ENABLED": "false",
        "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
    }


def client_env(api_url: str, home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ops.TELEMETRY_OFF)
    env.update(
        PREFECT_API_URL=api_url,
        PREFECT_HOME=str(home / "client"),
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        PREFECT_WORKER_QUERY_SECONDS="1",
        PREFECT_WORKER_PREFETCH_SECONDS="2",
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


def cli(
    args: list[str], env: dict[str, str], timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess:
    """Run `ctxsim ...` or `prefect ...` from this venv in the repository root."""
    exe = str(BIN / args[0])
    res = subprocess.run(
        [exe, *args[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and res.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
        )
    return res


def run_deployment(name: str, params: dict[str, str], env: dict[str, str]) -> str:
    """`prefect deployment run NAME --param k=v ...`; returns the flow run id."""
    args = ["prefect", "deployment", "run", name]
    for k, v in params.items():
        args += ["--param", f"{k}={v}"]
    out = cli(args, env).stdout
    m = re.search(r"UUID: ([0-9a-f-]{36})", out)
    assert m, out
    return m.group(1)


@contextlib.contextmanager
def client(api_url: str, auth: str | None = None) -> Iterator[Any]:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    updates: dict[Any, Any] = {PREFECT_API_URL: api_url}
    if auth:
        updates[PREFECT_API_AUTH_STRING] = auth
    with temporary_settings(updates=updates), get_client(sync_client=True) as c:
        yield c


def wait_flow_run(
    api_url: str,
    run_id: str,
    timeout: float = 420,
    auth: str | None = None,
    logs: Path | None = None,
) -> str:
    """Poll until the flow run is terminal; returns its state type (COMPLETED, FAILED, ...)."""
    deadline = time.monotonic() + timeout
    state = "?"
    while time.monotonic() < deadline:
        with client(api_url, auth) as c:
            fr = c.read_flow_run(UUID(run_id))
        state = fr.state.type.value if fr.state else "?"
        if state in TERMINAL:
            return state
        time.sleep(1.0)
    tail = ""
    if logs is not None:
        for f in sorted(logs.glob("*.log")):
            tail += f"\n--- {f.name}\n" + "\n".join(
                f.read_text(errors="replace").splitlines()[-40:]
            )
    raise AssertionError(f"flow run {run_id} still {state} after {timeout}s{tail}")


def start_cli_workers(
    env: dict[str, str], log_dir: Path, n: int = 2, pool: str = "ctxsim"
) -> subprocess.Popen:
    """`ctxsim worker --cpu-workers N` in its own process group."""
    log_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            str(BIN / "ctxsim"),
            "worker",
            "--pool",
            pool,
            "--cpu-workers",
            str(n),
            "--log-dir",
            str(log_dir),
        ],
        cwd=REPO,
        env=env,
        stdout=open(log_dir / "ctxsim-worker.out", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_group(proc: subprocess.Popen, timeout: float = 30, grace: float = 5) -> None:
    """SIGTERM a process group we started; SIGTERM again after ``grace`` seconds (a second
    interrupt is how Prefect's workers and servers are told not to wait: a lone `prefect worker
    start` sat the full 30 s on one), then SIGKILL."""
    if proc.poll() is not None:
        return
    for wait in (grace, max(timeout - grace, 0.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def artefact_digests(root: Path, stages: tuple[str, ...] = SPINE) -> dict[str, dict[str, str]]:
    """sha256 of every part and file of each stage's (single) published artefact under root."""
    import json

    out: dict[str, dict[str, str]] = {}
    for stage in stages:
        dirs = [d for d in (root / stage).iterdir() if (d / "_MANIFEST.json").exists()]
        assert len(dirs) == 1, f"{stage}: expected one artefact under {root}, found {dirs}"
        m = json.loads((dirs[0] / "_MANIFEST.json").read_text())
        out[stage] = {p["file"]: p["sha256"] for p in m["parts"] + m["files"]}
        out[stage]["fingerprint"] = m["fingerprint"]
    return out
