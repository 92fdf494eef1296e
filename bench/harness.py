"""Tiny benchmark harness shared by every ``bench/bench_<stage>.py``.

Why not pytest-benchmark or asv: a benchmark here is one script comparing our way with the naive
way and the library a user would pick, in ONE run on the same machine, and the result must be a
committed JSON + markdown file that carries the machine it was measured on. That needs five small
helpers, not a framework.

API: ``machine_info()``, ``timeit(fn, repeat, warmup) -> list[float]``, ``median(xs)``,
``peak_rss_mb()`` / ``peak_rss()``, ``reset_peak_rss()``, ``traced_peak()`` (tracemalloc context
manager), ``run_isolated(fn, *args)`` (fresh process, returns its result and its own peak RSS) and
``write_results(name, rows, meta)``.
"""

from __future__ import annotations

import datetime as _dt
import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_VERBOSE",
    "TORCH_NUM_THREADS",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001 - not installed or no metadata
        return None


def machine_info() -> dict[str, Any]:
    """Cores, RAM, CPU model, OS and library versions: what a reader needs to compare numbers."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "ram_gb": _ram_gb(),
        "python": sys.version.split()[0],
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "pyarrow": _version("pyarrow"),
    }
    try:
        info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    info["env"] = {k: os.environ[k] for k in _THREAD_VARS if k in os.environ}
    return info


def timeit(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of ``repeat`` calls of ``fn()`` after ``warmup`` unrecorded calls."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median(xs: Sequence[float]) -> float:
    """Median (the figure every benchmark reports; robust to one noisy run on a shared box)."""
    if not xs:
        raise ValueError("median of an empty sequence")
    return float(statistics.median(xs))


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB.

    Reads ``VmHWM`` from /proc (resettable with :func:`reset_peak_rss`), else
    ``resource.getrusage`` (ru_maxrss is KiB on Linux, bytes on macOS; never resettable).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru / 1024**2 if sys.platform == "darwin" else ru / 1024


peak_rss = peak_rss_mb  # the name other briefs use


def current_rss_mb() -> float:
    """Current resident set size in MiB (Linux /proc; falls back to the peak)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0, ``echo 5 > /proc/self/clear_refs``).

    Returns False where that is not possible; then measure in a fresh process with
    :func:`run_isolated` instead.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class TracedPeak:
    """Filled in when the :func:`traced_peak` block exits."""

    peak_mb: float = 0.0
    current_mb: float = 0.0


@contextmanager
def traced_peak() -> Iterator[TracedPeak]:
    """Peak Python-heap allocation (tracemalloc) inside the block, in MiB.

    Sees Python/numpy allocations only (not C libraries with their own allocator); use RSS for
    those. Slows allocation-heavy code, so never time inside this block.
    """
    res = TracedPeak()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    try:
        yield res
    finally:
        cur, peak = tracemalloc.get_traced_memory()
        res.peak_mb = max(0, peak - base) / 1024**2
        res.current_mb = max(0, cur - base) / 1024**2
        if not was_tracing:
            tracemalloc.stop()


def _isolated_entry(fn: Callable[..., Any], args: tuple, kwargs: dict, q: Any) -> None:
    try:
        base = current_rss_mb()
        res = fn(*args, **kwargs)
        q.put(("ok", res, peak_rss_mb(), base))
    except BaseException as e:  # noqa: BLE001 - report any failure to the parent
        q.put(("err", f"{type(e).__name__}: {e}", peak_rss_mb(), 0.0))


def run_isolated(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """Run ``fn(*args, **kwargs)`` in a fresh (spawned) process.

    Returns ``(result, peak_rss_mb, baseline_rss_mb)``: the child's own peak RSS, unpolluted by
    what this process already holds, and its RSS before ``fn`` ran (interpreter + imports of the
    module defining ``fn``). ``fn`` must be importable (module-level) and its result picklable.
    """
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_isolated_entry, args=(fn, args, kwargs, q))
    p.start()
    status, res, peak, base = q.get()
    p.join()
    if status != "ok":
        raise RuntimeError(f"isolated run of {getattr(fn, '__name__', fn)} failed: {res}")
    return res, peak, base


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if 0.99 <= abs(v) < 1:  # agreements near 1 (Spearman 0.9983 vs 0.9990) stay apart
            return f"{v:.5f}".rstrip("0").rstrip(".")
        if v == 0 or 0.01 <= abs(v) < 1e6:
            return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 100 else f"{v:,.1f}"
        return f"{v:.3g}"
    if v is None:
        return ""
    return str(v).replace("|", "\\|").replace("\n", " ")


