"""How `ctxsim plan` prices a stage: the stage's cost model, declared on its class beside its
other facts (``Stage.cost``, store/stage.py), so the planner (flows/plan_predict.py) names no
stage.

The plan runs a config twice on a sample of its corpus (pilot 1 with ``q`` queries, pilot 2 with
``2q``, one query shard). A cost model says which work unit drives its stage (``basis``), how many
units a pilot did and the full config will do (``units``), how the pilot's CPU seconds become the
full run's (``cpu``: scaled by full / pilot units, or fitted on the two pilots as a fixed cost per
shard plus a cost per unit), which settings the pilots shrink (``pilot_settings``) and what the
stage scores on a GPU (``gpu_tokens``, ``gpu_rows``). The vocabulary below is generic: a stage
instantiates one with the names of its own params and stats. The training stages' models
(trained and scored windows, optimizer steps) are in store/cost_models_training.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


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
    fixed_disk_bytes: int = 0  # of disk_bytes, in files whose size does not follow the work


@dataclass(frozen=True)
class PilotView:
    """What a cost model reads of one pilot run: its stages' measures, the full config's sections
    and what every stage shares (the corpus and the queries, in the pilot and in full)."""

    run: Mapping[str, StageMeasure]
    params: Mapping[str, Any]
    corpus_ratio: float  # full corpus bytes / sample bytes
    sample_bytes: int
    full_bytes: int
    pilot_eval: int
    queries: float  # this pilot's queries (1 without a query stage)
    full_queries: float  # the full config's queries (0 without a query stage)


@dataclass(frozen=True)
class PilotSettings:
    """What the pilots shrink: pilot ``index`` (0 or 1) labels ``queries`` queries, evaluates
    ``eval`` items and trains ``train_steps`` steps, on the sampled ``corpus`` files; ``share``
    is ``queries`` over the full config's (1.0 without a query stage)."""

    index: int
    queries: int
    eval: int
    train_steps: int
    corpus: list[str]
    share: float = 1.0


def fit_line(x1: float, y1: float, x2: float, y2: float) -> tuple[float, float]:
    """(fixed, per unit) through two pilot points, both kept non-negative."""
    if x2 <= x1:
        return 0.0, y2 / max(x2, 1e-9)
    slope = max((y2 - y1) / (x2 - x1), 0.0)
    fixed = max(y2 - slope * x2, 0.0)
    if slope == 0.0:  # no measurable cost per unit (noise ate it): a fixed cost, the mean
        return (y1 + y2) / 2, 0.0
    return fixed, slope


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """A constant cost: as measured, one unit (the base of the others)."""

    #: the param the pilots set to 1 (one shard)
    shards: str | None = None
    #: the stat counting the tokens this stage scores (GPU work); its tokens per row also price
    #: the rows other stages re-score (``gpu_rows``)
    gpu_tokens: str | None = None
    #: the stat counting rows this stage re-scores at the scoring stage's tokens per row
    gpu_rows: str | None = None

    @property
    def kind(self) -> str:
        """How the pilot's cost is scaled (``Stage.cost_basis``): corpus, constant, fit (fixed
        per query shard + per unit, on the two pilots) or scaled (cost x full / pilot units)."""
        return "constant"

    @property
    def rows_cap(self) -> str | None:
        """The param that caps this stage's rows per query."""
        return None

    @property
    def second_pilot(self) -> bool:
        """Whether pilot 2 runs it again (its cost may follow the queries)."""
        return True

    @property
    def samples_corpus(self) -> bool:
        """Whether this stage reads the corpus files the pilots sample (``corpus_paths``)."""
        return False

    def basis(self, name: str) -> str:
        """The work unit, as the plan's table names it."""
        return "constant"

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        """(pilot units, full units) of stage ``name`` from one pilot run."""
        return 1.0, 1.0

    def cpu(
        self, name: str, v1: PilotView, v2: PilotView, u2: float, full: float, shards: int
    ) -> tuple[float, StageMeasure]:
        """(CPU seconds in full, the measure whose rows, disk and memory are scaled)."""
        if self.kind == "fit" and name in v2.run:
            u1, _ = self.units(name, v1)
            fixed, slope = fit_line(u1, v1.run[name].cpu_s, u2, v2.run[name].cpu_s)
            return fixed * shards + slope * full, v2.run[name]
        m = v2.run.get(name) or v1.run[name]
        if m.cpu_s == 0.0 and name in v1.run:  # reused in pilot 2: take pilot 1's figure
            m = v1.run[name]
        same, same_full = self.fixed_parts(m, v1.params[name])
        return same_full + (m.cpu_s - same) * full / max(u2, 1e-9), m

    def fixed_parts(self, m: StageMeasure, params: Any) -> tuple[float, float]:
        """CPU seconds (pilot, full) that do not follow the units (a model build)."""
        return 0.0, 0.0

    def full_rows(self, m: StageMeasure, scale: float, v2: PilotView, fixed_size: bool) -> float:
        """Rows of the full run: the pilot's for a fixed-size artefact (a model), else scaled."""
        return m.rows * (1.0 if fixed_size else scale)

    def tokens(self, m: StageMeasure, scale: float, tokens_per_row: float) -> float:
        """Tokens the full run scores (GPU work); 0 for a stage that scores none."""
        if self.gpu_tokens:
            return float(m.stats.get(self.gpu_tokens, 0)) * scale
        if self.gpu_rows and m.stats.get(self.gpu_rows):
            return float(m.stats[self.gpu_rows]) * scale * tokens_per_row
        return 0.0

    def pilot_settings(self, name: str, params: Any, s: PilotSettings) -> list[str]:
        """``SECTION.KEY=VALUE`` overrides of the pilot runs."""
        return [f"{name}.{self.shards}=1"] if self.shards else []

    def problem(self, name: str, params: Any) -> str | None:
        """Why a plan cannot price these settings (None: it can)."""
        return None

    def query_count(self, params: Any) -> float | None:
        """The full config's queries, for the stage that draws them (None for the others)."""
        return None

    def corpus_paths(self, params: Any) -> list[str] | None:
        """The corpus files the pilots sample, for the stage that reads them (else None)."""
        return None


