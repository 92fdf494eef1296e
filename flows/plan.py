"""`ctxsim plan`: what a config will cost, from a seeded pilot on a sample of its corpus.

Why: the scoring stages cost CPU-hours per few hundred labels; a user needs the bill before the
run. The pilot runs the config's own settings on a temporary root with (a) a seeded sample of the
corpus records (whole JSON Lines records, so sections and their contexts stay intact; whole files
for other formats) and (b) a few queries, twice (``q`` and ``2q`` queries, one query shard), so
the query stages get a fixed cost per shard plus a cost per work unit. Each stage is then scaled
by the quantity that drives it (each stage's ``cost_basis``, ``rows_cap``, ``model_artefact`` and
``corpus_memory`` say which; store/stage.py):

- corpus stages (shard, contexts, index): corpus bytes (full / sample);
- discriminator: training windows (corpus-scaled, capped by ``max_windows_per_epoch``) and
  validation windows (corpus-scaled, a third of the work each);
- pairs with the tfidf encoder: the IDF sample (``min(idf_sample, sentences)``);
- screen: its corpus-side encoding (pilot 1's cost beyond the rows; corpus-scaled) + per row;
- generator: windows scored in validation and evaluation (the pilot scores fewer), training
  steps (the pilot runs a few), the model build as is;
- evaluate: constant (its evaluation sets do not grow with the corpus);
- train with a fixed step budget (``train.max_steps``): optimizer steps, the pilots running a few
  (``pilot_train_steps``, then twice as many): fixed + per-step cost;
- query stages (retrieve ... train): their own output rows per query (retrieve capped at
  ``min(top_k, chunks)``), times the config's queries; cost = fixed x shards + slope x rows.

Disk is scaled like the rows; peak memory (RSS sampled during each stage) grows with the
per-shard share of the units (a rough estimate: label it so). GPU seconds for the scoring
stages come from the scored tokens and a tokens-per-second figure.

Calibrate once, then reuse: the pilot's artefact root, its corpus sample and
each piloted stage's measurements are kept in the unit-cost cache (``plan_cache_dir()``:
``$CTXSIM_PLAN_CACHE``, else ``~/.cache/ctxsim/plan``). Measurements are keyed by this machine
(CPU model and count, GPU) and the stage's artefact fingerprint, which already covers its
settings, models, code version and upstream; each file is written atomically with a sha256 beside
it and checked at read (store/checked.py: a mismatch is moved aside, logged and piloted again).
A later plan re-runs only the stages whose measurements are unknown (the others are published in
the kept root, so they are reused), and none when nothing changed. Warnings and errors of the
pilot name the user's corpus files, not the sample's copies.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import platform
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.flows.config import ConfigError, PipelineConfig, load_config
from ctxsim.store.atomic import write_bytes_atomic
from ctxsim.store.checked import verified, write_checked

#: the generator stage scores this many windows per validation window / evaluation sentence
#: (validation perplexity: 3 directions; evaluation: own + random context, 3 terms + 2 nulls)
GEN_PER_VAL, GEN_PER_EVAL = 3, 10


@dataclass
class StageMeasure:
    """One stage of one pilot run."""

    stage: str
    cpu_s: float
    wall_s: float
    rows: int
    disk_bytes: int
    peak_rss_mb: float
    start_rss_mb: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class Pilot:
    """Both pilot runs and the sample they ran on."""

    corpus_ratio: float  # full corpus bytes / sample bytes
    sample_bytes: int
    full_bytes: int
    queries: tuple[int, int]
    base_rss_mb: float
    pilot_eval: int
    runs: tuple[dict[str, StageMeasure], dict[str, StageMeasure]]
    #: "<pilot>:<stage>" run by this plan; the others' figures came from the unit-cost cache
    piloted: list[str] = field(default_factory=list)
    from_cache: list[str] = field(default_factory=list)


@dataclass
class StagePlanRow:
    stage: str
    basis: str
    pilot_units: float
    units: float
    rows: float
    cpu_s: float
    disk_mb: float
    peak_rss_mb: float
    tokens: float = 0.0
    gpu_s: float | None = None


# --------------------------------------------------------------------------- the corpus sample


def _is_jsonl(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith((".jsonl", ".jsonl.gz", ".json.gz", ".json"))


def sample_corpus(
    paths: list[str],
    fraction: float,
    seed: int,
    out_dir: Path,
    sources: dict[str, str] | None = None,
) -> tuple[list[str], int, int]:
    """Write a seeded sample of the corpus under ``out_dir``; return (paths, sample bytes, full
    bytes). JSON Lines records are kept whole with probability ``fraction`` (at least one per
    file); other formats are sampled by whole files. ``sources`` (if given) receives each
    sample file's user file, to name it in messages. A sample file that already holds the same
    bytes is left as it is (a kept sample keeps its fingerprint)."""
    from ctxsim.readers.corpus import expand_paths

    if not 0 < fraction <= 1:
        raise ConfigError(f"--sample-fraction {fraction}: must be in (0, 1]")
    files = expand_paths(paths)
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    kept: list[str] = []
    sample_bytes = full_bytes = 0
    others: list[Path] = []
    for i, f in enumerate(files):
        if not _is_jsonl(f):
            others.append(f)
            continue
        opener = gzip.open if f.name.endswith(".gz") else open
        with opener(f, "rb") as fh:
            lines = [ln for ln in fh if ln.strip()]
        if not lines:
            continue
        take = rng.random(len(lines)) < fraction
        if not take.any():
            take[int(rng.integers(len(lines)))] = True
        full_bytes += sum(len(ln) for ln in lines)
        chosen = [ln for ln, t in zip(lines, take, strict=True) if t]
        sample_bytes += sum(len(ln) for ln in chosen)
        dest = out_dir / f"{i:05d}.jsonl"
        data = b"".join(ln if ln.endswith(b"\n") else ln + b"\n" for ln in chosen)
        if not dest.is_file() or dest.read_bytes() != data:
            write_bytes_atomic(dest, data)
        kept.append(str(dest))
        if sources is not None:
            sources[str(dest)] = str(f)
    if others:
        sizes = np.array([f.stat().st_size for f in others], dtype=float)
        take = rng.random(len(others)) < fraction
        if not take.any():
            take[int(rng.integers(len(others)))] = True
        full_bytes += int(sizes.sum())
        sample_bytes += int(sizes[take].sum())
        kept += [str(f) for f, t in zip(others, take, strict=True) if t]
    return kept, sample_bytes, full_bytes


# --------------------------------------------------------------------------- the unit-cost cache

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


@contextlib.contextmanager
def user_paths_in_messages(sources: dict[str, str]) -> Iterator[None]:
    """While the pilot runs, log records (any logger) and the errors it raises name the user's
    corpus files instead of the sample's copies of them."""
    pairs = sorted(sources.items(), key=lambda kv: -len(kv[0]))

    def fix(text: str) -> str:
        for tmp, user in pairs:
            if tmp in text:
                text = text.replace(tmp, user)
        return text

    old = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        rec = old(*args, **kwargs)
        with contextlib.suppress(Exception):
            msg = rec.getMessage()
            fixed = fix(msg)
            if fixed != msg:
                rec.msg, rec.args = fixed, ()
        return rec

    logging.setLogRecordFactory(factory)
    try:
        yield
    except Exception as e:
        e.args = tuple(fix(a) if isinstance(a, str) else a for a in e.args)
        raise
    finally:
        logging.setLogRecordFactory(old)


