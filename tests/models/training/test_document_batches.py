"""Document batches for the objectives that read right contexts (``train.context_batches:
document``): each batch holds as few documents as it can, so its other right contexts (the
negatives of MultipleNegativesRankingLoss) are of the same topic, and two sentences whose right
contexts overlap never share a batch."""

from __future__ import annotations

import numpy as np


def corpus(n_docs=12, sections=3, per_section=20, keep=0.6, seed=0):
    rng = np.random.default_rng(seed)
    doc, sec, sent = [], [], []
    s = 0
    for d in range(n_docs):
        for k in range(sections):
            for _ in range(per_section):
                if rng.random() < keep:
                    doc.append(d)
                    sec.append(d * sections + k)
                    sent.append(s)
                s += 1
    return np.array(doc), np.array(sec), np.array(sent)


def overlaps(idx, sec, sent, width):
    return sum(
        1
        for a in range(len(idx))
        for b in range(a + 1, len(idx))
        if sec[idx[a]] == sec[idx[b]] and abs(sent[idx[a]] - sent[idx[b]]) <= width
    )


def test_batches_hold_few_documents_and_no_overlapping_contexts():
    from ctxsim.models.training.objectives import document_batch_order

    doc, sec, sent = corpus()
    width, size = 4, 16
    order = document_batch_order(doc, sec, sent, width, size, seed=0)
    assert sorted(order.tolist()) == list(range(len(sent)))  # a permutation
    batches = [order[b : b + size] for b in range(0, len(order), size)]
    # every batch but the last few (what is left clashes with itself) is clash-free
    clean = [overlaps(b, sec, sent, width) == 0 for b in batches]
    assert all(clean[:-3]) and sum(clean) >= len(batches) - 3
    random = np.random.default_rng(0).permutation(len(sent))
    docs_per = [len(set(doc[b])) for b in batches[:-3]]
    docs_random = [len(set(doc[random[b : b + size]])) for b in range(0, len(random), size)]
    assert np.mean(docs_per) <= 3 < np.mean(docs_random)
    again = document_batch_order(doc, sec, sent, width, size, seed=0)
    assert again.tolist() == order.tolist()
    assert document_batch_order(doc, sec, sent, width, size, seed=1).tolist() != order.tolist()


def test_the_sampler_keeps_blocks_and_shuffles_them_per_epoch():
    from datasets import Dataset

    from ctxsim.models.training.batches import BlockBatchSampler, document_batch_sampler

    ctx = Dataset.from_dict({"anchor": list("abcdefg"), "positive": list("ABCDEFG")})
    s = document_batch_sampler(ctx, batch_size=3, drop_last=False, seed=5)
    assert isinstance(s, BlockBatchSampler) and len(s) == 3
    first = list(s)
    assert sorted(first) == [[0, 1, 2], [3, 4, 5], [6]]
    s.set_epoch(1)
    orders = {tuple(map(tuple, first)), tuple(map(tuple, s))}
    for epoch in range(2, 8):
        s.set_epoch(epoch)
        orders.add(tuple(map(tuple, s)))
    assert len(orders) > 1  # the blocks' order changes with the epoch
    labels = Dataset.from_dict({"sentence1": list("abcd"), "sentence2": list("abcd")})
    other = document_batch_sampler(labels, batch_size=2, drop_last=False)
    assert not isinstance(other, BlockBatchSampler) and len(other) == 2
