"""The cost models of the training stages (``Stage.cost``; the vocabulary and the other models
are in store/cost_model.py): windows a model trains on (``TrainedWindows``), windows it scores
in validation and evaluation (``ScoredWindows``) and a fixed optimizer-step budget
(``OptimizerSteps``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxsim.store.cost_model import CostModel, PilotSettings, PilotView, StageMeasure


@dataclass(frozen=True, kw_only=True)
class TrainedWindows(CostModel):
    """Training windows (stat ``train_stat``; corpus-scaled, capped per epoch by the param
    ``epoch_cap``) plus validation windows (stat ``val_stat``; corpus-scaled, forward only: a
    ``val_divisor``-th of a training window's work each)."""

    train_stat: str
    val_stat: str
    epoch_cap: str
    val_divisor: int = 3

    @property
    def kind(self) -> str:
        return "scaled"

    def basis(self, name: str) -> str:
        return "windows"

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        m = v.run[name]
        train = float(m.stats.get(self.train_stat, m.rows) or 1)
        val = float(m.stats.get(self.val_stat, 0) or 0)
        full = train * v.corpus_ratio
        cap = getattr(v.params[name], self.epoch_cap, 0) or 0
        if cap:
            train, full = min(train, cap), min(full, cap)
        d = self.val_divisor
        return train + val / d, full + val * v.corpus_ratio / d


@dataclass(frozen=True, kw_only=True)
class ScoredWindows(CostModel):
    """Windows scored in validation (``per_val`` each; stat ``val_stat``, capped by the param
    ``val_cap``) and evaluation (``per_eval`` each; stat ``eval_stat``, param ``eval_param``).
    The pilots score at most ``val_per_eval`` validation windows per evaluation item and train
    a few steps (param ``steps_param``); the model build (stat ``build_stat``, seconds) is the
    same work in full, training (``train_stat`` seconds over ``steps_stat`` steps) scales by
    steps."""

    per_val: int
    per_eval: int
    val_stat: str
    eval_stat: str
    val_cap: str
    eval_param: str
    val_per_eval: int
    steps_param: str
    build_stat: str
    train_stat: str
    steps_stat: str

    @property
    def kind(self) -> str:
        return "scaled"

    def basis(self, name: str) -> str:
        return "windows scored"

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        m, p = v.run[name], v.params[name]
        val, n_eval = float(m.stats.get(self.val_stat, 0)), float(m.stats.get(self.eval_stat, 0))
        pilot_cap = min(getattr(p, self.val_cap), self.val_per_eval * v.pilot_eval)
        full_val = float(getattr(p, self.val_cap))
        if val < pilot_cap:  # a validation set the pilot capped is taken as capped in full too
            full_val = min(full_val, val * v.corpus_ratio)
        full_eval = min(float(getattr(p, self.eval_param)), full_val)
        return (
            self.per_val * val + self.per_eval * n_eval,
            self.per_val * full_val + self.per_eval * full_eval,
        )

    def fixed_parts(self, m: StageMeasure, params: Any) -> tuple[float, float]:
        if not m.wall_s:
            return 0.0, 0.0
        to_cpu = m.cpu_s / m.wall_s  # the stats split wall-clock seconds
        build = float(m.stats.get(self.build_stat, 0.0)) * to_cpu
        train = float(m.stats.get(self.train_stat, 0.0)) * to_cpu
        steps = float(m.stats.get(self.steps_stat, 0) or 0)
        full_train = train * (getattr(params, self.steps_param) / steps) if steps else 0.0
        return build + train, build + full_train

    def full_rows(self, m: StageMeasure, scale: float, v2: PilotView, fixed_size: bool) -> float:
        return m.rows * scale  # its rows are the evaluation's, not the model's

    def pilot_settings(self, name: str, params: Any, s: PilotSettings) -> list[str]:
        p = params
        n_val = min(getattr(p, self.val_cap), self.val_per_eval * s.eval)
        return [
            f"{name}.{self.eval_param}={min(getattr(p, self.eval_param), s.eval)}",
            f"{name}.{self.val_cap}={n_val}",
            f"{name}.{self.steps_param}={min(getattr(p, self.steps_param), s.train_steps)}",
        ]


@dataclass(frozen=True, kw_only=True)
class OptimizerSteps(CostModel):
    """A fixed step budget (param ``steps``): the pilots run a few steps (pilot k: (k + 1) x
    the plan's train steps, never past the budget; ``eval_steps`` set alike), fitted as a fixed
    part plus a cost per step (stat ``steps_stat``). ``per_query``: params that add examples
    beside the labelled pairs (a corpus-sentence budget), scaled in the pilots by their share of
    the queries, so a pilot's batches mix the datasets as the full run's do: a step on long
    context examples costs more than one on short pairs (MedQuAD: 5.7 against 4.2 CPU-s)."""

    steps: str
    eval_steps: str
    steps_stat: str
    per_query: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return "fit"

    def basis(self, name: str) -> str:
        return "optimizer steps"

    def units(self, name: str, v: PilotView) -> tuple[float, float]:
        done = float(v.run[name].stats.get(self.steps_stat) or 1)
        return done, float(getattr(v.params[name], self.steps))

    def pilot_settings(self, name: str, params: Any, s: PilotSettings) -> list[str]:
        n = min(getattr(params, self.steps), (s.index + 1) * s.train_steps)
        out = [f"{name}.{self.steps}={n}", f"{name}.{self.eval_steps}={n}"]
        for p in self.per_query:
            if (full := getattr(params, p)) > 0:
                out.append(f"{name}.{p}={max(1, round(full * s.share))}")
        return out