# --------------------------------------------------------------------------- the pilot runs


class _RssSampler:
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

    def __enter__(self) -> _RssSampler:
        self.peak = self.start = self.rss_mb()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss_mb())


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


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
        upstream = {i: arts[i] for i in stage.inputs}
        optional = stage.optional_inputs_for(cfg.stages[name])
        upstream |= {i: arts[i] for i in optional if i in arts}
        plan = resolve_stage(stage, cfg.stages[name], cfg.run, store, upstream)
        if costs is not None:
            known = costs.get(name, plan.fingerprint)
            existing = plan.published()
            if known is not None and existing is not None:
                arts[name] = existing
                out[name] = replace(known, stats={**known.stats, "_from_cache": True})
                if on_stage:
                    on_stage(name, "cached")
                continue
            if existing is not None:  # published, never measured here: measure it
                shutil.rmtree(store.final_dir(name, plan.fingerprint), ignore_errors=True)
            _warm_imports()
        if on_stage:
            on_stage(name, "running")
        c0, t0 = time.process_time(), time.perf_counter()
        with _RssSampler() as rss:
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
        )
        if costs is not None and not reused:
            costs.put(out[name], plan.fingerprint)
        if on_stage:
            on_stage(name, "done")
    return out


def plan_stages(full: PipelineConfig, until: str | None) -> list[str]:
    """The stages a plan of ``full`` pilots (up to ``until``); a config it cannot plan is a
    ConfigError (checked before any work)."""
    if "shard" not in full.stages:
        raise ConfigError(f"{full.source}: plan needs the shard stage (it samples its corpus)")
    names = _stages_until(full, until)
    if "queries" in names and full.stages["queries"].source != "corpus":
        raise ConfigError(f"{full.source}: plan supports queries.source=corpus only")
    return names


