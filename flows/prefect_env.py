"""Prefect settings that must be in place before `prefect` is imported.

With no PREFECT_API_URL a run uses Prefect's ephemeral mode; its database then lives under the
artefact root, telemetry is off, and start-up gets a generous timeout (2-core CI machines are
slow to boot the ephemeral API).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

DEFAULTS = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
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