def pivot_by_k(rows: list[dict[str, Any]], keys: Sequence[str], value: str) -> list[dict[str, Any]]:
    """One row per combination of ``keys``, one ``k<k>`` column per |Cs| (the Table 7 layout)."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = tuple(r[k] for k in keys)
        out.setdefault(key, dict(zip(keys, key, strict=True)))[f"k{r['k']}"] = r[value]
    return list(out.values())


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """Rows (dicts) as a GitHub markdown table; columns in first-seen order."""
    if not rows:
        return "_no rows_\n"
    cols: list[str] = []
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """How a bench was called, for its results' ``command``: ``python -m MODULE ARGS``."""
    return " ".join([Path(sys.executable).name, "-m", module, *(argv or sys.argv[1:])])


def git_commit() -> str | None:
    """The checkout's commit (``-dirty`` when tracked files differ from it), None outside git:
    recorded by `write_results` so a result names the code that produced it."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def write_results(
    name: str,
    rows: list[dict[str, Any]],
    meta: dict[str, Any] | None = None,
    out_dir: Path | str | None = None,
    tables: dict[str, list[dict[str, Any]]] | None = None,
) -> tuple[Path, Path]:
    """Write ``<out_dir>/<name>.json`` and ``<name>.md`` (machine info at the top).

    ``rows`` is the main table; ``tables`` optional extra named tables (e.g. accuracy next to
    speed); ``meta`` free-form run settings (corpus, sizes, command line), to which the git
    commit of the checkout is added (``git_commit``, see `git_commit`). Written atomically
    (temp file + rename) so an interrupted run never leaves half a result.
    """
    out = Path(out_dir) if out_dir is not None else RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(meta or {})
    if "git_commit" not in meta and (commit := git_commit()):
        meta["git_commit"] = commit  # bench/results/INDEX.md reads it
    machine = machine_info()
    doc = {
        "name": name,
        "machine": machine,
        "meta": meta,
        "rows": rows,
        "tables": tables or {},
    }
    jpath, mpath = out / f"{name}.json", out / f"{name}.md"

    md = [f"# Benchmark: {name}", ""]
    md.append(
        f"Machine: {machine['cpu_model']}, {machine['cpu_usable']}/{machine['cpu_count']} cores "
        f"usable, {machine['ram_gb']} GB RAM; Python {machine['python']}, numpy "
        f"{machine['numpy']}, torch {machine['torch']}; {machine['platform']}; "
        f"load {machine.get('load_avg_1m')}; {machine['date_utc']}."
    )
    if machine["env"]:
        md.append("Env: " + ", ".join(f"{k}={v}" for k, v in machine["env"].items()) + ".")
    md.append("")
    if meta:
        md += [
            f"- **{k}**: {_fmt(v) if not isinstance(v, (dict, list)) else json.dumps(v)}"
            for k, v in meta.items()
        ]
        md.append("")
    md += [markdown_table(rows)]
    for tname, trows in (tables or {}).items():
        md += [f"## {tname}", "", markdown_table(trows)]

    for path, text in (
        (jpath, json.dumps(doc, indent=2, default=str) + "\n"),
        (mpath, "\n".join(md)),
    ):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return jpath, mpath


def run_artefacts(root: Path | str, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A finished run's record (ROOT/runs/RUN.json) and every artefact it names, by stage."""
    from ctxsim.store.artefacts import ArtefactStore

    rec = json.loads((Path(root) / "runs" / f"{run_id}.json").read_text())
    store = ArtefactStore(root)
    return rec, {n: store.require(n, rec["stages"][n]["fingerprint"]) for n in rec["stages"]}


def sole_manifest(root: Path | str, stage: str) -> dict[str, Any]:
    """The manifest of the one artefact a root holds for ``stage`` (a bench's own scratch
    root); more than one, or none, is refused."""
    found = sorted(Path(root).glob(f"{stage}/*/_MANIFEST.json"))
    if len(found) != 1:
        raise SystemExit(f"{root}/{stage}: {len(found)} artefacts, expected one")
    return json.loads(found[0].read_text())


def manifest_stages(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each stage of a run record as its artefact's manifest measured it: ``rows`` and
    ``cpu_s`` (None where the manifest is missing or recorded no CPU seconds). A reused
    artefact reports what computing it cost, so a run is charged its whole pipeline."""
    out: dict[str, dict[str, Any]] = {}
    for name, st in record["stages"].items():
        path = Path(st["path"]) / "_MANIFEST.json"
        manifest = json.loads(path.read_text()) if path.exists() else {}
        cpu = manifest.get("stats", {}).get("cpu_seconds")
        out[name] = {
            "rows": int(manifest.get("num_rows") or 0),
            "cpu_s": None if cpu is None else float(cpu),
        }
    return out
