"""Fault injection for resume drills and tests: make one shard of one stage fail on purpose.

``CTXSIM_FAULT_FILE=/path/fault.json`` arms it; while that file exists and holds
``{"stage": "queries", "shard": 1, "kind": "permanent"}`` (optionally ``"root": "/abs/root"``
to hit only runs on that artefact root), computing that shard raises
(``permanent`` -> an InputError, which Prefect does not retry; ``transient`` -> OSError, retried;
``enospc`` -> the OSError a full disk raises, naming a file in the shard's partial folder), or
with ``"kind": "delay", "seconds": 60`` sleeps first (a window to SIGKILL or Ctrl-C a run
mid-stage).
Delete the file and retry the run: finished shards are reused, the failed one is computed.
Unset (the default) it costs one ``os.environ`` lookup per shard.

Retry drills: every attempt at the armed shard appends a line to ``<fault file>.attempts``, and
``"times": N`` makes the fault fire on the first N attempts only (a transient fault that a
retry gets past; unset: every attempt).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from ctxsim.store.errors import InputError


class InjectedFault(InputError):
    """A deliberate, permanent failure (bad-input class: not retried, one line in the CLI)."""


class InjectedTransientFault(OSError):
    """A deliberate transient failure (I/O class: retried by Prefect)."""


def maybe_fail(stage: str, shard: int, root: str | Path | None = None) -> None:
    path = os.environ.get("CTXSIM_FAULT_FILE")
    if not path or not Path(path).exists():
        return
    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return
    if spec.get("stage") != stage or int(spec.get("shard", -1)) != shard:
        return
    if spec.get("root") and (root is None or Path(spec["root"]).resolve() != Path(root).resolve()):
        return
    log = Path(f"{path}.attempts")
    with open(log, "a") as fh:  # one line per attempt (a retry drill counts them)
        fh.write(f"{os.getpid()}\n")
    times = spec.get("times")
    if times is not None and len(log.read_text().splitlines()) > int(times):
        return
    if spec.get("kind") == "delay":
        import time

        time.sleep(float(spec.get("seconds", 60)))
        return
    if spec.get("kind") == "enospc":
        where = Path(root or ".") / stage / f"part-{shard:05d}.parquet"
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where))
    msg = f"injected fault in {stage} shard {shard} (armed by {path})"
    if spec.get("kind", "permanent") == "transient":
        raise InjectedTransientFault(msg)
    raise InjectedFault(msg)
