"""``tsdae``: TSDAE (Wang et al. 2021): each distinct sentence of the pairs, with 60% of its words
deleted, is encoded, and a decoder tied to the encoder must rebuild the sentence from that one
vector (sentence-transformers' ``DenoisingAutoEncoderLoss``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxsim.models.training.objectives.base import (
    Examples,
    ObjectiveContext,
    TrainingPairs,
    TrainObjective,
    dataset,
    register,
    sentence_pool,
)

#: TSDAE's deletion noise: the share of words deleted (Wang et al. 2021, Sec. 3: 0.6 was best)
TSDAE_DELETE_RATIO = 0.6


def delete_words(text: str, ratio: float, rng: np.random.Generator) -> str:
    """TSDAE's noise: each whitespace-separated word is kept with probability 1 - ``ratio``; at
    least one word stays. (sentence-transformers' default uses nltk's tokenizer, whose data is a
    download; whitespace words keep the noise offline and reproducible.)"""
    words = text.split()
    if not words:
        return text
    keep = rng.random(len(words)) >= ratio
    if not keep.any():
        keep[rng.integers(len(words))] = True
    return " ".join(w for w, k in zip(words, keep, strict=True) if k)


def tsdae_columns(s1: list[str], s2: list[str]) -> dict[str, list[str]]:
    """(damaged, original) for each distinct sentence; the noise is seeded, so the same pairs
    give the same examples every time."""
    pool = sentence_pool(s1, s2)
    rng = np.random.default_rng(0)
    return {"damaged": [delete_words(x, TSDAE_DELETE_RATIO, rng) for x in pool], "original": pool}


@register
class TsdaeObjective(TrainObjective):
    name = "tsdae"
    pair_budget = True

    def examples(self, pairs: TrainingPairs, oc: ObjectiveContext) -> Examples:
        return Examples(dataset(tsdae_columns(pairs.s1, pairs.s2)), pairs.s1 + pairs.s2)

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        from sentence_transformers import losses

        # the decoder starts from the encoder's own checkpoint and shares its weights (the
        # TSDAE paper's setting)
        return losses.DenoisingAutoEncoderLoss(
            model, decoder_name_or_path=backbone_path, tie_encoder_decoder=True
        )
