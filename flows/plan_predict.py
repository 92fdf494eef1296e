"""`ctxsim plan`'s prediction: the full config's CPU (or GPU) seconds, disk and memory per stage,
from the two pilot runs and each stage's cost model.

Each stage says what drives its cost (its ``Stage.cost_model``, store/cost_model.py): the
planner asks it for the units of both pilots and of the full config and for the CPU seconds
they come to, and scales the rest alike. Disk is scaled like the rows (a model artefact as is);
peak memory grows with the corpus for a stage that holds corpus-sized data (``corpus_memory``),
a rough estimate, labelled so. GPU seconds come from the tokens a stage scores and a
tokens-per-second figure. No stage is named here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ctxsim.flows.config import PipelineConfig
from ctxsim.store.cost_model import CostModel, PilotView, StageMeasure
from ctxsim.store.stage import Stage
from ctxsim.tasks import load_stage


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


def pilot_to_json(pilot: Pilot) -> dict[str, Any]:
    """The raw pilot measurements (to re-predict later without re-running the pilot)."""
    d = asdict(pilot)
    d["runs"] = [{k: asdict(m) for k, m in run.items()} for run in pilot.runs]
    return d


def pilot_from_json(d: dict[str, Any]) -> Pilot:
    runs = tuple({k: StageMeasure(**m) for k, m in run.items()} for run in d["runs"])
    return Pilot(**{**d, "queries": tuple(d["queries"]), "runs": runs})


def cost_model(cfg: PipelineConfig, name: str) -> CostModel:
    """Stage ``name``'s cost model for the config's settings."""
    return load_stage(name).cost_model(cfg.stages[name])


def query_source(cfg: PipelineConfig, names: list[str]) -> str | None:
    """The stage among ``names`` that draws the queries (its cost model counts them)."""
    for name in names:
        if cost_model(cfg, name).query_count(cfg.stages[name]) is not None:
            return name
    return None


def _views(
    cfg: PipelineConfig, pilot: Pilot, models: dict[str, CostModel]
) -> tuple[PilotView, PilotView]:
    """What the cost models read of each pilot run."""
    source = next((n for n, m in models.items() if m.query_count(cfg.stages[n]) is not None), None)
    full_queries = models[source].query_count(cfg.stages[source]) if source else None

    def view(run: dict[str, StageMeasure]) -> PilotView:
        return PilotView(
            run=run,
            params=cfg.stages,
            corpus_ratio=pilot.corpus_ratio,
            sample_bytes=pilot.sample_bytes,
            full_bytes=pilot.full_bytes,
            pilot_eval=pilot.pilot_eval,
            queries=float(max(run[source].rows, 1)) if source in run else 1.0,
            full_queries=full_queries or 0.0,
        )

    return view(pilot.runs[0]), view(pilot.runs[1])


def _shards(cfg: PipelineConfig, stage: Stage) -> int:
    """Shards the stage fans out to in full: those of the stage it is sharded by."""
    by = stage.shard_by
    if by is None or by not in cfg.stages:
        return 1
    param = cost_model(cfg, by).shards
    return int(getattr(cfg.stages[by], param)) if param else 1


def _scoring(models: dict[str, CostModel], run: dict[str, StageMeasure]) -> str | None:
    """The stage whose scored tokens per row price GPU work (its cost model counts tokens)."""
    return next((n for n in run if n in models and models[n].gpu_tokens and run[n].rows), None)


def _disk_bytes(m: StageMeasure, scale: float) -> float:
    """The full run's disk: the fixed-size files as measured, the rest scaled with the work."""
    fixed = min(m.fixed_disk_bytes, m.disk_bytes)
    return fixed + (m.disk_bytes - fixed) * scale


def _stage_row(
    name: str,
    model: CostModel,
    views: tuple[PilotView, PilotView],
    cfg: PipelineConfig,
    pilot: Pilot,
    tok_per_row: float,
    tokens_per_second: float | None,
) -> StagePlanRow:
    """One stage's predicted units, CPU seconds, rows, disk, memory and GPU work."""
    v1, v2 = views
    stage = load_stage(name)
    u2, full = model.units(name, v2 if name in v2.run else v1)
    cpu, m = model.cpu(name, v1, v2, u2, full, _shards(cfg, stage))
    scale = full / max(u2, 1e-9)
    # what a stage adds to memory grows with the corpus where it holds corpus-sized data
    # (the sentences, chunks, index, windows); query stages stream per shard and hold models
    # and the index: their share is taken as the pilot's (a rough estimate, said so)
    mem_scale = pilot.corpus_ratio if stage.corpus_memory else 1.0
    extra_rss = max(m.peak_rss_mb - m.start_rss_mb, 0.0)
    row = StagePlanRow(
        stage=name,
        basis=model.basis(name),
        pilot_units=u2,
        units=full,
        rows=model.full_rows(m, scale, v2, stage.model_artefact),
        cpu_s=cpu,
        disk_mb=_disk_bytes(m, 1.0 if stage.model_artefact else scale) / 2**20,
        peak_rss_mb=pilot.base_rss_mb + extra_rss * max(mem_scale, 1.0),
    )
    row.tokens = model.tokens(m, scale, tok_per_row)
    if row.tokens and tokens_per_second:
        row.gpu_s = row.tokens / tokens_per_second
    return row


def predict(
    cfg: PipelineConfig,
    pilot: Pilot,
    gpus: int = 0,
    tokens_per_second: float | None = None,
) -> dict[str, Any]:
    """Per-stage predicted CPU seconds, disk and peak memory of the full config, and totals."""
    r1, r2 = pilot.runs
    models = {name: cost_model(cfg, name) for name in r1}
    views = _views(cfg, pilot, models)
    scoring = _scoring(models, r2)
    tok_per_row = 0.0
    if scoring is not None:
        tokens = float(r2[scoring].stats.get(models[scoring].gpu_tokens, 0))  # type: ignore[arg-type]
        tok_per_row = tokens / r2[scoring].rows
    rows = [
        _stage_row(name, models[name], views, cfg, pilot, tok_per_row, tokens_per_second)
        for name in r1
    ]
    out = _summary(cfg, pilot, rows)
    if tok_per_row and scoring is not None and r2[scoring].cpu_s:
        out["pilot"]["score_tokens_per_cpu_s"] = round(tokens / r2[scoring].cpu_s, 1)
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


def _summary(cfg: PipelineConfig, pilot: Pilot, rows: list[StagePlanRow]) -> dict[str, Any]:
    """The plan's pilot, stages and CPU, disk and memory totals."""
    cpu_total = sum(r.cpu_s for r in rows)
    return {
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


def _round(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}