@dataclass(frozen=True, kw_only=True)
class Constant(CostModel):
    """As measured: the work does not grow with the corpus or the queries (pilot 1 only)."""

    @property
    def second_pilot(self) -> bool:
        return False


@dataclass(frozen=True, kw_only=True)
class CorpusBytes(CostModel):
    """Scaled by corpus bytes (full / sample). ``sample``: the param listing the corpus files,
    for the stage that reads them (the pilots read a seeded sample of them instead)."""

    sample: str | None = None

    @property
    def kind(self) -> str:
        return "corpus"

    def basis(self, name: str) -> str:
        return "corpus bytes"

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        return float(v.sample_bytes), float(v.full_bytes)

    def pilot_settings(self, name: str, params: Any, s: PilotSettings) -> list[str]:
        own = [f"{name}.{self.sample}={json.dumps(s.corpus)}"] if self.sample else []
        return own + super().pilot_settings(name, params, s)

    @property
    def samples_corpus(self) -> bool:
        return self.sample is not None

    def corpus_paths(self, params: Any) -> list[str] | None:
        return [str(p) for p in getattr(params, self.sample)] if self.sample else None


@dataclass(frozen=True, kw_only=True)
class CorpusUnits(CorpusBytes):
    """The units a stage encodes: the pilot's count (stat ``count``) scaled by corpus bytes, at
    most the param ``cap`` (0: no cap), so a stage that encodes a sample of the corpus's units
    is priced by the sample, not by the corpus."""

    count: str
    cap: str

    def basis(self, name: str) -> str:
        return "units encoded"

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        m = v.run.get(name)
        pilot = float(m.stats.get(self.count, 0)) if m is not None else 0.0
        if pilot <= 0:  # no count recorded: the corpus's bytes, as before
            return super().units(name, v)
        full = pilot * v.corpus_ratio
        cap = int(getattr(v.params[name], self.cap, 0) or 0)
        return pilot, min(full, float(cap)) if cap > 0 else full


@dataclass(frozen=True, kw_only=True)
class QueryCount(CostModel):
    """The queries themselves: ``count`` of them in full, at most one per sentence of
    ``sentences`` (the pilots draw ``q`` and ``2q``). Plans need ``source_param`` = ``source``."""

    count: str
    sentences: str
    source_param: str
    source: str

    @property
    def kind(self) -> str:
        return "scaled"

    def basis(self, name: str) -> str:
        return "queries"

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        if self.sentences in v.run:
            sents = float(v.run[self.sentences].rows) * v.corpus_ratio
        else:
            sents = v.full_queries
        return v.queries, min(v.full_queries, sents)

    def pilot_settings(self, name: str, params: Any, s: PilotSettings) -> list[str]:
        return [*super().pilot_settings(name, params, s), f"{name}.{self.count}={s.queries}"]

    def problem(self, name: str, params: Any) -> str | None:
        if getattr(params, self.source_param) != self.source:
            return f"plan supports {name}.{self.source_param}={self.source} only"
        return None

    def query_count(self, params: Any) -> float | None:
        return float(getattr(params, self.count))


