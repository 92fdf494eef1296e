"""STS (readers/sts.py ``discover``: uniform TSVs and the organisers' files): Spearman x100 of a
similarity against the gold scores of one subset (Sun et al. 2022, Table 2; the `evaluate`
stage's tables add the "all"/"mean" conventions, the hard splits and the 7-set average)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.models.evaluation import metrics as M
from ctxsim.readers.evaluators.base import Evaluator, Similarity, eval_dir_formats, register
from ctxsim.readers.sts import StsSet, discover, sample_pairs


@register
class StsEvaluator(Evaluator):
    format = "sts"
    section = "datasets"
    in_eval_dir = False  # the stage's STS tables (tasks/evaluate/sts_scores.py) report it
    primary_metric = "spearman"
    title = "STS (Spearman and Pearson x100)"
    columns = {"spearman": "Spearman", "pearson": "Pearson"}
    count = ("n_pairs", "pairs")
    interval_metrics = ("spearman",)

    def __init__(self, data: StsSet) -> None:
        self.data = data
        self.name = data.name

    @classmethod
    def discover(
        cls, root: str | Path, max_pairs: int | None = None, seed: int = 0
    ) -> list[StsEvaluator]:
        """Every STS set under ``root`` (a seeded sample of ``max_pairs`` pairs each), the files
        of the other formats of the folder left out."""
        root = Path(root).expanduser()
        if not root.is_dir():
            return []
        skip = tuple(c.pattern for c in eval_dir_formats() if c.pattern)
        return [cls(sample_pairs(s, max_pairs, seed)) for s in discover(root, skip=skip)]

    def __len__(self) -> int:
        return len(self.data)

    def describe(self) -> str:
        return f"STS on {self.name} ({len(self)} pairs)"

    def predict(self, system: Similarity) -> np.ndarray:
        return np.asarray(system.paired(self.data.s1, self.data.s2), dtype=np.float64)

    def scores(self, pred: np.ndarray) -> dict[str, Any]:
        return {
            "spearman": M.spearman(pred, self.data.gold),
            "pearson": M.pearson(pred, self.data.gold),
            "n_pairs": len(self),
        }

    def interval(
        self,
        a: np.ndarray,
        b: np.ndarray,
        metric: str,
        n_resamples: int,
        confidence: float,
        seed: int,
    ) -> dict[str, Any]:
        return M.bootstrap_diff_ci(self.data.gold, a, b, metric, n_resamples, confidence, seed)
