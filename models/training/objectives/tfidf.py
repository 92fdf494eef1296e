"""``tfidf``: the same pairs, labelled by the TF-IDF cosine of their two sentences instead of Eq. 4:
what the pairs and the loss teach with labels that cost a vectoriser."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxsim.models.training.objectives.base import (
    LabelledObjective,
    ObjectiveContext,
    TrainingPairs,
    register,
)


def tfidf_cosine(s1: Sequence[str | None], s2: Sequence[str | None]) -> np.ndarray:
    """Cosine of the two sentences' TF-IDF vectors (word unigrams, sublinear tf, IDF from the
    distinct sentences of all pairs; a missing sentence is empty): the baseline the label stage
    reports as ``tfidf_cosine``, the `tfidf` objective's labels and reference encoder."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    s1 = [x or "" for x in s1]
    s2 = [x or "" for x in s2]
    if len(s1) != len(s2):
        raise ValueError(f"{len(s1)} first sentences but {len(s2)} second sentences")
    vec = TfidfVectorizer(sublinear_tf=True).fit(sorted(set(s1) | set(s2)))
    xa, xb = vec.transform(list(s1)), vec.transform(list(s2))
    return np.asarray(xa.multiply(xb).sum(axis=1), dtype=np.float64).ravel()


@register
class TfidfObjective(LabelledObjective):
    name = "tfidf"
    computes_labels = True

    def raw_labels(self, pairs: TrainingPairs, oc: ObjectiveContext) -> np.ndarray:
        return tfidf_cosine(pairs.s1, pairs.s2)
