"""Pair classification (``*.pairs.tsv``, readers/domain.py ``read_pairs``): AP of the pairs'
similarity against 0/1 labels, best-threshold accuracy and F1 (MTEB PairClassification)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.models.evaluation import domain_metrics as D
from ctxsim.readers.domain import PAIRS_GLOB, PairSet, read_pairs
from ctxsim.readers.evaluators.base import Evaluator, Similarity, register


@register
class PairsEvaluator(Evaluator):
    format = "pairs"
    section = "pairs"
    pattern = PAIRS_GLOB
    suffix = ".pairs.tsv"
    primary_metric = "ap"
    title = "Pair classification (cosine; AP, best-threshold accuracy and F1, x100)"
    columns = {"ap": "AP", "accuracy": "accuracy", "f1": "F1"}
    count = ("n_pairs", "pairs")
    interval_metrics = ("ap",)

    def __init__(self, data: PairSet) -> None:
        self.data = data
        self.name = data.name

    @classmethod
    def read(cls, path: Path, name: str) -> PairsEvaluator:
        return cls(read_pairs(path, name))

    def __len__(self) -> int:
        return len(self.data)

    def describe(self) -> str:
        return f"pair classification on {self.name} ({len(self)} pairs)"

    def predict(self, system: Similarity) -> np.ndarray:
        return system.paired(self.data.s1, self.data.s2)

    def scores(self, pred: np.ndarray) -> dict[str, Any]:
        return D.pair_classification_scores(pred, self.data.labels)

    def interval(
        self,
        a: np.ndarray,
        b: np.ndarray,
        metric: str,
        n_resamples: int,
        confidence: float,
        seed: int,
    ) -> dict[str, Any]:
        if metric != "ap":
            raise ValueError(f"pairs: no interval for {metric!r} (only ap)")
        return D.ap_diff_ci(self.data.labels, a, b, n_resamples, confidence, seed)