def run_pilot(
    cfg_path: str | Path | None,
    overrides: list[str] | None = None,
    sample_fraction: float = 0.05,
    pilot_queries: int = 8,
    pilot_eval: int = 8,
    pilot_train_steps: int = 20,
    root: str | Path | None = None,
    until: str | None = None,
    run_root: str | None = None,
    cache: str | Path | bool = True,
    on_stage: Callable[[int, str, str], None] | None = None,
) -> tuple[PipelineConfig, Pilot]:
    """Run the two seeded pilots of a config on a temporary (or given) root. ``run_root``
    overrides the config's ``run.root`` (``--root``); the pilots never write there. Without a
    query stage among the planned ones (``--until shard``), one pilot (its queries: 0, 0).

    ``cache``: True (the default) keeps the calibration in ``plan_cache_dir()``, a path keeps
    it there, False keeps nothing (a temporary root, every stage piloted). With a cache, the
    pilot root (unless ``root`` is given) and the corpus sample are kept in it, and a stage
    whose measurement is cached is not run (module docstring). ``on_stage(pilot, stage,
    status)`` reports progress (pilot 1 or 2; status "running", "done" or "cached")."""
    full = load_config(cfg_path, overrides, run_root)
    names = plan_stages(full, until)
    with_queries = "queries" in names
    cache_dir = (
        None if cache is False else plan_cache_dir() if cache is True else Path(cache)  # type: ignore[arg-type]
    )
    copy, read_only = None, None
    if cache_dir is not None and not cache_writable(cache_dir):
        # a read-only cache is used as it is: its corpus sample is read in place (the sample's
        # paths are part of the cached fingerprints), its units and pilot root through a
        # throw-away copy that the stages it lacks are piloted into; nothing is kept
        log.warning(read_only_note(cache_dir))
        copy = tempfile.TemporaryDirectory(prefix="ctxsim-plan-cache-")
        if cache_dir.is_dir():
            shutil.copytree(
                cache_dir,
                copy.name,
                dirs_exist_ok=True,
                symlinks=True,
                ignore=lambda d, names: ["corpus"] if Path(d) == cache_dir / "pilot" else [],
            )
        read_only, cache_dir = cache_dir, Path(copy.name)
    costs = UnitCosts(cache_dir) if cache_dir is not None else None
    keep = root is None and cache_dir is not None
    tmp = tempfile.TemporaryDirectory(prefix="ctxsim-plan-") if root is None and not keep else None
    base = Path(tmp.name) if tmp else Path(root) if root is not None else cache_dir / "pilot"  # type: ignore[operator]
    sources: dict[str, str] = {}
    try:
        shard_paths = [str(p) for p in full.stages["shard"].paths]
        key = hashlib.sha256(
            json.dumps([shard_paths, sample_fraction, full.run.seed]).encode()
        ).hexdigest()[:16]
        paths, sample_bytes, full_bytes = _sample(
            shard_paths, sample_fraction, full.run.seed, key, base, read_only, sources
        )
        pilot_sets = list(overrides or []) + [
            f"shard.paths={json.dumps(paths)}",
            "shard.n_shards=1",
            "run.no_progress=true",  # the plan shows its own progress, one bar
        ]
        if with_queries:
            pilot_sets.append("queries.n_shards=1")
        if "generator" in full.stages:  # its evaluation scales by windows scored: fewer here
            g = full.stages["generator"]
            pilot_sets += [
                f"generator.n_eval={min(g.n_eval, pilot_eval)}",
                f"generator.max_val_windows={min(g.max_val_windows, 3 * pilot_eval)}",
                f"generator.train_steps={min(g.train_steps, pilot_train_steps)}",
            ]
        base_rss = costs.get_base_rss() if costs is not None else None
        if base_rss is None:
            _warm_imports()
            base_rss = _RssSampler.rss_mb()
            if costs is not None:
                costs.put_base_rss(base_rss)
        if keep:  # stage caches of earlier pilots would make a stage piloted again look cheap
            from ctxsim.store.artefacts import ArtefactStore

            pilot_store = ArtefactStore(base / "a", create=False)
            shutil.rmtree(pilot_store.cache_dir(create=False), ignore_errors=True)
        runs = []
        piloted: list[str] = []
        from_cache: list[str] = []
        # the pilot config keeps the full config's sections, also those it has only by default
        # (a file without stage sections runs every stage; the overrides above name two)
        sections = full.stage_names
        with user_paths_in_messages(sources):
            for k, q in enumerate((pilot_queries, 2 * pilot_queries) if with_queries else (0,)):
                sets = [*pilot_sets, f"queries.n_corpus={q}"] if with_queries else pilot_sets
                sets = [*sets, *_train_step_sets(full, k, pilot_train_steps)]
                cfg = load_config(cfg_path, sets, str(base / "a"), with_sections=sections)
                # the second pilot re-runs what the queries change; evaluate's cost does not
                todo = names if k == 0 else [n for n in names if n != "evaluate"]

                def report(name: str, status: str, k: int = k) -> None:
                    if status != "done":
                        (from_cache if status == "cached" else piloted).append(f"{k + 1}:{name}")
                    if on_stage is not None:
                        on_stage(k + 1, name, status)

                runs.append(run_measured(cfg, todo, costs, report))
        if len(runs) == 1:  # nothing follows the queries: one pilot is both points
            runs.append(runs[0])
        pilot = Pilot(
            corpus_ratio=full_bytes / max(sample_bytes, 1),
            sample_bytes=sample_bytes,
            full_bytes=full_bytes,
            queries=(
                (runs[0]["queries"].rows, runs[1]["queries"].rows) if with_queries else (0, 0)
            ),
            base_rss_mb=base_rss,
            pilot_eval=pilot_eval,
            runs=(runs[0], runs[1]),
            piloted=piloted,
            from_cache=from_cache,
        )
    finally:
        for d in (tmp, copy):
            if d is not None:
                d.cleanup()
    return full, pilot


