"""`ctxsim plan`: what a config will cost, from a seeded pilot on a sample of its corpus.

Why: the scoring stages cost CPU-hours per few hundred labels; a user needs the bill before the
run. The pilot runs the config's own settings on a temporary root with (a) a seeded sample of the
corpus records (whole JSON Lines records, so sections and their contexts stay intact; whole files
for other formats; flows/plan_sample.py) and (b) a few queries, twice (``q`` and ``2q`` queries,
one query shard), so the query stages get a fixed cost per shard plus a cost per work unit. Each
stage is then scaled by the quantity that drives it: its cost model (``Stage.cost_model``,
store/cost_model.py) names the units (corpus bytes, windows, rows per query, optimizer steps ...),
which settings the pilots shrink and how the pilot's cost becomes the full run's
(flows/plan_predict.py); the planner names no stage.

Calibrate once, then reuse: the pilot's artefact root, its corpus sample and each piloted stage's
measurements are kept in the unit-cost cache (flows/plan_cache.py). A later plan re-runs only the
stages whose measurements are unknown (the others are published in the kept root, so they are
reused), and none when nothing changed. Warnings and errors of the pilot name the user's corpus
files, not the sample's copies. The table and the plan's own cost: flows/plan_report.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ctxsim.flows.config import ConfigError, PipelineConfig, load_config, select_stages
from ctxsim.flows.plan_cache import (
    UnitCosts,
    cache_writable,
    log,
    machine_key,
    plan_cache_dir,
    read_only_note,
)
from ctxsim.flows.plan_measure import RssSampler, run_measured, warm_imports
from ctxsim.flows.plan_predict import (
    Pilot,
    StagePlanRow,
    cost_model,
    pilot_from_json,
    pilot_to_json,
    predict,
    query_source,
)
from ctxsim.flows.plan_report import format_plan, own_cost
from ctxsim.flows.plan_sample import sample_corpus, sample_for_pilot, user_paths_in_messages
from ctxsim.store.cost_model import PilotSettings, StageMeasure

__all__ = [
    "Pilot",
    "StageMeasure",
    "StagePlanRow",
    "UnitCosts",
    "cache_writable",
    "format_plan",
    "log",
    "machine_key",
    "own_cost",
    "pilot_from_json",
    "pilot_settings",
    "pilot_steps",
    "pilot_to_json",
    "plan_cache_dir",
    "plan_stages",
    "predict",
    "read_only_note",
    "run_measured",
    "run_pilot",
    "sample_corpus",
]


def corpus_stage(full: PipelineConfig, names: list[str]) -> str:
    """The stage among ``names`` whose corpus files the pilots sample; a ConfigError without."""
    for name in names:
        if cost_model(full, name).corpus_paths(full.stages[name]) is not None:
            return name
    from ctxsim.tasks import STAGES, load_stage

    readers = " or ".join(n for n in STAGES if load_stage(n).cost.samples_corpus)
    raise ConfigError(f"{full.source}: plan needs the {readers} stage (it samples its corpus)")


def plan_stages(full: PipelineConfig, until: str | None) -> list[str]:
    """The stages a plan of ``full`` pilots (up to ``until``); a config it cannot plan is a
    ConfigError (checked before any work)."""
    names = select_stages(full, until)  # flows.config's, not flows.pipeline's: no Prefect here
    corpus_stage(full, names)
    for name in names:
        problem = cost_model(full, name).problem(name, full.stages[name])
        if problem:
            raise ConfigError(f"{full.source}: {problem}")
    return names


def pilot_steps(full: PipelineConfig, names: list[str]) -> int:
    """Stage runs of a plan of ``names``: each in pilot 1; those whose cost may follow the
    queries again in pilot 2 (none without a query stage)."""
    if query_source(full, names) is None:
        return len(names)
    return len(names) + sum(cost_model(full, n).second_pilot for n in names)


def pilot_settings(full: PipelineConfig, names: list[str], s: PilotSettings) -> list[str]:
    """The overrides of one pilot run: what each planned stage's cost model shrinks."""
    out: list[str] = []
    for name in names:
        out += cost_model(full, name).pilot_settings(name, full.stages[name], s)
    return out


