"""`ctxsim plan`'s measurements: each stage of a pilot run in this process, with its CPU and
wall seconds, rows, artefact bytes and peak resident memory (sampled while it runs)."""

from __future__ import annotations

import os
import resource
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxsim.flows.config import PipelineConfig
from ctxsim.flows.plan_cache import UnitCosts
from ctxsim.store.cost_model import StageMeasure


def release_freed_memory() -> None:
    """Hand the memory earlier stages freed back to the OS (glibc's ``malloc_trim``; nothing
    elsewhere), so a stage's start RSS is what is live and its growth is its own: without it,
    train's pilot grew into the pages embed had freed and measured 0.9 GB for a stage that
    peaks at 3 GB in a process of its own."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)


class RssSampler:
    """Peak resident memory of this process while a block runs (Linux /proc; else ru_maxrss)."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval, self.peak = interval, 0.0
        self._stop = threading.Event()

    @staticmethod
    def rss_mb() -> float:
        try:
            with open("/proc/self/statm") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except OSError:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.rss_mb())

    def __enter__(self) -> RssSampler:
        self.peak = self.start = self.rss_mb()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss_mb())


def _dir_bytes(path: Path, patterns: tuple[str, ...] = ("**/*",)) -> int:
    """Bytes of the files under ``path`` matching any of ``patterns`` (each file once; none:
    0)."""
    files = {p for pattern in patterns for p in Path(path).glob(pattern) if p.is_file()}
    return sum(p.stat().st_size for p in files)


def run_measured(
    cfg: PipelineConfig,
    stages: list[str] | None = None,
    costs: UnitCosts | None = None,
    on_stage: Callable[[str, str], None] | None = None,
) -> dict[str, StageMeasure]:
    """Run the config's stages in this process (no Prefect), measuring each: CPU seconds of the
    process (time.process_time), rows, artefact bytes and peak RSS. Reuses published stages
    (then their CPU seconds are 0 and the reuse is visible as such). With ``costs``, a stage
    measured before (same machine, same fingerprint) and published is not run: its recorded
    measurement is returned (``stats["_from_cache"]``); a published stage with no measurement
    is run again, so it is measured. ``on_stage(name, "cached" | "running" | "done")`` reports
    progress."""
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import resolve_stage, run_stage_locally
    from ctxsim.tasks import load_stage

    store = ArtefactStore(cfg.run.root)
    arts: dict[str, Any] = {}
    out: dict[str, StageMeasure] = {}
    for name in stages or cfg.stage_names:
        stage = load_stage(name)
        upstream = {i: arts[i] for i in stage.inputs_for(cfg.stages[name])}
        optional = stage.optional_inputs_for(cfg.stages[name])
        upstream |= {i: arts[i] for i in optional if i in arts}
        plan = resolve_stage(stage, cfg.stages[name], cfg.run, store, upstream)
        if costs is not None:
            known = costs.get(name, plan.fingerprint)
            existing = plan.published()
            if known is not None and existing is not None:
                arts[name] = existing
                out[name] = replace(known, stats={**known.stats, "_from_cache": True})
                if stage.fixed_size_files and not known.fixed_disk_bytes:  # cached before
                    fixed = _dir_bytes(existing.path, stage.fixed_size_files)
                    out[name] = replace(out[name], fixed_disk_bytes=fixed)
                if on_stage:
                    on_stage(name, "cached")
                continue
            if existing is not None:  # published, never measured here: measure it
                shutil.rmtree(store.final_dir(name, plan.fingerprint), ignore_errors=True)
            warm_imports()
        if on_stage:
            on_stage(name, "running")
        release_freed_memory()
        c0, t0 = time.process_time(), time.perf_counter()
        with RssSampler() as rss:
            art, reused = run_stage_locally(plan)
        arts[name] = art
        out[name] = StageMeasure(
            stage=name,
            cpu_s=0.0 if reused else time.process_time() - c0,
            wall_s=0.0 if reused else time.perf_counter() - t0,
            rows=art.num_rows,
            disk_bytes=_dir_bytes(art.path),
            peak_rss_mb=rss.peak,
            start_rss_mb=rss.start,
            stats=dict(art.stats),
            fixed_disk_bytes=_dir_bytes(art.path, stage.fixed_size_files),
        )
        if costs is not None and not reused:
            costs.put(out[name], plan.fingerprint)
        if on_stage:
            on_stage(name, "done")
    return out


#: imported before any measurement (sentence_transformers: ~120 MB and seconds of CPU that the
#: first encoder stage, embed, was charged and the plan then scaled by the corpus ratio)
WARM_MODULES = (
    "torch",
    "transformers",
    "sentence_transformers",
    "sklearn.feature_extraction.text",
    "scipy.sparse",
)


def warm_imports() -> None:
    """Import the heavy libraries before measuring: their one-off import time would otherwise be
    charged to the first pilot's stages and then scaled up with them."""
    import importlib

    for mod in WARM_MODULES:
        try:
            importlib.import_module(mod)
        except ImportError:  # pragma: no cover - optional for some configs
            pass
