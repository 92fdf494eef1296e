"""``context``: each sentence of the pairs that comes from the corpus, with its real right context
(the next ``train.context_width`` sentences of its section) as the positive and the other contexts
of the batch as negatives (``MultipleNegativesRankingLoss``): the paper's premise (a sentence means
the contexts it fits) taught directly, with no Eq. 4 scores. ``context_corpus_sentences`` adds a
seeded sample of corpus sentences with their contexts: they cost no labels.

Reads the pairs' sentences, never their labels (`train` hands it the `pairs` artefact's train
split, so a run needs no embed or label stage), `queries` (a pair's ``s1_id``/``s2_id`` is a
query id; its ``sent_id`` places it in the corpus) and `shard` (the corpus sentences, their
sections and order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxsim.models.errors import InputError
from ctxsim.models.training.objectives.base import (
    Examples,
    ObjectiveContext,
    TrainingPairs,
    TrainObjective,
    dataset,
    ranking_loss,
    register,
)


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


def pair_contexts(
    pairs: TrainingPairs, oc: ObjectiveContext
) -> tuple[list[str | None], list[str | None], list[str]]:
    """Each pair's two sentences' right contexts (None: not a corpus sentence), then those of
    ``context_corpus_sentences`` sampled corpus sentences appended to both lists, whose texts
    come third."""
    p = oc.params
    for col in ("s1_id", "s2_id"):
        if col not in pairs.table.column_names:
            raise ValueError(f"objective context: pairs {pairs.source} have no column {col!r}")
    q = oc.read_input("queries", ["query_id", "sent_id"])
    qid, sid = q.column("query_id").to_pylist(), q.column("sent_id").to_pylist()
    sent_of = dict(zip(qid, sid, strict=True))
    sh = oc.read_input("shard", ["sent_id", "section_id", "text"])
    sent_ids = sh.column("sent_id").to_numpy()
    sections = sh.column("section_id").to_numpy()
    texts = sh.column("text").to_pylist()
    sampled = sample_with_context(sent_ids, sections, p.context_corpus_sentences, oc.seed)
    extra_ctx = right_contexts(sent_ids, sections, texts, list(sampled), p.context_width)
    row_of = {s: i for i, s in enumerate(sent_ids.tolist())}
    extra_text = [texts[row_of[s]] for s in sampled.tolist()]
    out = []
    for col in ("s1_id", "s2_id"):
        qids = pairs.table.column(col).to_pylist()
        wanted = [sent_of.get(qids[i]) for i in pairs.rows]
        out.append(right_contexts(sent_ids, sections, texts, wanted, p.context_width) + extra_ctx)
    return out[0], out[1], extra_text


@register
class ContextObjective(TrainObjective):
    name = "context"
    inputs = ("queries", "shard")
    needs_labels = False
    pair_budget = True

    def examples(self, pairs: TrainingPairs, oc: ObjectiveContext) -> Examples:
        c1, c2, sampled = pair_contexts(pairs, oc)
        # a sampled corpus sentence joins as a pair with itself (context_pairs keeps it once)
        t1, t2 = pairs.s1 + sampled, pairs.s2 + sampled
        anchors, positives = context_pairs(t1, t2, c1, c2)
        if not anchors:  # the user's data: the config's STS pairs or a corpus of one-liners
            raise InputError(
                f"objective context: none of the {len(pairs)} pairs' sentences in "
                f"{pairs.source} has a right context in the corpus (sentences from "
                "an STS file, or each the last of its section)"
            )
        oc.log.info(
            "train: %d sentences with their right context (of %d pairs)", len(anchors), len(pairs)
        )
        return Examples(dataset({"anchor": anchors, "positive": positives}), t1 + t2)

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        return ranking_loss(model)