def _sample(
    shard_paths: list[str],
    fraction: float,
    seed: int,
    key: str,
    base: Path,
    read_only: Path | None,
    sources: dict[str, str],
) -> tuple[list[str], int, int]:
    """:func:`sample_corpus` under ``base``; with a read-only cache, its own sample where it
    already holds these bytes (nothing to write), else a new one under ``base``."""
    if read_only is not None and (read_only / "pilot" / "corpus" / key).is_dir():
        try:
            return sample_corpus(
                shard_paths, fraction, seed, read_only / "pilot" / "corpus" / key, sources
            )
        except OSError:  # the corpus changed since: the sample is written anew, elsewhere
            sources.clear()
    return sample_corpus(shard_paths, fraction, seed, base / "corpus" / key, sources)


def _train_step_sets(full: PipelineConfig, k: int, pilot_steps: int) -> list[str]:
    """A train with a fixed step budget is piloted for a few steps (pilot k: (k + 1) x
    ``pilot_steps``) and its cost fitted as a fixed part plus a cost per step: run in full, its
    200 steps alone made a cold plan of configs/medquad.yaml cost a third of the run it
    predicts."""
    t = full.stages.get("train")
    if t is None or getattr(t, "max_steps", -1) <= 0:
        return []
    steps = min(t.max_steps, (k + 1) * pilot_steps)
    return [f"train.max_steps={steps}", f"train.eval_steps={steps}"]


