"""What the surrogate learns from: the training examples and the loss of each objective.

The `train` stage compares ctxsim's Eq. 4 labels with what a user could get from the same
sentences and the same CPU another way (issue 18):

- ``ctxsim``: the label artefact's pairs and labels (the paper);
- ``tfidf``: the same pairs, labelled by the TF-IDF cosine of the two sentences instead;
- ``simcse``: unsupervised SimCSE (Gao et al. 2021): each sentence of those pairs is its own
  positive, dropout is the noise, the other sentences of the batch are the negatives
  (sentence-transformers' ``MultipleNegativesRankingLoss``, scale 20 = temperature 0.05);
- ``tsdae``: TSDAE (Wang et al. 2021): each sentence of those pairs, with 60% of its words deleted,
  is encoded and a decoder tied to the encoder must rebuild the sentence from that one vector
  (sentence-transformers' ``DenoisingAutoEncoderLoss``);
- ``joint``: ctxsim's labelled pairs and SimCSE's positives in one training (sentence-transformers
  multi-dataset training: each batch comes from one of the two, in proportion to their sizes);
- ``none``: the untrained backbone.

Labelled objectives take one of sentence-transformers' regression/ranking losses: ``cosine`` is the
paper's L2 on the cosine (``CosineSimilarityLoss``); ``cosent`` and ``angle`` (``CoSENTLoss``,
``AnglELoss``) use only the order of the labels inside a batch, so a band of 1e-6 teaches as
much as a band of 1; ``clrcmd`` is the contrastive RCMD loss (models/losses/clrcmd_loss.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

Objective = Literal["ctxsim", "simcse", "tfidf", "tsdae", "joint", "none"]
LossName = Literal["cosine", "cosent", "angle", "clrcmd"]

#: SimCSE's temperature 0.05 as sentence-transformers' similarity scale (Gao et al. 2021, Sec. 3)
SIMCSE_SCALE = 20.0
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


def sentence_pool(s1: Sequence[str], s2: Sequence[str]) -> list[str]:
    """The distinct sentences of the pairs, in first-seen order (deterministic): SimCSE's data.
    Distinct, because a duplicate in a batch would be a false negative for MNRL."""
    seen: dict[str, None] = {}
    for a, b in zip(s1, s2, strict=True):
        seen.setdefault(a, None)
        seen.setdefault(b, None)
    return list(seen)


def training_columns(
    objective: Objective, s1: Sequence[str], s2: Sequence[str], targets: np.ndarray | None
) -> dict[str, list[Any]]:
    """The columns of the training dataset: (sentence1, sentence2, score) for the labelled
    objectives, (anchor, positive) with positive = anchor for SimCSE."""
    if objective == "simcse":
        pool = sentence_pool(s1, s2)
        return {"anchor": pool, "positive": list(pool)}
    if objective == "tsdae":
        pool = sentence_pool(s1, s2)
        rng = np.random.default_rng(0)
        return {
            "damaged": [delete_words(x, TSDAE_DELETE_RATIO, rng) for x in pool],
            "original": pool,
        }
    if objective in ("ctxsim", "tfidf"):
        if targets is None or len(targets) != len(s1):
            raise ValueError("labelled objectives need one target per pair")
        return {
            "sentence1": list(s1),
            "sentence2": list(s2),
            "score": np.asarray(targets, dtype=np.float32).tolist(),
        }
    raise ValueError(f"objective {objective!r} has no training data")


def build_loss(
    objective: Objective,
    loss: LossName,
    model: Any,
    clrcmd: dict[str, Any],
    backbone_path: str | None = None,
) -> Any:
    """The sentence-transformers loss module for an objective (``clrcmd``: CLRCMDLoss's kwargs;
    ``backbone_path``: the checkpoint TSDAE's decoder starts from)."""
    from sentence_transformers import losses

    if objective == "simcse":
        return losses.MultipleNegativesRankingLoss(model, scale=SIMCSE_SCALE)
    if objective == "tsdae":
        # the decoder starts from the encoder's own checkpoint and shares its weights (the
        # TSDAE paper's setting)
        if backbone_path is None:
            raise ValueError("objective 'tsdae' needs the backbone checkpoint for its decoder")
        return losses.DenoisingAutoEncoderLoss(
            model, decoder_name_or_path=backbone_path, tie_encoder_decoder=True
        )
    if loss == "cosine":
        return losses.CosineSimilarityLoss(model)
    if loss == "cosent":
        return losses.CoSENTLoss(model)
    if loss == "angle":
        return losses.AnglELoss(model)
    if loss == "clrcmd":
        from ctxsim.models.losses.clrcmd_loss import CLRCMDLoss

        return CLRCMDLoss(model, **clrcmd)
    raise ValueError(f"unknown loss {loss!r}")


def has_dropout(model: Any) -> bool:
    """Whether training-mode forward passes are noisy: SimCSE's two views of a sentence differ
    only by dropout, so without it (Gemma-3 ships with dropout 0) its positives are identical."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) and m.p > 0:
            return True
        cfg = getattr(m, "config", None)
        if cfg is not None and float(getattr(cfg, "attention_dropout", 0.0) or 0.0) > 0:
            return True
    return False


def dropout_config(config: dict[str, Any], p: float) -> dict[str, float]:
    """Config overrides that set every dropout probability of a transformers config to ``p``
    (``hidden_dropout_prob``, ``attention_probs_dropout_prob``, ``attention_dropout``, ...):
    SimCSE needs a noisy forward pass, and Gemma-3 ships with its only dropout at 0. Keys left
    unset (``classifier_dropout: None``) stay unset."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"train.dropout must be in [0, 1), got {p}")
    return {
        k: float(p)
        for k, v in config.items()
        if ("dropout" in k or k.endswith("pdrop"))
        and isinstance(v, int | float)
        and not isinstance(v, bool)
    }


def steps_for(n_examples: int, batch_size: int, epochs: float) -> int:
    """Optimizer steps of ``epochs`` passes over ``n_examples`` (the trainer's count, drop_last
    off): the budget every objective gets when ``max_steps`` is not set."""
    return max(1, int(np.ceil(np.ceil(n_examples / batch_size) * epochs)))
