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
from typing import Any, NamedTuple

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


def context_pair_rows(
    s1: Sequence[str], s2: Sequence[str], c1: Sequence[str | None], c2: Sequence[str | None]
) -> list[tuple[int, int]]:
    """Which (row, side) of the pairs give a (sentence, right context) example: the distinct
    sentences that have one, in first-seen order; a context seen twice is kept once (a duplicate
    in a batch would be a false negative for MNRL)."""
    kept: list[tuple[int, int]] = []
    seen: set[str] = set()
    for row, (a, b, ca, cb) in enumerate(zip(s1, s2, c1, c2, strict=True)):
        for side, (s, c) in enumerate(((a, ca), (b, cb))):
            if c is None or s in seen or c in seen:
                continue
            seen.update((s, c))
            kept.append((row, side))
    return kept


def context_pairs(
    s1: Sequence[str], s2: Sequence[str], c1: Sequence[str | None], c2: Sequence[str | None]
) -> tuple[list[str], list[str]]:
    """(sentence, its right context) for the rows ``context_pair_rows`` keeps."""
    return kept_texts(context_pair_rows(s1, s2, c1, c2), s1, s2, c1, c2)


def kept_texts(
    kept: list[tuple[int, int]],
    s1: Sequence[str],
    s2: Sequence[str],
    c1: Sequence[str | None],
    c2: Sequence[str | None],
) -> tuple[list[str], list[str]]:
    """The anchors and positives of the kept (row, side)s, in their order."""
    sides = ((s1, c1), (s2, c2))
    anchors = [sides[side][0][row] for row, side in kept]
    return anchors, [sides[side][1][row] for row, side in kept]  # type: ignore[misc]


def document_batch_order(
    doc_ids: np.ndarray,
    section_ids: np.ndarray,
    sent_ids: np.ndarray,
    width: int,
    batch_size: int,
    seed: int,
) -> np.ndarray:
    """An order of the examples whose consecutive blocks of ``batch_size`` are batches drawn
    from as few documents as possible, so that MNRL's in-batch negatives are other right
    contexts of the same topic (Hofstatter et al. 2021's topic-aware batches, with the corpus's
    own documents as the topics). Two sentences of one section less than ``width + 1`` apart
    never share a batch (their right contexts overlap: each would be the other's false negative)
    unless the last batches have nothing else left. Documents are visited in a seeded order."""
    n = len(sent_ids)
    _, doc_index = np.unique(np.asarray(doc_ids), return_inverse=True)
    rank = np.random.default_rng(seed).permutation(int(doc_index.max()) + 1 if n else 0)
    stream = np.lexsort((sent_ids, rank[doc_index])).tolist() if n else []
    section, sent = np.asarray(section_ids).tolist(), np.asarray(sent_ids).tolist()
    order: list[int] = []
    deferred: list[int] = []
    batch: list[int] = []
    taken: dict[Any, list[int]] = {}  # the batch's sentences by section

    def place(i: int) -> bool:
        near = taken.setdefault(section[i], [])
        if len(batch) >= batch_size or any(abs(sent[i] - t) <= width for t in near):
            return False
        batch.append(i)
        near.append(sent[i])
        return True

    pos = 0
    while deferred or pos < len(stream):
        deferred = [i for i in deferred if not place(i)]  # what earlier batches could not take
        while len(batch) < batch_size and pos < len(stream):
            if not place(stream[pos]):
                deferred.append(stream[pos])
            pos += 1
        if len(batch) < batch_size and pos >= len(stream):
            take = batch_size - len(batch)  # nothing clash-free is left: fill as it comes
            batch, deferred = batch + deferred[:take], deferred[take:]
        order.extend(batch)
        batch, taken = [], {}
    return np.asarray(order, dtype=np.int64)


class PairContexts(NamedTuple):
    """Each pair's two sentences' right contexts and corpus sent_ids (None: not a corpus
    sentence), then those of ``context_corpus_sentences`` sampled corpus sentences appended to
    both lists, whose texts are ``sampled``; and, for ``context_batches: document``, each corpus
    sentence's document and section."""

    c1: list[str | None]
    c2: list[str | None]
    sampled: list[str]
    sent1: list[int | None]
    sent2: list[int | None]
    doc_of: dict[int, int]
    section_of: dict[int, int]


