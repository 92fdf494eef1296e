"""Prefect settings that must be in place before `prefect` is imported.

With no PREFECT_API_URL a run uses Prefect's ephemeral mode; its database then lives under the
artefact root, telemetry is off, and start-up gets a generous timeout: a 2-core machine at load
4-7 took more than Prefect's 20 s, and more than 180 s, to boot the ephemeral API. When it still
does not start, :func:`server_start_failure` is the CLI's one line (Prefect's own message holds
the server's whole output: 164 lines).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

#: Prefect's setting: seconds its ephemeral API server may take to start (Prefect's default: 20)
STARTUP_TIMEOUT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
#: how Prefect's RuntimeError begins when that time passed (prefect/server/api/server.py)
STARTUP_TIMED_OUT = "Timed out while attempting to connect to ephemeral Prefect API server"

DEFAULTS = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    STARTUP_TIMEOUT: "600",
    "PREFECT_LOGGING_TO_API_BATCH_INTERVAL": "0.5",
    "PREFECT_UI_ENABLED": "false",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_USAGE_STATS_ENABLED": "0",  # the local Ray instance of run.task_runner=ray
}


def configure_prefect(root: str | Path) -> None:
    """Set defaults (never overriding what the user exported) and a SIGTERM handler."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
    if not os.environ.get("PREFECT_API_URL"):
        os.environ.setdefault("PREFECT_HOME", str(Path(root).resolve() / "_prefect"))
        # SQLite cannot create its database file in a missing directory.
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    _install_sigterm_handler()


def _install_sigterm_handler() -> None:
    """Turn SIGTERM into SystemExit so Prefect's context managers stop the ephemeral server."""

    def handler(signum: int, frame: object) -> None:  # pragma: no cover - exercised by signals
        sys.exit(128 + signum)

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. inside a worker's thread)
        pass


def server_start_failure(exc: BaseException) -> str | None:
    """One line for Prefect's ephemeral API server not starting in time (``exc``, or what it
    was raised from), saying what to do; None for any other error."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, RuntimeError) and STARTUP_TIMED_OUT in str(e):
            wait = os.environ.get(STARTUP_TIMEOUT, DEFAULTS[STARTUP_TIMEOUT])
            home = os.environ.get("PREFECT_HOME", "~/.prefect")
            return (
                f"Prefect's temporary API server (database under {home}) did not start within "
                f"{STARTUP_TIMEOUT}={wait} s: the machine is too loaded; wait and run the same "
                f"command again (finished work is kept), raise {STARTUP_TIMEOUT}, or point "
                "PREFECT_API_URL at a running server (`ctxsim server`)"
            )
        e = e.__cause__ or e.__context__
    return None
