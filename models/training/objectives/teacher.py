"""``teacher``: the same pairs, labelled by the cosine of a larger encoder (``train.teacher``,
all-mpnet-base-v2 by default): distillation, and the check of what the pairs and the loss can
teach when the labels are good."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxsim.models.training.objectives.base import (
    LabelledObjective,
    ObjectiveContext,
    TrainingPairs,
    register,
    sentence_pool,
)


def teacher_cosine(
    s1: Sequence[str], s2: Sequence[str], teacher: Any, batch_size: int = 64
) -> np.ndarray:
    """Cosine of a teacher encoder's vectors of the two sentences (each distinct sentence encoded
    once): the `teacher` objective's labels."""
    pool = sentence_pool(list(s1), list(s2))
    vecs = teacher.encode(pool, batch_size=batch_size, normalize_embeddings=True)
    vecs = np.asarray(vecs, dtype=np.float64)
    at = {s: i for i, s in enumerate(pool)}
    a = vecs[[at[x] for x in s1]]
    b = vecs[[at[x] for x in s2]]
    return np.einsum("ij,ij->i", a, b)


@register
class TeacherObjective(LabelledObjective):
    name = "teacher"
    computes_labels = True

    def raw_labels(self, pairs: TrainingPairs, oc: ObjectiveContext) -> np.ndarray:
        from ctxsim.models.registry import resolve_model
        from ctxsim.models.training.sentence_encoder import build_model

        p = oc.params
        teacher = build_model(str(resolve_model(p.teacher)), p.max_seq_length, oc.device)
        return teacher_cosine(pairs.s1, pairs.s2, teacher)