def pilot_to_json(pilot: Pilot) -> dict[str, Any]:
    """The raw pilot measurements (to re-predict later without re-running the pilot)."""
    d = asdict(pilot)
    d["runs"] = [{k: asdict(m) for k, m in run.items()} for run in pilot.runs]
    return d


def pilot_from_json(d: dict[str, Any]) -> Pilot:
    runs = tuple({k: StageMeasure(**m) for k, m in run.items()} for run in d["runs"])
    return Pilot(**{**d, "queries": tuple(d["queries"]), "runs": runs})


def _warm_imports() -> None:
    """Import the heavy libraries before measuring: their one-off import time would otherwise be
    charged to the first pilot's stages and then scaled up with them."""
    import importlib

    for mod in ("torch", "transformers", "sklearn.feature_extraction.text", "scipy.sparse"):
        try:
            importlib.import_module(mod)
        except ImportError:  # pragma: no cover - optional for some configs
            pass


def _stages_until(cfg: PipelineConfig, until: str | None) -> list[str]:
    from ctxsim.flows.config import select_stages  # not flows.pipeline: no Prefect import here

    return select_stages(cfg, until)


# --------------------------------------------------------------------------- the prediction


def _fit(x1: float, y1: float, x2: float, y2: float) -> tuple[float, float]:
    """(fixed, per unit) through two pilot points, both kept non-negative."""
    if x2 <= x1:
        return 0.0, y2 / max(x2, 1e-9)
    slope = max((y2 - y1) / (x2 - x1), 0.0)
    fixed = max(y2 - slope * x2, 0.0)
    if slope == 0.0:  # no measurable cost per unit (noise ate it): a fixed cost, the mean
        return (y1 + y2) / 2, 0.0
    return fixed, slope


