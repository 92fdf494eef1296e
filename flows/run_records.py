"""Reading run records (ROOT/runs/<run-id>.json) for people: pipeline order, crashed runs.

A record is written "running" when a run starts and "completed", "failed" or "interrupted"
(Ctrl-C) when it ends; a run killed with SIGKILL never writes the end. A run whose command
fails after its flow wrote "completed" (Prefect's own state could not be saved: a full disk)
is rewritten "failed" (:func:`mark_ended`): a record never says completed for a failed run.
The record carries the process (host, pid and the pid's start time, so a recycled pid is not
mistaken for it), and a "running" record whose process no longer exists on this host is shown
as "crashed".
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/<pid>/stat), None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may contain spaces
    return stat.rsplit(")", 1)[1].split()[19]


def process_identity() -> dict[str, Any]:
    """Who writes this run record: host, pid and the pid's start time."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "pid_started": _start_time(pid)}


def process_alive(record: dict[str, Any]) -> bool | None:
    """Whether the process that wrote ``record`` still runs; None when this host cannot tell
    (another host, or a record from before pids were recorded)."""
    pid, host = record.get("pid"), record.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    started = record.get("pid_started")
    return started is None or _start_time(pid) in (None, started)


def mark_ended(root: str | Path, run_id: str, status: str, error: str) -> dict[str, Any] | None:
    """Rewrite run ``run_id``'s record as ``status`` ("failed", "interrupted") with ``error``,
    unless it already says so; the record (None when there is none or it cannot be written:
    on a full disk the old record stays, and the CLI's message says why)."""
    import contextlib
    import json
    import time

    from ctxsim.store.atomic import write_json_atomic

    path = Path(root).expanduser() / "runs" / f"{run_id}.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("status") == status:
        return record if isinstance(record, dict) else None
    record.update(status=status, error=error)
    record.setdefault("finished_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    with contextlib.suppress(OSError):
        write_json_atomic(path, record)
    return record


def for_display(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records as stored, with their stages in pipeline order, except that a "running" one
    whose process is gone reads "crashed"."""
    out = []
    for r in records:
        r = {**r, "stages": dict(stages_in_order(r))}
        if r.get("status") == "running" and process_alive(r) is False:
            r["status"] = "crashed"
            r["crashed_note"] = "its process is gone (killed?)"
        out.append(r)
    return out


def stages_in_order(record: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The record's stages in pipeline order, as `ctxsim run` prints them (records are stored
    with sorted keys, i.e. alphabetically)."""
    from ctxsim.tasks import STAGES

    order = {name: i for i, name in enumerate(STAGES)}
    stages = record.get("stages", {})
    return sorted(stages.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
