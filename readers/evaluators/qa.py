"""Question-to-answer retrieval (``*_qa.jsonl``, readers/domain.py ``read_qa``): each question
against every answer of its file, nDCG@10, MRR@10 and Recall@100 per question (MTEB Retrieval)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.models.evaluation import domain_metrics as D
from ctxsim.readers.domain import QA_GLOB, QaSet, read_qa
from ctxsim.readers.evaluators.base import Evaluator, Similarity, register


@register
class QaEvaluator(Evaluator):
    format = "qa"
    section = "retrieval"
    pattern = QA_GLOB
    suffix = ".jsonl"
    primary_metric = "ndcg_at_10"
    title = "Retrieval (question to answer; x100)"
    columns = {"ndcg_at_10": "nDCG@10", "mrr_at_10": "MRR@10", "recall_at_100": "Recall@100"}
    count = ("n_queries", "questions")
    interval_metrics = ("ndcg_at_10", "mrr_at_10")

    def __init__(self, data: QaSet) -> None:
        self.data = data
        self.name = data.name

    @classmethod
    def read(cls, path: Path, name: str) -> QaEvaluator:
        return cls(read_qa(path, name))

    def __len__(self) -> int:
        return len(self.data)

    def describe(self) -> str:
        return f"retrieval on {self.name} ({len(self)} questions, {len(self.data.answers)} answers)"

    def predict(self, system: Similarity) -> dict[str, np.ndarray]:
        """Per-question metrics (x100) of the system's question x answer similarities."""
        sim = system.matrix(self.data.questions, self.data.answers)
        return D.retrieval_per_query(sim, self.data.relevant)

    def scores(self, pred: dict[str, np.ndarray]) -> dict[str, Any]:
        return D.retrieval_scores(pred)

    def interval(
        self,
        a: dict[str, np.ndarray],
        b: dict[str, np.ndarray],
        metric: str,
        n_resamples: int,
        confidence: float,
        seed: int,
    ) -> dict[str, Any]:
        return D.mean_diff_ci(a[metric], b[metric], n_resamples, confidence, seed)
