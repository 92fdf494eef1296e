"""`ctxsim plan`'s unit-cost cache: each piloted stage's measurement, kept per machine and
artefact fingerprint, so a later plan pilots only what it does not know yet.

Where: ``plan_cache_dir()`` (``$CTXSIM_PLAN_CACHE``, else ``~/.cache/ctxsim/plan``). A
measurement is keyed by this machine (CPU model and count, GPU) and the stage's artefact
fingerprint, which already covers its settings, models, code version and upstream; each file is
written atomically with a sha256 beside it and checked at read (store/checked.py: a mismatch is
moved aside, logged and piloted again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import tempfile
from dataclasses import asdict
from pathlib import Path

from ctxsim.store.checked import verified, write_checked
from ctxsim.store.cost_model import StageMeasure

log = logging.getLogger("ctxsim.plan")


def plan_cache_dir() -> Path:
    """Where plans keep their calibration: ``$CTXSIM_PLAN_CACHE``, else the user's cache dir."""
    env = os.environ.get("CTXSIM_PLAN_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ctxsim" / "plan"


def cache_writable(path: Path) -> bool:
    """Whether the unit-cost cache can be written (created if missing, a file probed):
    ``os.access`` says yes to root on a read-only mount, so writing is the test."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError:
        return False
    return True


def read_only_note(path: Path) -> str:
    """What a plan says when its cache cannot be written."""
    return (
        f"plan: the unit-cost cache {path} is read-only: its measurements are used as they are; "
        "stages it lacks are piloted in a temporary folder and not kept"
    )


def machine_key() -> str:
    """What a CPU-second depends on besides the stage: CPU model and count, the GPU if any."""
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    gpu = ""  # NVIDIA's driver lists its GPUs here (no torch import: a cached plan is quick)
    with contextlib.suppress(OSError):
        for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
            gpu += "".join(ln for ln in info.read_text().splitlines() if ln.startswith("Model"))
    ident = {
        "cpu": cpu or platform.processor(),
        "cpus": os.cpu_count(),
        "gpu": gpu,
        "machine": platform.machine(),
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


class UnitCosts:
    """Measured stages of earlier pilots on this machine, by stage and artefact fingerprint:
    one JSON file each, written atomically with its sha256 beside it, checked at read."""

    def __init__(self, root: Path) -> None:
        self.dir = Path(root) / "units" / machine_key()

    def _path(self, stage: str, fp: str) -> Path:
        return self.dir / f"{stage}-{fp}.json"

    def get(self, stage: str, fp: str) -> StageMeasure | None:
        path = self._path(stage, fp)
        if not verified(path, "plan: unit-cost cache file", log):
            return None
        try:
            return StageMeasure(**json.loads(path.read_text()))
        except (ValueError, TypeError) as e:  # a checksummed file of another shape
            log.warning("plan: unit-cost cache file %s unreadable (%s); piloting again", path, e)
            path.unlink(missing_ok=True)
            return None

    def put(self, m: StageMeasure, fp: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps(asdict(m), default=str)
        write_checked(self._path(m.stage, fp), lambda tmp: tmp.write_text(text))

    def get_base_rss(self) -> float | None:
        path = self.dir / "base_rss.json"
        if not verified(path, "plan: unit-cost cache file", log):
            return None
        return float(json.loads(path.read_text())["base_rss_mb"])

    def put_base_rss(self, mb: float) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"base_rss_mb": mb})
        write_checked(self.dir / "base_rss.json", lambda tmp: tmp.write_text(text))


def cached_speed_probe(bf16: bool) -> float:
    """The speed probe's step on this machine (models/training/speed_probe.py), measured once
    per machine, mode and torch version and kept in the plan cache (checked at read; a bad file
    is measured again; a read-only cache measures each time)."""
    import torch

    mode = "bf16" if bf16 else "float32"
    root = plan_cache_dir()
    path = UnitCosts(root).dir / f"speed-probe-{mode}-torch{torch.__version__}.json"
    if verified(path, "plan: speed probe cache file", log):
        try:
            return float(json.loads(path.read_text())["step_cpu_s"])
        except (ValueError, KeyError, TypeError) as e:
            log.warning("plan: speed probe file %s unreadable (%s); measuring again", path, e)
            path.unlink(missing_ok=True)
    from ctxsim.models.training.speed_probe import probe_step_cpu_s

    step = probe_step_cpu_s(bf16)
    if cache_writable(root):
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"step_cpu_s": step, "mode": mode, "torch": torch.__version__})
        write_checked(path, lambda tmp: tmp.write_text(text))
    return step