def pair_contexts(pairs: TrainingPairs, oc: ObjectiveContext) -> PairContexts:
    """The right contexts of the pairs' sentences and of the sampled corpus sentences."""
    p = oc.params
    for col in ("s1_id", "s2_id"):
        if col not in pairs.table.column_names:
            raise ValueError(f"objective context: pairs {pairs.source} have no column {col!r}")
    q = oc.read_input("queries", ["query_id", "sent_id"])
    qid, sid = q.column("query_id").to_pylist(), q.column("sent_id").to_pylist()
    sent_of = dict(zip(qid, sid, strict=True))
    by_doc = p.context_batches == "document"
    sh = oc.read_input("shard", ["sent_id", "section_id", "text", *(["doc_id"] if by_doc else [])])
    sent_ids = sh.column("sent_id").to_numpy()
    sections = sh.column("section_id").to_numpy()
    texts = sh.column("text").to_pylist()
    sampled = sample_with_context(sent_ids, sections, p.context_corpus_sentences, oc.seed)
    extra_ctx = right_contexts(sent_ids, sections, texts, list(sampled), p.context_width)
    row_of = {s: i for i, s in enumerate(sent_ids.tolist())}
    extra_text = [texts[row_of[s]] for s in sampled.tolist()]
    ctx, ids = [], []
    for col in ("s1_id", "s2_id"):
        qids = pairs.table.column(col).to_pylist()
        wanted = [sent_of.get(qids[i]) for i in pairs.rows]
        ctx.append(right_contexts(sent_ids, sections, texts, wanted, p.context_width) + extra_ctx)
        ids.append(wanted + sampled.tolist())
    doc_of, section_of = {}, {}  # read only for document batches
    if by_doc:
        doc_of = dict(zip(sent_ids.tolist(), sh.column("doc_id").to_pylist(), strict=True))
        section_of = dict(zip(sent_ids.tolist(), sections.tolist(), strict=True))
    return PairContexts(ctx[0], ctx[1], extra_text, ids[0], ids[1], doc_of, section_of)


@register
class ContextObjective(TrainObjective):
    name = "context"
    inputs = ("queries", "shard")
    needs_labels = False
    pair_budget = True

    def examples(self, pairs: TrainingPairs, oc: ObjectiveContext) -> Examples:
        return right_context_examples(pairs, oc, pair_contexts(pairs, oc))

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        return ranking_loss(model, oc.params.context_gradient == "both")


def right_context_examples(
    pairs: TrainingPairs, oc: ObjectiveContext, pc: PairContexts
) -> Examples:
    """The objective's examples from the pairs' right contexts ``pc`` (``pair_contexts``: an
    objective that trains them beside another part reads them once and passes them here)."""
    # a sampled corpus sentence joins as a pair with itself (context_pair_rows keeps it once)
    t1, t2 = pairs.s1 + pc.sampled, pairs.s2 + pc.sampled
    kept = context_pair_rows(t1, t2, pc.c1, pc.c2)
    if not kept:  # the user's data: the config's STS pairs or a corpus of one-liners
        raise InputError(
            f"objective context: none of the {len(pairs)} pairs' sentences in "
            f"{pairs.source} has a right context in the corpus (sentences from "
            "an STS file, or each the last of its section)"
        )
    if oc.params.context_batches == "document":
        kept = by_document(kept, pc, oc)
    anchors, positives = kept_texts(kept, t1, t2, pc.c1, pc.c2)
    oc.log.info(
        "train: %d sentences with their right context (of %d pairs)", len(anchors), len(pairs)
    )
    return Examples(dataset({"anchor": anchors, "positive": positives}), t1 + t2)


def by_document(
    kept: list[tuple[int, int]], pc: PairContexts, oc: ObjectiveContext
) -> list[tuple[int, int]]:
    """The examples in `document_batch_order` (every example here is a corpus sentence: one
    without a right context was not kept)."""
    sent = np.asarray([(pc.sent1, pc.sent2)[side][row] for row, side in kept], dtype=np.int64)
    doc = np.asarray([pc.doc_of[s] for s in sent.tolist()], dtype=np.int64)
    section = np.asarray([pc.section_of[s] for s in sent.tolist()], dtype=np.int64)
    p = oc.params
    order = document_batch_order(doc, section, sent, p.context_width, p.batch_size, oc.seed)
    return [kept[i] for i in order.tolist()]
