"""``none``: no training at all: the backbone as it is, the bar every objective must clear."""

from __future__ import annotations

from typing import Any

from ctxsim.models.training.objectives.base import (
    Examples,
    ObjectiveContext,
    TrainingPairs,
    TrainObjective,
    dataset,
    register,
)


@register
class NoTraining(TrainObjective):
    name = "none"
    trains = False

    def examples(self, pairs: TrainingPairs, oc: ObjectiveContext) -> Examples:
        return Examples(dataset({}), pairs.s1 + pairs.s2)

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        return None
