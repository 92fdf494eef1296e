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
- ``context``: each sentence of those pairs that comes from the corpus, with its real right
  context (the next ``context_width`` sentences of its section) as the positive and the other
  contexts of the batch as negatives (``MultipleNegativesRankingLoss``): the paper's premise
  (a sentence means the contexts it fits) taught directly, with no Eq. 4 scores;
- ``teacher``: the same pairs, labelled by the cosine of a larger packaged encoder (``teacher``,
  all-mpnet-base-v2 by default): distillation, and the check of what the pairs and the loss can
  teach when the labels are good;
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

Objective = Literal["ctxsim", "simcse", "tfidf", "tsdae", "joint", "context", "teacher", "none"]
#: objectives whose training rows are (sentence1, sentence2, score)
LABELLED: tuple[str, ...] = ("ctxsim", "tfidf", "teacher")
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


def right_contexts(
    sent_ids: np.ndarray,
    section_ids: np.ndarray,
    texts: Sequence[str],
    wanted: Sequence[int | None],
    width: int,
) -> list[str | None]:
    """The real right context of each wanted sentence: the next ``width`` sentences of its
    section, joined by a space (the shard's order: ``sent_ids`` ascending within a section);
    None for a sentence that is not in the corpus or ends its section."""
    if width < 1:
        raise ValueError(f"context width must be >= 1, got {width}")
    order = np.argsort(sent_ids, kind="stable")
    sid, sec = np.asarray(sent_ids)[order], np.asarray(section_ids)[order]
    out: list[str | None] = []
    for w in wanted:
        if w is None:
            out.append(None)
            continue
        i = int(np.searchsorted(sid, w))
        if i >= len(sid) or sid[i] != w:
            out.append(None)
            continue
        j = np.arange(i + 1, min(i + 1 + width, len(sid)))
        j = j[sec[j] == sec[i]]
        out.append(" ".join(texts[order[k]] for k in j) if len(j) else None)
    return out


def sample_with_context(
    sent_ids: np.ndarray, section_ids: np.ndarray, n: int, seed: int
) -> np.ndarray:
    """``n`` sent_ids drawn without replacement (seeded) among the corpus sentences that have a
    right context (the next sentence is in the same section); all of them when fewer."""
    order = np.argsort(sent_ids, kind="stable")
    sid, sec = np.asarray(sent_ids)[order], np.asarray(section_ids)[order]
    has_next = np.flatnonzero(sec[:-1] == sec[1:])
    rng = np.random.default_rng(seed)
    take = rng.permutation(len(has_next))[: max(n, 0)]
    return sid[has_next[np.sort(take)]]


def context_pairs(
    s1: Sequence[str], s2: Sequence[str], c1: Sequence[str | None], c2: Sequence[str | None]
) -> tuple[list[str], list[str]]:
    """(sentence, its right context) for the distinct sentences of the pairs that have one, in
    first-seen order; a context seen twice is kept once (a duplicate in a batch would be a false
    negative for MNRL)."""
    anchors: list[str] = []
    positives: list[str] = []
    seen: set[str] = set()
    for a, b, ca, cb in zip(s1, s2, c1, c2, strict=True):
        for s, c in ((a, ca), (b, cb)):
            if c is None or s in seen or c in seen:
                continue
            seen.update((s, c))
            anchors.append(s)
            positives.append(c)
    return anchors, positives


def teacher_cosine(s1: Sequence[str], s2: Sequence[str], teacher: Any, batch_size: int = 64):
    """Cosine of a teacher encoder's vectors of the two sentences (each distinct sentence encoded
    once): the `teacher` objective's labels."""
    pool = sentence_pool(s1, s2)
    vecs = teacher.encode(pool, batch_size=batch_size, normalize_embeddings=True)
    vecs = np.asarray(vecs, dtype=np.float64)
    at = {s: i for i, s in enumerate(pool)}
    a = vecs[[at[x] for x in s1]]
    b = vecs[[at[x] for x in s2]]
    return np.einsum("ij,ij->i", a, b)


def sentence_pool(s1: Sequence[str], s2: Sequence[str]) -> list[str]:
    """The distinct sentences of the pairs, in first-seen order (deterministic): SimCSE's data.
    Distinct, because a duplicate in a batch would be a false negative for MNRL."""
    seen: dict[str, None] = {}
    for a, b in zip(s1, s2, strict=True):
        seen.setdefault(a, None)
        seen.setdefault(b, None)
    return list(seen)


def training_columns(
    objective: Objective,
    s1: Sequence[str],
    s2: Sequence[str],
    targets: np.ndarray | None,
    contexts: tuple[Sequence[str | None], Sequence[str | None]] | None = None,
) -> dict[str, list[Any]]:
    """The columns of the training dataset: (sentence1, sentence2, score) for the labelled
    objectives, (anchor, positive) with positive = anchor for SimCSE and the sentence's right
    context for ``context`` (``contexts``: those of s1 and of s2, None where there is none)."""
    if objective == "context":
        if contexts is None:
            raise ValueError("objective 'context' needs each sentence's right context")
        anchors, positives = context_pairs(s1, s2, *contexts)
        return {"anchor": anchors, "positive": positives}
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
    if objective in LABELLED:
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

    if objective in ("simcse", "context"):
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
