"""Operations: a local Prefect server, scheduled serving on one host, and GPU/CPU workers.

These wrap Prefect's own commands (``prefect server start``, ``flow.serve``, ``prefect worker
start``) rather than re-implementing them: what is added is the safe defaults (loopback only,
telemetry off, one flow run per GPU) and a single place — :func:`worker_specs` — that says what
a worker is, so ``ctxsim worker`` and the docker-compose worker services (flows/ops_compose.py)
cannot drift apart (tests/flows/test_ops_compose.py compares them).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxsim.store.errors import InputError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4200
DEFAULT_POOL = "ctxsim"
TELEMETRY_OFF = {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def prefect_exe() -> str:
    """The `prefect` console script of this interpreter's environment (not whatever is on PATH)."""
    exe = Path(sys.executable).with_name("prefect")
    return str(exe) if exe.exists() else (shutil.which("prefect") or "prefect")


# ---- server ---------------------------------------------------------------------------------


class ServerStartError(RuntimeError):
    """The Prefect server exited while starting (its log tail says why): not the user's input,
    not a bug of ours; ``ctxsim server`` prints it as one line."""


@dataclass
class ServerInfo:
    """A started server: where it answers, which process it is, where its log and state live."""

    api_url: str
    pid: int
    home: Path
    log: Path
    database: str
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def stop_hint(self) -> str:
        return f"kill {self.pid}    (or: ctxsim server --stop --home {self.home})"


def api_url(host: str, port: int) -> str:
    return f"http://{host}:{port}/api"


def _auth_headers() -> dict[str, str]:
    """Basic-auth header when the server is protected (PREFECT_API_AUTH_STRING = 'user:pass')."""
    auth = os.environ.get("PREFECT_API_AUTH_STRING")
    if not auth:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}


