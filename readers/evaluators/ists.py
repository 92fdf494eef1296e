"""iSTS 2016 alignment (readers/ists.py ``discover_ists``: a ``.wa`` gold with its two chunk
files): the organisers' alignment F1 x100 of a system's alignments, against the gold without
non-EQUI alignments (CLRCMD's ``*.wa.equi``: the primary metric) and against the raw gold."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.models.evaluation.ists import WaPair, equi_filter, ists_f1
from ctxsim.readers.evaluators.base import Evaluator, register
from ctxsim.readers.ists import IstsDomain, discover_ists

#: a system of this format: the alignments (one WaPair per gold pair) of a domain
Aligner = Callable[[IstsDomain], list[WaPair]]


@register
class IstsEvaluator(Evaluator):
    format = "ists"
    section = "ists"
    in_eval_dir = False  # its own folder: evaluate.ists_dir
    primary_metric = "f1_ali_equi"
    title = "iSTS 2016 alignment F1 x100"
    columns = {"f1_ali_equi": "F1 (EQUI gold)", "f1_ali": "F1 (raw gold)"}
    count = ("n_pairs", "pairs")
    interval_metrics = ("f1_ali_equi",)

    def __init__(self, data: IstsDomain, remove_oppo: bool = False) -> None:
        self.data = data
        self.name = data.name
        self.gold_equi = equi_filter(data.gold, remove_oppo=remove_oppo)

    @classmethod
    def discover(cls, root: str | Path, remove_oppo: bool = False) -> list[IstsEvaluator]:
        root = Path(root).expanduser()
        if not root.is_dir():
            return []
        return [cls(d, remove_oppo) for d in discover_ists(root)]

    def __len__(self) -> int:
        return len(self.data.gold)

    def describe(self) -> str:
        return f"iSTS alignment on {self.name} ({len(self)} pairs)"

    def predict(self, system: Aligner) -> list[WaPair]:
        return system(self.data)

    def scores(self, pred: Sequence[WaPair]) -> dict[str, Any]:
        f_eq = ists_f1(self.gold_equi, pred, ("ali",))["ali"]
        f_raw = ists_f1(self.data.gold, pred, ("ali",))["ali"]
        return {
            "f1_ali_equi": f_eq["f1"] * 100,
            "precision_equi": f_eq["precision"] * 100,
            "recall_equi": f_eq["recall"] * 100,
            "f1_ali": f_raw["f1"] * 100,
            "n_pairs": len(self),
        }

    def interval(
        self,
        a: Sequence[WaPair],
        b: Sequence[WaPair],
        metric: str,
        n_resamples: int,
        confidence: float,
        seed: int,
    ) -> dict[str, Any]:
        """Paired percentile bootstrap of F1(a) - F1(b) x100: gold pairs resampled with both
        systems' alignments of them (a pair drawn twice counts twice)."""
        if metric not in ("f1_ali_equi", "f1_ali"):
            raise ValueError(f"ists: no interval for {metric!r}")
        gold = self.gold_equi if metric == "f1_ali_equi" else self.data.gold
        by_a, by_b = {p.id: p for p in a}, {p.id: p for p in b}

        def f1(ix: np.ndarray, by_id: dict) -> float:
            g = [_renamed(gold[i], k) for k, i in enumerate(ix)]
            s = [_renamed(by_id[gold[i].id], k) for k, i in enumerate(ix) if gold[i].id in by_id]
            return ists_f1(g, s, ("ali",))["ali"]["f1"] * 100

        every = np.arange(len(gold))
        delta = f1(every, by_a) - f1(every, by_b)
        rng = np.random.default_rng(seed)
        deltas = np.array(
            [
                f1(ix, by_a) - f1(ix, by_b)
                for ix in (rng.integers(0, len(gold), len(gold)) for _ in range(n_resamples))
            ]
        )
        alpha = (1 - confidence) / 2
        lo, hi = np.quantile(deltas, [alpha, 1 - alpha])
        return {
            "delta": float(delta),
            "ci_low": float(lo),
            "ci_high": float(hi),
            "confidence": confidence,
            "n_resamples": n_resamples,
            "significant": bool(lo > 0 or hi < 0),
        }


def _renamed(p: WaPair, k: int) -> WaPair:
    """``p`` under the id ``k`` (a resample may hold a pair twice)."""
    return WaPair(k, p.tokens1, p.tokens2, p.alignments)
