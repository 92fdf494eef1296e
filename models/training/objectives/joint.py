"""``joint``: ctxsim's labelled pairs and SimCSE's positives in one training (sentence-transformers
multi-dataset training: each batch comes from one of the two, in proportion to their sizes, or
the labels' share of them set by ``train.label_share``)."""

from __future__ import annotations

from typing import Any

from ctxsim.models.training.objectives.base import (
    OBJECTIVES,
    Examples,
    ObjectiveContext,
    TrainingPairs,
    TrainObjective,
    register,
)

#: the objectives trained together, in the order the trainer sees their datasets
PARTS = ("ctxsim", "simcse")


@register
class JointObjective(TrainObjective):
    name = "joint"
    eq4_labels = True
    parts = PARTS
    pair_budget = True
    needs_dropout = True

    def examples(self, pairs: TrainingPairs, oc: ObjectiveContext) -> Examples:
        from datasets import DatasetDict

        parts = {k: OBJECTIVES[k].examples(pairs, oc) for k in PARTS}
        return Examples(DatasetDict({k: e.data for k, e in parts.items()}), pairs.s1 + pairs.s2)

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        return {k: OBJECTIVES[k].loss(model, oc, backbone_path) for k in PARTS}