def healthy(url: str, timeout: float = 2.0) -> bool:
    """True when ``GET <api>/health`` answers 200."""
    req = urllib.request.Request(url.rstrip("/") + "/health", headers=_auth_headers())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http(s) only
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(
    url: str, timeout: float = 180.0, proc: subprocess.Popen | None = None, log: Path | None = None
) -> None:
    """Poll the health endpoint; fail with the server's log tail if it dies or never answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if healthy(url):
            return
        if proc is not None and proc.poll() is not None:
            raise ServerStartError(f"Prefect server exited with code {proc.returncode}{_tail(log)}")
        time.sleep(0.5)
    raise TimeoutError(f"Prefect server at {url} not healthy after {timeout:.0f}s{_tail(log)}")


def _tail(log: Path | None, n: int = 30) -> str:
    if log is None or not log.exists():
        return ""
    lines = log.read_text(errors="replace").splitlines()[-n:]
    return f"; last lines of {log}:\n" + "\n".join(lines)


def server_env(
    home: Path, database_url: str | None = None, base: dict[str, str] | None = None
) -> dict[str, str]:
    """Environment of a server process: its own PREFECT_HOME (the SQLite file lives there unless
    PREFECT_SERVER_DATABASE_CONNECTION_URL points at PostgreSQL), telemetry off."""
    env = dict(os.environ if base is None else base)
    env.update(TELEMETRY_OFF)
    env["PREFECT_HOME"] = str(home)
    env.pop("PREFECT_API_URL", None)  # the server must not try to talk to another server
    if database_url:
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = database_url
    return env


def database_of(env: dict[str, str], home: Path) -> str:
    url = env.get("PREFECT_SERVER_DATABASE_CONNECTION_URL") or env.get(
        "PREFECT_API_DATABASE_CONNECTION_URL"
    )
    if url:
        return "postgresql" if url.startswith("postgresql") else url.split(":", 1)[0]
    return f"sqlite ({home / 'prefect.db'})"


def server_command(host: str, port: int, ui: bool = True) -> list[str]:
    return [
        prefect_exe(),
        "server",
        "start",
        "--host",
        host,
        "--port",
        str(port),
        "--ui" if ui else "--no-ui",
    ]


def start_server(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    home: str | Path | None = None,
    database_url: str | None = None,
    ui: bool = True,
    timeout: float = 180.0,
    extra_env: dict[str, str] | None = None,
) -> ServerInfo:
    """Start ``prefect server start`` detached, wait until healthy, write a pid file in ``home``.

    Binds to 127.0.0.1 unless ``host`` says otherwise. The database is SQLite under ``home``
    (default ``~/.ctxsim/server``) unless PREFECT_SERVER_DATABASE_CONNECTION_URL (or
    ``database_url``) names a PostgreSQL database (``postgresql+asyncpg://user:pw@host/db``).
    """
    home = Path(home or Path.home() / ".ctxsim" / "server").expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    url = api_url(host, port)
    if healthy(url):
        raise InputError(f"something already answers at {url}; stop it or choose --port")
    env = server_env(home, database_url)
    env.update(extra_env or {})
    log = home / "server.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            server_command(host, port, ui),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (home / "server.pid").write_text(f"{proc.pid}\n{url}\n")
    try:
        wait_healthy(url, timeout, proc, log)
    except BaseException:
        stop_process(proc.pid)
        raise
    return ServerInfo(url, proc.pid, home, log, database_of(env, home), proc)


def stop_process(pid: int, timeout: float = 20.0) -> bool:
    """SIGTERM the process group of ``pid`` (the server and its uvicorn children), then SIGKILL."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return False
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            # Reap it if it is our child; otherwise just probe.
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        except ChildProcessError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
        time.sleep(0.2)
    else:
        os.killpg(pgid, signal.SIGKILL)
    return True


def stop_server(home: str | Path | None = None) -> int | None:
    """Stop the server whose pid file is in ``home``; returns its pid, or None if none ran."""
    home = Path(home or Path.home() / ".ctxsim" / "server").expanduser().resolve()
    pidfile = home / "server.pid"
    if not pidfile.exists():
        return None
    pid = int(pidfile.read_text().split()[0])
    stopped = stop_process(pid)
    pidfile.unlink(missing_ok=True)
    return pid if stopped else None


# ---- workers --------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerSpec:
    """One worker process: its name, argv and the environment it adds to the inherited one."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str]


def detect_gpus() -> list[str]:
    """GPU indices this host exposes (respecting an existing CUDA_VISIBLE_DEVICES)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no torch/CUDA: no GPUs
        return []


def parse_gpus(text: str | None) -> list[str]:
    """``"0,1"`` -> ["0", "1"]; ``"all"`` -> every detected GPU; None/"" -> no GPUs."""
    if not text:
        return []
    if text.strip() == "all":
        return detect_gpus()
    gpus = [g.strip() for g in text.split(",")]
    for g in gpus:
        if not g or not (g.isdigit() or g.startswith(("GPU-", "MIG-"))):
            raise InputError(f"--gpus {text!r}: expected indices like 0,1 or UUIDs, or 'all'")
    if len(set(gpus)) != len(gpus):
        raise InputError(f"--gpus {text!r}: a GPU is listed twice")
    return gpus


def gpu_note(
    text: str | None, gpus: list[str], starting: bool, detected: list[str] | None = None
) -> str | None:
    """What to warn about before starting workers for ``--gpus text`` (parsed: ``gpus``).

    ``--gpus all`` on a host without GPUs falls back to CPU workers; explicit indices on such a
    host start GPU-named workers whose flow runs will find no GPU (fine for --dry-run/--compose,
    which describe another host, so only said when ``starting``).
    """
    if not text:
        return None
    if text.strip() == "all" and not gpus:
        return "--gpus all: no GPU found on this host; starting CPU worker(s) instead"
    if starting and gpus:
        found = detect_gpus() if detected is None else detected
        if not found:
            return (
                f"--gpus {text}: no GPU found on this host; the workers start, but their flow "
                "runs will find no GPU and run on the CPU"
            )
    return None


def worker_specs(
    pool: str = DEFAULT_POOL,
    gpus: list[str] | None = None,
    n_cpu: int = 1,
    name_prefix: str = "ctxsim",
    work_queue: str | None = None,
    limit: int = 1,
    prefect: str = "prefect",
) -> list[WorkerSpec]:
    """What `ctxsim worker` starts: one process worker per GPU, pinned by CUDA_VISIBLE_DEVICES
    and limited to one flow run at a time (a run owns its GPU); without GPUs, ``n_cpu`` CPU
    workers with no GPU visible. The same list defines the docker-compose worker services."""
    if n_cpu < 1 and not gpus:
        raise InputError("need at least one worker: give --gpus or --cpu-workers >= 1")
    if limit < 1:
        raise InputError(f"--limit must be >= 1, got {limit}")

    def argv(name: str) -> tuple[str, ...]:
        cmd = [
            prefect,
            "worker",
            "start",
            "--pool",
            pool,
            "--type",
            "process",
            "--name",
            name,
            "--limit",
            str(limit),
        ]
        if work_queue:
            cmd += ["--work-queue", work_queue]
        return tuple(cmd)

    if gpus:
        return [
            WorkerSpec(
                f"{name_prefix}-gpu{g}", argv(f"{name_prefix}-gpu{g}"), {"CUDA_VISIBLE_DEVICES": g}
            )
            for g in gpus
        ]
    return [
        WorkerSpec(
            f"{name_prefix}-cpu{i}", argv(f"{name_prefix}-cpu{i}"), {"CUDA_VISIBLE_DEVICES": ""}
        )
        for i in range(n_cpu)
    ]


def start_workers(
    specs: list[WorkerSpec], log_dir: Path | None = None, base_env: dict[str, str] | None = None
) -> list[subprocess.Popen]:
    """Start every worker (each its own process group); logs to ``log_dir/<name>.log`` if given."""
    procs = []
    for spec in specs:
        env = dict(os.environ if base_env is None else base_env)
        env.update(TELEMETRY_OFF)
        env.update(spec.env)
        argv = list(spec.argv)
        if argv[0] == "prefect":
            argv[0] = prefect_exe()
        out: Any = None
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            out = open(log_dir / f"{spec.name}.log", "ab")  # noqa: SIM115 - closed below
        try:
            procs.append(
                subprocess.Popen(
                    argv,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT if out else None,
                    start_new_session=True,
                )
            )
        finally:
            if out is not None:
                out.close()
    return procs


def run_workers(specs: list[WorkerSpec], log_dir: Path | None = None) -> int:
    """Run workers in the foreground; Ctrl-C / SIGTERM stops them all. Returns the worst exit."""
    procs = start_workers(specs, log_dir)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        # Signal every worker before waiting on any: if this process is killed while it waits
        # (a supervisor's SIGKILL after its grace period), no worker is left unsignalled.
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            if p.poll() is None:
                stop_process(p.pid)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(0.5)
            if not stopping and any(p.poll() not in (None, 0) for p in procs):
                stop(signal.SIGTERM, None)  # one worker died: do not limp on silently
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 0 if stopping else max((p.returncode or 0) for p in procs)


# ---- single-host scheduling -----------------------------------------------------------------
def serve_pipeline(
    config: str,
    cron: str | None,
    name: str = "ctxsim-serve",
    overrides: list[str] | None = None,
    root: str | None = None,
    until: str | None = None,
    run_id: str | None = None,
    limit: int = 1,
) -> None:
    """Serve the pipeline flow from this process with a cron schedule (Prefect ``flow.serve``).

    Runs execute here, one at a time by default, until interrupted. Needs PREFECT_API_URL (a
    server from ``ctxsim server``); ephemeral mode would lose the schedule with the process.
    """
    from ctxsim.flows.config import load_config
    from ctxsim.flows.pipeline import pipeline_flow

    config_path = str(Path(config).resolve())
    from ctxsim.flows.pipeline import select_stages

    select_stages(load_config(config_path, overrides, root), until)  # fail fast, before serving
    if cron is not None:
        from prefect.client.schemas.schedules import CronSchedule
        from pydantic import ValidationError

        try:
            CronSchedule(cron=cron)
        except ValidationError as e:
            why = "; ".join(str(x["msg"]).removeprefix("Value error, ") for x in e.errors())
            raise InputError(f"--cron {cron!r}: {why}") from None
    params: dict[str, Any] = {
        "config": config_path,
        "overrides": overrides or [],
        "root": root,
        "until": until,
        "run_id": run_id,
    }
    pipeline_flow.serve(
        name=name, cron=cron, parameters=params, limit=limit, print_starting_message=True
    )
