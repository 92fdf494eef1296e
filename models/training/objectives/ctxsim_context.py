"""``ctxsim-context``: the label artefact's Eq. 4 labels and each sentence's real right context in
one training (multi-dataset: each batch from one of the two, in proportion to their sizes, or
the labels' share of them set by ``train.label_share``).

The labels teach which sentences mean alike (on MedQuAD, questions that entail each other); the
right contexts keep what the labels alone pull apart: a question and its answer, which Origin's
profiles do not match (docs/results.md, the encoder as the contextual model).

``train.context_swap_share`` lets the labels choose right contexts too: of the labelled pairs
with the highest labels, that share has each sentence also take its partner's right context as
a positive (the method's premise: sentences whose fit profiles match fit each other's contexts).
They join the right contexts' part; unless ``train.label_share`` is set, the labels keep the
share of the batches the parts' sizes gave them before the swaps joined.

``train.context_hard_negative_share`` lets the labels choose negatives: of the nearest-neighbour
pairs with the lowest labels, that share has each sentence take its partner's right context as a
hard negative beside its own (a third part, ``hard``: close to the encoder that mined them, apart
by their fit profiles; RocketQA's denoised hard negatives with Eq. 4 as the judge).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ctxsim.models.corpus.sentences import QUESTION_END
from ctxsim.models.errors import InputError
from ctxsim.models.training.objectives.base import (
    OBJECTIVES,
    Examples,
    ObjectiveContext,
    TrainingPairs,
    TrainObjective,
    dataset,
    register,
)
from ctxsim.models.training.objectives.context import (
    PairContexts,
    pair_contexts,
    right_context_examples,
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

        pc = pair_contexts(pairs, oc)  # read once: the right contexts and their swaps
        parts = {
            "ctxsim": OBJECTIVES["ctxsim"].examples(pairs, oc),
            "context": right_context_examples(pairs, oc, pc),
        }
        p = oc.params
        label_share = None  # the library's draw by the parts' sizes
        if p.context_swap_share > 0 or p.context_hard_negative_share > 0:
            n_labels, n_contexts = len(parts["ctxsim"]), len(parts["context"])
            label_share = n_labels / (n_labels + n_contexts)  # the draw before they join
        if p.context_swap_share > 0:
            parts["context"] = with_swaps(parts["context"], pairs, oc, pc)
        if p.context_hard_negative_share > 0:
            parts["hard"] = hard_negative_examples(pairs, oc, pc)
        texts = [t for e in parts.values() for t in e.texts]
        data = DatasetDict({k: e.data for k, e in parts.items()})
        return Examples(data, texts, label_share=label_share)

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        losses = {k: OBJECTIVES[k].loss(model, oc, backbone_path) for k in PARTS}
        if oc.params.context_hard_negative_share > 0:  # MNRL reads the negative column too
            losses["hard"] = OBJECTIVES["context"].loss(model, oc, backbone_path)
        return losses


def with_swaps(
    context: Examples, pairs: TrainingPairs, oc: ObjectiveContext, pc: PairContexts
) -> Examples:
    """The right contexts' examples with the swapped ones appended (``pc``: the pairs' right
    contexts, as the context part read them)."""
    share = oc.params.context_swap_share
    c1, c2 = pc.c1, pc.c2
    partners = oc.params.context_swap_partners
    if partners != "all":  # only a section's opener (or a question) gives its context
        openers = section_openers(oc)
        asks = re.compile(QUESTION_END) if partners == "questions" else None

        def gives(sent_id: int | None, text: str) -> bool:
            return sent_id in openers or (asks is not None and asks.search(text) is not None)

        t1, t2 = pairs.s1 + pc.sampled, pairs.s2 + pc.sampled  # as pc's rows are
        c1 = [c if gives(s, t) else None for c, s, t in zip(c1, pc.sent1, t1, strict=True)]
        c2 = [c if gives(s, t) else None for c, s, t in zip(c2, pc.sent2, t2, strict=True)]
    anchors, positives = swapped_contexts(pairs, c1, c2, share)
    oc.log.info(
        "train: %d right contexts swapped between the %.0f%% highest-labelled pairs",
        len(anchors),
        100 * share,
    )
    columns = {
        "anchor": list(context.data["anchor"]) + anchors,
        "positive": list(context.data["positive"]) + positives,
    }
    return Examples(dataset(columns), context.texts)


def section_openers(oc: ObjectiveContext) -> set[int]:
    """The sent_ids that open their section (a question, heading or first sentence: what
    follows them is their section's body)."""
    sh = oc.read_input("shard", ["sent_id", "section_id"])
    sid, sec = sh.column("sent_id").to_numpy(), sh.column("section_id").to_numpy()
    order = np.argsort(sid, kind="stable")
    sid, sec = sid[order], sec[order]
    first = np.ones(len(sid), dtype=bool)
    first[1:] = sec[1:] != sec[:-1]
    return set(sid[first].tolist())


def swapped_contexts(
    pairs: TrainingPairs,
    c1: list[str | None],
    c2: list[str | None],
    share: float,
) -> tuple[list[str], list[str]]:
    """(sentence, its partner's right context) for the ``share`` of the pairs with the highest
    labels (ties in pair order), both ways; a side whose partner has no right context, or whose
    partner is the same text, gives none. ``c1``/``c2`` are the pairs' right contexts in row
    order (any entries past the pairs are ignored). A swapped positive is also its own
    sentence's: the two share a batch once or twice a run at the recipe's sizes (a false negative
    there), which is not worth a slower duplicate-free sampler."""
    top = share_by_label(pairs.labels, np.arange(len(pairs)), share, highest=True)
    anchors: list[str] = []
    positives: list[str] = []
    for i in top.tolist():
        a, b = pairs.s1[i], pairs.s2[i]
        if a == b:
            continue
        for s, c in ((a, c2[i]), (b, c1[i])):
            if c is not None:
                anchors.append(s)
                positives.append(c)
    return anchors, positives


def hard_negative_examples(
    pairs: TrainingPairs, oc: ObjectiveContext, pc: PairContexts
) -> Examples:
    """The ``hard`` part: (sentence, its right context, its partner's) for the
    ``context_hard_negative_share`` of the nearest-neighbour pairs with the lowest labels."""
    table = pairs.table
    if "source" in table.column_names:  # a random partner is an easy negative already
        source = table.column("source").to_pylist()
        mined = np.asarray([source[r] == "knn" for r in pairs.rows.tolist()], dtype=bool)
    else:
        mined = np.ones(len(pairs), dtype=bool)
    share = oc.params.context_hard_negative_share
    columns = hard_negatives(pairs, pc.c1, pc.c2, mined, share)
    oc.log.info(
        "train: %d hard negatives from the %.0f%% lowest-labelled of %d mined pairs",
        len(columns["anchor"]),
        100 * share,
        int(mined.sum()),
    )
    if not columns["anchor"]:
        raise InputError(
            f"train.context_hard_negative_share: none of the {int(mined.sum())} mined pairs in "
            f"{pairs.source} has two sentences with distinct right contexts"
        )
    texts = columns["anchor"] + columns["positive"] + columns["negative"]
    return Examples(dataset(columns), texts)


def hard_negatives(
    pairs: TrainingPairs,
    c1: list[str | None],
    c2: list[str | None],
    mined: np.ndarray,
    share: float,
) -> dict[str, list[str]]:
    """Columns anchor, positive, negative: for the ``share`` of the ``mined`` pairs with the
    lowest labels (ties in pair order), each sentence with its own right context and its
    partner's, both ways; a side without a right context, a partner of the same text or the same
    right context gives none. ``c1``/``c2`` are the pairs' right contexts in row order (entries
    past the pairs are ignored). An anchor of two such pairs may share a batch with itself (its
    positive a false negative), rare at the recipe's sizes, as with the swaps."""
    low = share_by_label(pairs.labels, np.flatnonzero(mined), share, highest=False)
    out: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    for i in low.tolist():
        a, b, ca, cb = pairs.s1[i], pairs.s2[i], c1[i], c2[i]
        if a == b or ca is None or cb is None or ca == cb:
            continue
        for s, own, other in ((a, ca, cb), (b, cb, ca)):
            out["anchor"].append(s)
            out["positive"].append(own)
            out["negative"].append(other)
    return out


def share_by_label(labels: np.ndarray, rows: np.ndarray, share: float, highest: bool) -> np.ndarray:
    """The ``share`` of ``rows`` with the highest (or lowest) labels, ties in row order, back in
    row order."""
    values = np.asarray(labels, dtype=np.float64)[rows]
    order = np.argsort(-values if highest else values, kind="stable")
    return np.sort(rows[order[: int(round(share * len(rows)))]])