def _units(
    name: str, run: dict[str, StageMeasure], cfg: PipelineConfig, pilot: Pilot
) -> tuple[str, float, float]:
    """(basis, pilot units, full units) of a stage, from one pilot run."""
    m = run[name]
    p = cfg.stages[name]
    # the query stages' quantities (a plan --until a corpus stage has no queries)
    q_full = float(cfg.stages["queries"].n_corpus) if "queries" in cfg.stages else 0.0
    from ctxsim.tasks import load_stage

    q_pilot = float(max(run["queries"].rows, 1)) if "queries" in run else 1.0
    stage = load_stage(name)
    if stage.cost_basis == "corpus":
        return "corpus bytes", float(pilot.sample_bytes), float(pilot.full_bytes)
    if stage.cost_basis == "constant":
        return "constant", 1.0, 1.0
    if name == "generator":
        return ("windows scored", *_generator_units(m, p, pilot))
    if name == "discriminator":
        # training (capped per epoch) plus validation (every held-out window, forward only:
        # about a third of a training step's work per window)
        train = float(m.stats.get("train_windows", m.rows) or 1)
        val = float(m.stats.get("val_windows", 0) or 0)
        full = train * pilot.corpus_ratio
        cap = getattr(p, "max_windows_per_epoch", 0) or 0
        if cap:
            train, full = min(train, cap), min(full, cap)
        return "windows", train + val / 3, full + val * pilot.corpus_ratio / 3
    if name == "pairs" and getattr(p, "encoder", "") == "tfidf":
        # its cost is fitting the IDF/LSA on a sample of corpus sentences
        sents = float(run["shard"].rows) if "shard" in run else 1.0
        return (
            "idf sentences",
            min(p.idf_sample, sents),
            min(p.idf_sample, sents * pilot.corpus_ratio),
        )
    if name == "queries":
        sents = float(run["shard"].rows) * pilot.corpus_ratio if "shard" in run else q_full
        return "queries", q_pilot, min(q_full, sents)
    if name == "train":
        if getattr(p, "max_steps", -1) > 0:  # piloted for a few steps (_train_step_sets)
            return "optimizer steps", float(m.stats.get("steps") or 1), float(p.max_steps)
        lab = run.get("label")
        n = float(lab.rows if lab else m.rows)
        return "labelled pairs", n, n / q_pilot * q_full
    per_q = m.rows / q_pilot
    if stage.rows_cap is not None and "contexts" in run:
        chunks_full = run["contexts"].rows * pilot.corpus_ratio
        limit = float(getattr(p, stage.rows_cap, per_q))
        if name == "retrieve":  # hits grow with the chunks sharing an n-gram, up to top_k
            grow = pilot.corpus_ratio if per_q < limit else 1.0
            per_q = min(limit, chunks_full, per_q * grow)
        elif per_q < limit and run["contexts"].rows * pilot.corpus_ratio > run["contexts"].rows:
            # the pilot's small corpus starved this stage; the full corpus fills it further,
            # in proportion to what retrieve gets per query, up to the stage's own limit
            r_pilot = run["retrieve"].rows / q_pilot if "retrieve" in run else per_q
            r_full = min(float(cfg.stages["retrieve"].top_k), chunks_full)
            per_q = min(limit, per_q * r_full / max(r_pilot, 1e-9))
    return f"{name} rows", float(m.rows), per_q * q_full


def _generator_units(m: StageMeasure, p: Any, pilot: Pilot) -> tuple[float, float]:
    """Windows the generator stage scores (validation perplexity + evaluation), pilot and full.
    A validation set the pilot capped is taken as capped in full too (the corpus is larger)."""
    val, n_eval = float(m.stats.get("val_windows", 0)), float(m.stats.get("eval_sentences", 0))
    pilot_cap = min(p.max_val_windows, 3 * pilot.pilot_eval)
    full_val = float(p.max_val_windows)
    if val < pilot_cap:
        full_val = min(full_val, val * pilot.corpus_ratio)
    full_eval = min(float(p.n_eval), full_val)
    return (
        GEN_PER_VAL * val + GEN_PER_EVAL * n_eval,
        GEN_PER_VAL * full_val + GEN_PER_EVAL * full_eval,
    )


def _generator_parts(m: StageMeasure, p: Any) -> tuple[float, float]:
    """CPU seconds of the generator's (model and tokenizer build, training steps) in the pilot
    and in full: the build is the same work; training scales with the steps (the pilot runs at
    most ``pilot_train_steps``), from the stage's wall-clock split of its stats."""
    if not m.wall_s:
        return 0.0, 0.0
    to_cpu = m.cpu_s / m.wall_s
    build = float(m.stats.get("build_seconds", 0.0)) * to_cpu
    train = float(m.stats.get("train_seconds", 0.0)) * to_cpu
    steps = float(m.stats.get("train_steps", 0) or 0)
    full_train = train * (p.train_steps / steps) if steps else 0.0
    return build + train, build + full_train