class _PilotRoot:
    """Where the pilots run and what they reuse: ``cache`` True keeps the calibration in
    ``plan_cache_dir()``, a path keeps it there, False keeps nothing (a temporary root, every
    stage piloted). A read-only cache is used as it is: its corpus sample is read in place (the
    sample's paths are part of the cached fingerprints), its units and pilot root through a
    throw-away copy that the stages it lacks are piloted into; nothing is kept."""

    def __init__(self, cache: str | Path | bool, root: str | Path | None) -> None:
        cache_dir: Path | None = None
        if cache is True:
            cache_dir = plan_cache_dir()
        elif cache is not False:
            cache_dir = Path(cache)
        self.copy: tempfile.TemporaryDirectory[str] | None = None
        self.read_only: Path | None = None
        if cache_dir is not None and not cache_writable(cache_dir):
            log.warning(read_only_note(cache_dir))
            self.copy = tempfile.TemporaryDirectory(prefix="ctxsim-plan-cache-")
            if cache_dir.is_dir():
                shutil.copytree(
                    cache_dir,
                    self.copy.name,
                    dirs_exist_ok=True,
                    symlinks=True,
                    ignore=lambda d, names: ["corpus"] if Path(d) == cache_dir / "pilot" else [],
                )
            self.read_only, cache_dir = cache_dir, Path(self.copy.name)
        self.costs = UnitCosts(cache_dir) if cache_dir is not None else None
        self.keep = root is None and cache_dir is not None
        self.tmp = (
            tempfile.TemporaryDirectory(prefix="ctxsim-plan-")
            if root is None and not self.keep
            else None
        )
        if self.tmp is not None:
            self.base = Path(self.tmp.name)
        elif root is not None:
            self.base = Path(root)
        else:  # kept: the cache holds the pilot root
            self.base = cache_dir / "pilot"  # type: ignore[operator]

    def base_rss(self) -> float:
        """This process's resident memory with the heavy libraries loaded (cached per machine)."""
        base_rss = self.costs.get_base_rss() if self.costs is not None else None
        if base_rss is None:
            warm_imports()
            base_rss = RssSampler.rss_mb()
            if self.costs is not None:
                self.costs.put_base_rss(base_rss)
        return base_rss

    def clear_stage_caches(self) -> None:
        """Stage caches of earlier pilots in a kept root would make a stage piloted again look
        cheap: they go."""
        if self.keep:
            from ctxsim.store.artefacts import ArtefactStore

            pilot_store = ArtefactStore(self.base / "a", create=False)
            shutil.rmtree(pilot_store.cache_dir(create=False), ignore_errors=True)

    def cleanup(self) -> None:
        for d in (self.tmp, self.copy):
            if d is not None:
                d.cleanup()


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
    place = _PilotRoot(cache, root)
    sources: dict[str, str] = {}
    try:
        reader = corpus_stage(full, names)
        corpus = cost_model(full, reader).corpus_paths(full.stages[reader]) or []
        key = hashlib.sha256(
            json.dumps([corpus, sample_fraction, full.run.seed]).encode()
        ).hexdigest()[:16]
        paths, sample_bytes, full_bytes = sample_for_pilot(
            corpus, sample_fraction, full.run.seed, key, place.base, place.read_only, sources
        )
        base_rss = place.base_rss()
        place.clear_stage_caches()
        with user_paths_in_messages(sources):
            runs, piloted, from_cache = _run_pilots(
                cfg_path,
                full,
                names,
                place,
                [*(overrides or []), "run.no_progress=true"],  # the plan shows its own bar
                PilotSettings(0, pilot_queries, pilot_eval, pilot_train_steps, paths),
                on_stage,
            )
        source = query_source(full, names)
        pilot = Pilot(
            corpus_ratio=full_bytes / max(sample_bytes, 1),
            sample_bytes=sample_bytes,
            full_bytes=full_bytes,
            queries=(runs[0][source].rows, runs[1][source].rows) if source else (0, 0),
            base_rss_mb=base_rss,
            pilot_eval=pilot_eval,
            runs=runs,
            piloted=piloted,
            from_cache=from_cache,
        )
    finally:
        place.cleanup()
    return full, pilot


def _run_pilots(
    cfg_path: str | Path | None,
    full: PipelineConfig,
    names: list[str],
    place: _PilotRoot,
    overrides: list[str],
    first: PilotSettings,
    on_stage: Callable[[int, str, str], None] | None,
) -> tuple[tuple[dict[str, StageMeasure], dict[str, StageMeasure]], list[str], list[str]]:
    """Pilot 1 (``first.queries`` queries) and pilot 2 (twice as many; the stages whose cost
    may follow the queries); one pilot without a query stage. Returns both runs' measures and
    the "<pilot>:<stage>" runs piloted and taken from the unit-cost cache."""
    runs: list[dict[str, StageMeasure]] = []
    piloted: list[str] = []
    from_cache: list[str] = []
    source = query_source(full, names)
    with_queries = source is not None
    full_q = cost_model(full, source).query_count(full.stages[source]) if source else None
    for k, q in enumerate((first.queries, 2 * first.queries) if with_queries else (0,)):
        share = min(q / full_q, 1.0) if full_q else 1.0
        s = PilotSettings(k, q, first.eval, first.train_steps, first.corpus, share)
        sets = [*overrides, *pilot_settings(full, names, s)]
        # the pilot config keeps the full config's sections, also those it has only by default
        # (a file without stage sections runs every stage; the overrides above name a few)
        cfg = load_config(cfg_path, sets, str(place.base / "a"), with_sections=full.stage_names)
        todo = names if k == 0 else [n for n in names if cost_model(full, n).second_pilot]

        def report(name: str, status: str, k: int = k) -> None:
            if status != "done":
                (from_cache if status == "cached" else piloted).append(f"{k + 1}:{name}")
            if on_stage is not None:
                on_stage(k + 1, name, status)

        runs.append(run_measured(cfg, todo, place.costs, report))
    if len(runs) == 1:  # nothing follows the queries: one pilot is both points
        runs.append(runs[0])
    return (runs[0], runs[1]), piloted, from_cache
