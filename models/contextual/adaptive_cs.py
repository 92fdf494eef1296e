"""Adaptive |Cs|: give a pair contexts in rounds and stop once its Eq. 4 value has settled.

Why: every context costs two generative passes per pair (s1 and s2 against it, plus a null pass
with PMI), and Eq. 4 of many pairs stops moving long before |Cs| is reached. Selection is greedy
in rank order (models/corpus/selection.py), so the first k contexts of a set of size K are exactly
the
set of size k: rounds k_1 < k_2 < ... are prefixes of the same sets, and a pair whose label
changed by less than ``tol`` between two rounds keeps it and scores nothing more.

Scores are shared between pairs: (query, context) is computed once for every pair that needs it,
so the cost counted here is the distinct (query, context) windows the chosen k's require (the
score stage's rule, models/contextual/origin.py ``required_scores``), and the distinct contexts
(one null
pass each when a term is taken as PMI).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ctxsim.models.contextual.origin import ContextSets, ScoreLookup, origin_labels, required_scores


@dataclass
class AdaptiveResult:
    labels: np.ndarray  # (n_pairs, views): Eq. 4 at each pair's stopping round
    k_used: np.ndarray  # (n_pairs,) the |Cs| prefix each pair stopped at
    windows: int  # distinct (query, context) windows the chosen k's need
    contexts: int  # distinct contexts among them (null passes with PMI)


def prefix_sets(cs: ContextSets, k: int) -> ContextSets:
    """The first ``k`` contexts of every set (the set a greedy selection of size k gives)."""
    sizes = np.diff(cs.offsets)
    keep = np.concatenate(
        [np.arange(s, s + min(k, n)) for s, n in zip(cs.offsets[:-1], sizes, strict=True)]
        or [np.zeros(0, np.int64)]
    ).astype(np.int64)
    counts = np.minimum(sizes, k)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return ContextSets(cs.qids, offsets, cs.context_ids[keep])


def cost(cs: ContextSets, s1: np.ndarray, s2: np.ndarray, k_used: np.ndarray) -> tuple[int, int]:
    """(distinct windows, distinct contexts) when pair i uses the first ``k_used[i]`` contexts."""
    keys = []
    for k in np.unique(k_used):
        m = k_used == k
        q, c = required_scores(prefix_sets(cs, int(k)), s1[m], s2[m])
        keys.append(np.stack([q, c], 1))
    if not keys:
        return 0, 0
    allk = np.unique(np.concatenate(keys), axis=0)
    return len(allk), len(np.unique(allk[:, 1]))


#: scores on demand: (query ids, context ids) a round needs -> a lookup holding at least those
ScoreSource = ScoreLookup | Callable[[np.ndarray, np.ndarray], ScoreLookup]


def adaptive_origin(
    cs: ContextSets,
    s1: np.ndarray,
    s2: np.ndarray,
    lookup: ScoreSource,
    rounds: Sequence[int],
    tol: float,
    view: int = 0,
    similarity: str = "cosine",
) -> AdaptiveResult:
    """Eq. 4 with contexts added in ``rounds`` (increasing |Cs| prefixes); a pair stops at the
    first round whose ``view`` label moved by at most ``tol`` standard deviations (of the first
    round's labels across pairs) from the previous round's, or at the last round. In units of
    the spread because only ranks count (Origin is a Spearman) and cosine labels of a scorer can
    all sit within 0.01 of 1. ``lookup`` either holds every (query, context) of the last round
    (offline, bench/bench_adaptive_cs.py) or is called each round with the windows the pairs
    still active need and scores them (the score stage's ``adaptive_rounds``)."""
    rounds = sorted({int(k) for k in rounds})
    if not rounds or rounds[0] < 1:
        raise ValueError(f"rounds must be positive |Cs| sizes, got {list(rounds)}")
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    s1, s2 = np.asarray(s1, np.int64), np.asarray(s2, np.int64)
    n = len(s1)
    labels: np.ndarray | None = None
    k_used = np.full(n, rounds[-1], np.int64)
    active = np.ones(n, bool)
    prev = np.full(n, np.nan)
    spread = 1.0
    for j, k in enumerate(rounds):
        idx = np.flatnonzero(active)
        if not len(idx):
            break
        sets = prefix_sets(cs, k)
        lk = (
            lookup
            if isinstance(lookup, ScoreLookup)
            else lookup(*required_scores(sets, s1[idx], s2[idx]))
        )
        cur = origin_labels(sets, s1[idx], s2[idx], lk, similarity=similarity)
        if labels is None:
            labels = np.full((n, cur.shape[1]), np.nan)
        labels[idx] = cur
        if j == len(rounds) - 1:
            k_used[idx] = k
            break
        if j == 0:
            spread = float(np.nanstd(cur[:, view])) or 1.0
        # NaN (the first round's previous value) never settles
        settled = np.abs(cur[:, view] - prev[idx]) <= tol * spread
        k_used[idx[settled]] = k
        active[idx[settled]] = False
        prev[idx] = cur[:, view]
    windows, contexts = cost(cs, s1, s2, k_used)
    if labels is None:  # no pairs
        labels = np.zeros((0, 0 if callable(lookup) else lookup.values.shape[1]))
    return AdaptiveResult(labels, k_used, windows, contexts)
