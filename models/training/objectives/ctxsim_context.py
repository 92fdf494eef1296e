"""``ctxsim-context``: the label artefact's Eq. 4 labels and each sentence's real right context in
one training (multi-dataset: each batch from one of the two, in proportion to their sizes, or
the labels' share of them set by ``train.label_share``).

The labels teach which sentences mean alike (on MedQuAD, questions that entail each other); the
right contexts keep what the labels alone pull apart: a question and its answer, which Origin's
profiles do not match (docs/results.md, the encoder as the contextual model)."""

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
PARTS = ("ctxsim", "context")


@register
class CtxsimContextObjective(TrainObjective):
    name = "ctxsim-context"
    eq4_labels = True
    parts = PARTS
    inputs = ("queries", "shard")
    pair_budget = True

    def examples(self, pairs: TrainingPairs, oc: ObjectiveContext) -> Examples:
        from datasets import DatasetDict

        parts = {k: OBJECTIVES[k].examples(pairs, oc) for k in PARTS}
        texts = [t for e in parts.values() for t in e.texts]
        return Examples(DatasetDict({k: e.data for k, e in parts.items()}), texts)

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        return {k: OBJECTIVES[k].loss(model, oc, backbone_path) for k in PARTS}
