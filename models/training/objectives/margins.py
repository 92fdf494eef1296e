"""``train.loss: margin``: the labels as one query's ranking of its partners, not as pair scores.

CoSENT and the cosine loss compare the labels of pairs that share no sentence (a batch of 32
pairs drawn from thousands), so they teach which *pairs* are alike. Retrieval asks another
question: for one query, which of its candidates comes first. Here each training row is a query
sentence and two of its labelled partners, the higher-labelled first, with the labels'
difference as the target of the cosine margin (GPL's MarginMSE, Wang et al. 2022, with the Eq. 4
labels in the cross-encoder's place). Pure numpy: the rows, not the loss
(sentence-transformers' ``MarginMSELoss``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: the margin rows' columns (not the context objective's ``anchor``/``positive``: its document
#: batches are recognised by those names)
MARGIN_COLUMNS = ("query", "higher", "lower")


def query_margin_rows(
    q1: Sequence[int],
    q2: Sequence[int],
    s1: Sequence[str],
    s2: Sequence[str],
    labels: np.ndarray,
    n_rows: int,
    seed: int,
) -> dict[str, list]:
    """``n_rows`` (query, higher, lower, score) rows, a seeded sample of every comparison of two
    partners of one query sentence whose labels differ (all of them when fewer). A pair (a, b)
    with label y makes b a partner of a and a of b (the labels are symmetric); ``q1``/``q2`` are
    the pairs' sentence ids, ``s1``/``s2`` their texts. Rows are in the sample's order of
    queries, so equal inputs give equal rows."""
    n = len(labels)
    if not (len(q1) == len(q2) == len(s1) == len(s2) == n):
        raise ValueError("margin rows: ids, texts and labels must have one entry per pair")
    text: dict[int, str] = {}
    partners: dict[int, list[tuple[int, float]]] = {}
    for a, b, ta, tb, y in zip(q1, q2, s1, s2, np.asarray(labels, dtype=np.float64), strict=True):
        a, b = int(a), int(b)
        if a == b or not np.isfinite(y):
            continue
        text.setdefault(a, ta)
        text.setdefault(b, tb)
        partners.setdefault(a, []).append((b, float(y)))
        partners.setdefault(b, []).append((a, float(y)))
    ranked = {q: sorted(set(ps), key=lambda p: (-p[1], p[0])) for q, ps in partners.items()}
    triples: list[tuple[int, int, int]] = []
    for q in sorted(ranked):
        got = ranked[q]
        for i in range(len(got)):
            for j in range(i + 1, len(got)):
                if got[i][1] > got[j][1] and got[i][0] != got[j][0]:
                    triples.append((q, i, j))
    rng = np.random.default_rng(seed)
    take = np.sort(rng.permutation(len(triples))[: max(n_rows, 0)])
    cols: dict[str, list] = {c: [] for c in (*MARGIN_COLUMNS, "score")}
    for k in take.tolist():
        q, i, j = triples[k]
        (hi, y_hi), (lo, y_lo) = ranked[q][i], ranked[q][j]
        cols["query"].append(text[q])
        cols["higher"].append(text[hi])
        cols["lower"].append(text[lo])
        cols["score"].append(float(np.float32(y_hi - y_lo)))
    return cols