@dataclass(frozen=True, kw_only=True)
class PerQueryRows(CostModel):
    """The stage's own rows per query, times the full config's queries; ``fit``: a fixed cost
    per query shard plus a cost per row (else the pilot's cost scaled). With ``cap`` (the param
    capping its rows per query), a stage the pilot's small corpus starved (fewer rows than the
    cap) grows with the hits of ``feeder`` per query in full (its ``feeder_cap`` hits, at most
    the chunks of ``chunks``), up to its own cap."""

    fit: bool = True
    cap: str | None = None
    chunks: str | None = None
    feeder: str | None = None
    feeder_cap: str | None = None

    @property
    def kind(self) -> str:
        return "fit" if self.fit else "scaled"

    @property
    def rows_cap(self) -> str | None:
        return self.cap

    def basis(self, name: str) -> str:
        return f"{name} rows"

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        m = v.run[name]
        per_q = m.rows / v.queries
        if self.cap is not None and self.chunks in v.run:
            per_q = self.full_per_query(name, v, per_q)
        return float(m.rows), per_q * v.full_queries

    def full_per_query(self, name: str, v: PilotView, per_q: float) -> float:
        """Rows per query in full, from the pilot's ``per_q`` (the stage is capped)."""
        chunks = v.run[self.chunks].rows  # type: ignore[index]
        limit = float(getattr(v.params[name], self.cap, per_q))  # type: ignore[arg-type]
        if per_q < limit and chunks * v.corpus_ratio > chunks:
            feeder = v.run.get(self.feeder)  # type: ignore[arg-type]
            r_pilot = feeder.rows / v.queries if feeder else per_q
            feeder_limit = float(getattr(v.params[self.feeder], self.feeder_cap))  # type: ignore[index, arg-type]
            r_full = min(feeder_limit, chunks * v.corpus_ratio)
            per_q = min(limit, per_q * r_full / max(r_pilot, 1e-9))
        return per_q


@dataclass(frozen=True, kw_only=True)
class Hits(PerQueryRows):
    """Retrieval hits per query: they grow with the chunks sharing an n-gram (the corpus), up
    to ``cap`` and the chunks of ``chunks``."""

    def full_per_query(self, name: str, v: PilotView, per_q: float) -> float:
        chunks_full = v.run[self.chunks].rows * v.corpus_ratio  # type: ignore[index]
        limit = float(getattr(v.params[name], self.cap, per_q))  # type: ignore[arg-type]
        grow = v.corpus_ratio if per_q < limit else 1.0
        return min(limit, chunks_full, per_q * grow)


@dataclass(frozen=True, kw_only=True)
class CorpusSideAndRows(PerQueryRows):
    """Per query rows plus a corpus-side part that pilot 1 computes once and pilot 2 reuses
    (an encoding of the corpus, cached): pilot 1's cost beyond its rows, scaled by the corpus."""

    def cpu(
        self, name: str, v1: PilotView, v2: PilotView, u2: float, full: float, shards: int
    ) -> tuple[float, StageMeasure]:
        if name not in v2.run:  # not re-run in pilot 2: the pilot's cost, scaled
            return super().cpu(name, v1, v2, u2, full, shards)
        u1, _ = self.units(name, v1)
        m1, m2 = v1.run[name], v2.run[name]
        slope = m2.cpu_s / max(u2, 1e-9)
        corpus_side = max(m1.cpu_s - slope * u1, 0.0) * v1.corpus_ratio
        peak = max(m1.peak_rss_mb, m2.peak_rss_mb)
        return corpus_side + slope * full, replace(m2, peak_rss_mb=peak)


@dataclass(frozen=True, kw_only=True)
class IdfSample(CostModel):
    """Fitting an IDF on a sample of ``sample`` (a param) sentences of ``sentences``: the mean
    of the pilots' cost per sampled sentence; its rows follow the queries."""

    sample: str
    sentences: str

    @property
    def kind(self) -> str:
        return "scaled"

    def basis(self, name: str) -> str:
        return "idf sentences"

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        sents = float(v.run[self.sentences].rows) if self.sentences in v.run else 1.0
        cap = getattr(v.params[name], self.sample)
        return min(cap, sents), min(cap, sents * v.corpus_ratio)

    def cpu(
        self, name: str, v1: PilotView, v2: PilotView, u2: float, full: float, shards: int
    ) -> tuple[float, StageMeasure]:
        m = v2.run[name]
        return (v1.run[name].cpu_s + m.cpu_s) / 2 * full / max(u2, 1e-9), m

    def full_rows(self, m: StageMeasure, scale: float, v2: PilotView, fixed_size: bool) -> float:
        return m.rows / v2.queries * v2.full_queries


@dataclass(frozen=True, kw_only=True)
class InputRowsPerQuery(CostModel):
    """Fixed + per unit on the two pilots, the unit being the rows of input ``rows_of`` (e.g.
    labelled pairs), which follow the queries."""

    rows_of: str
    label: str

    @property
    def kind(self) -> str:
        return "fit"

    def basis(self, name: str) -> str:
        return self.label

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        src = v.run.get(self.rows_of)
        n = float(src.rows if src else v.run[name].rows)
        return n, n / v.queries * v.full_queries
