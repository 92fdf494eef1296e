"""``simcse``: unsupervised SimCSE (Gao et al. 2021): each distinct sentence of the pairs is its
own positive, dropout is the noise, the other sentences of the batch are the negatives
(``MultipleNegativesRankingLoss``, scale 20 = temperature 0.05)."""

from __future__ import annotations

from typing import Any

from ctxsim.models.training.objectives.base import (
    Examples,
    ObjectiveContext,
    TrainingPairs,
    TrainObjective,
    dataset,
    ranking_loss,
    register,
    sentence_pool,
)


def simcse_columns(s1: list[str], s2: list[str]) -> dict[str, list[str]]:
    pool = sentence_pool(s1, s2)
    return {"anchor": pool, "positive": list(pool)}


@register
class SimcseObjective(TrainObjective):
    name = "simcse"
    pair_budget = True
    needs_dropout = True

    def examples(self, pairs: TrainingPairs, oc: ObjectiveContext) -> Examples:
        return Examples(dataset(simcse_columns(pairs.s1, pairs.s2)), pairs.s1 + pairs.s2)

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        return ranking_loss(model)