def predict(
    cfg: PipelineConfig,
    pilot: Pilot,
    gpus: int = 0,
    tokens_per_second: float | None = None,
) -> dict[str, Any]:
    """Per-stage predicted CPU seconds, disk and peak memory of the full config, and totals."""
    from ctxsim.tasks import load_stage

    r1, r2 = pilot.runs
    q_shards = int(cfg.stages["queries"].n_shards) if "queries" in cfg.stages else 1
    rows: list[StagePlanRow] = []
    tok_per_row = 0.0
    if "score" in r2 and r2["score"].rows:
        tok_per_row = float(r2["score"].stats.get("padded_tokens", 0)) / r2["score"].rows
    for name in r1:
        stage = load_stage(name)
        basis, u2, full = _units(name, r2 if name in r2 else r1, cfg, pilot)
        if name == "screen" and name in r2:
            # pilot 1 also encoded the corpus side once (cached: pilot 2 reused it), which
            # grows with the corpus; the rest is per screened row
            _, u1, _ = _units(name, r1, cfg, pilot)
            slope = r2[name].cpu_s / max(u2, 1e-9)
            corpus_side = max(r1[name].cpu_s - slope * u1, 0.0) * pilot.corpus_ratio
            cpu = corpus_side + slope * full
            m = replace(r2[name], peak_rss_mb=max(r1[name].peak_rss_mb, r2[name].peak_rss_mb))
        elif name == "pairs" and basis == "idf sentences":
            m = r2[name]
            cpu = (r1[name].cpu_s + r2[name].cpu_s) / 2 * full / max(u2, 1e-9)
        elif stage.cost_basis == "fit" and name in r2:
            _, u1, _ = _units(name, r1, cfg, pilot)
            fixed, slope = _fit(u1, r1[name].cpu_s, u2, r2[name].cpu_s)
            shards = q_shards if stage.shard_by == "queries" else 1
            cpu = fixed * shards + slope * full
            m = r2[name]
        else:
            m = r2.get(name) or r1[name]
            if m.cpu_s == 0.0 and name in r1:  # reused in pilot 2: take pilot 1's figure
                m = r1[name]
            same, same_full = (
                _generator_parts(m, cfg.stages[name]) if name == "generator" else (0.0, 0.0)
            )
            cpu = same_full + (m.cpu_s - same) * full / max(u2, 1e-9)
        scale = full / max(u2, 1e-9)
        # what a stage adds to memory grows with the corpus where it holds corpus-sized data
        # (the sentences, chunks, index, windows); query stages stream per shard and hold models
        # and the index: their share is taken as the pilot's (a rough estimate, said so)
        mem_scale = pilot.corpus_ratio if stage.corpus_memory else 1.0
        extra_rss = max(m.peak_rss_mb - m.start_rss_mb, 0.0)
        row = StagePlanRow(
            stage=name,
            basis=basis,
            pilot_units=u2,
            units=full,
            rows=m.rows * (1.0 if stage.model_artefact and name != "generator" else scale)
            if basis != "idf sentences"
            else m.rows / max(r2["queries"].rows, 1) * cfg.stages["queries"].n_corpus,
            cpu_s=cpu,
            disk_mb=m.disk_bytes * (1.0 if stage.model_artefact else scale) / 2**20,
            peak_rss_mb=pilot.base_rss_mb + extra_rss * max(mem_scale, 1.0),
        )
        if name == "score":
            row.tokens = float(m.stats.get("padded_tokens", 0)) * scale
        elif name == "select" and m.stats.get("reranked"):
            row.tokens = float(m.stats["reranked"]) * scale * tok_per_row
        if row.tokens and tokens_per_second:
            row.gpu_s = row.tokens / tokens_per_second
        rows.append(row)
    cpu_total = sum(r.cpu_s for r in rows)
    out: dict[str, Any] = {
        "config": cfg.source,
        "pilot": {
            "corpus_ratio": round(pilot.corpus_ratio, 3),
            "sample_bytes": pilot.sample_bytes,
            "full_bytes": pilot.full_bytes,
            "queries": list(pilot.queries),
            "cpu_s": round(sum(m.cpu_s for r in pilot.runs for m in r.values()), 2),
            "piloted": list(pilot.piloted),
            "from_cache": list(pilot.from_cache),
        },
        "stages": [_round(asdict(r)) for r in rows],
        "total": {
            "cpu_s": round(cpu_total, 1),
            "cpu_hours": round(cpu_total / 3600, 3),
            "disk_mb": round(sum(r.disk_mb for r in rows), 1),
            "peak_rss_mb": round(max((r.peak_rss_mb for r in rows), default=0.0), 1),
        },
    }
    if tok_per_row and "score" in r2 and r2["score"].cpu_s:
        out["pilot"]["score_tokens_per_cpu_s"] = round(
            float(r2["score"].stats.get("padded_tokens", 0)) / r2["score"].cpu_s, 1
        )
    if tokens_per_second:
        gpu_s = sum(r.gpu_s or 0.0 for r in rows)
        cpu_rest = sum(r.cpu_s for r in rows if r.gpu_s is None)
        n = max(gpus, 1)
        out["total"] |= {
            "gpus": n,
            "tokens_per_second_per_gpu": tokens_per_second,
            "gpu_s": round(gpu_s, 1),
            "gpu_wall_hours": round(gpu_s / n / 3600, 3),
            "cpu_s_other_stages": round(cpu_rest, 1),
        }
    return out


def _round(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}


def format_plan(plan: dict[str, Any]) -> str:
    """The plan as a fixed-width table."""
    p = plan["pilot"]
    queries = (
        f"{p['queries'][0]} and {p['queries'][1]} queries"
        if any(p["queries"])
        else "no query stage"
    )
    lines = [
        f"plan for {plan['config']}: pilot on {p['sample_bytes']:,} of {p['full_bytes']:,} "
        f"corpus bytes (x{p['corpus_ratio']}), {queries}, {p['cpu_s']} CPU-s",
        f"{'stage':<14}{'basis':<20}{'units':>14}{'cpu_s':>12}{'gpu_s':>11}{'disk_mb':>10}"
        f"{'peak_rss_mb':>13}",
    ]
    for r in plan["stages"]:
        gpu = "" if r["gpu_s"] is None else f"{r['gpu_s']:.1f}"
        lines.append(
            f"{r['stage']:<14}{r['basis']:<20}{r['units']:>14,.0f}{r['cpu_s']:>12,.1f}{gpu:>11}"
            f"{r['disk_mb']:>10,.1f}{r['peak_rss_mb']:>13,.0f}"
        )
    t = plan["total"]
    lines.append(
        f"total: {t['cpu_s']:,.1f} CPU-s ({t['cpu_hours']} CPU-h), {t['disk_mb']:,.1f} MB on "
        f"disk, peak RSS ~{t['peak_rss_mb']:,.0f} MB (memory: a rough estimate)"
    )
    me = plan.get("plan_itself")
    if me:
        lines.append(
            f"this plan: {me['cpu_s']:,.1f} CPU-s ({me['share_of_run']:.1%} of the run it "
            f"predicts), {me['wall_s']:,.1f} s wall, peak RSS {me['peak_rss_mb']:,.0f} MB (the "
            f"run's: ~{t['peak_rss_mb']:,.0f} MB); piloted {len(p.get('piloted', []))} stage "
            f"runs, {len(p.get('from_cache', []))} from the unit-cost cache"
            + (f" ({me['cache']})" if me.get("cache") else "")
        )
    if "gpu_s" in t:
        lines.append(
            f"on {t['gpus']} GPU(s) at {t['tokens_per_second_per_gpu']:,.0f} tokens/s each: "
            f"{t['gpu_s']:,.1f} GPU-s for the scoring stages ({t['gpu_wall_hours']} h wall), "
            f"plus {t['cpu_s_other_stages']:,.1f} CPU-s for the others"
        )
    return "\n".join(lines)


def own_cost(c0: float, t0: float, predicted_cpu_s: float, cache: Path | None) -> dict[str, Any]:
    """What this plan itself cost so far (CPU and wall seconds since ``c0``/``t0``, the
    process's peak RSS), beside the run it predicts."""
    cpu = time.process_time() - c0
    return {
        "cpu_s": round(cpu, 2),
        "wall_s": round(time.perf_counter() - t0, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "share_of_run": round(cpu / max(predicted_cpu_s, 1e-9), 4),
        "cache": str(cache) if cache is not None else None,
    }
