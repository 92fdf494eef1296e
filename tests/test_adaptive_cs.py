"""Adaptive |Cs| (models/adaptive_cs.py): rounds of context prefixes, stopping on a settled
Eq. 4 value, and the windows it saves."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.models.adaptive_cs import adaptive_origin, prefix_sets
from ctxsim.models.origin import ContextSets, ScoreLookup, origin_labels, required_scores

K = 8


def _setup(seed: int = 0, n_q: int = 12):
    rng = np.random.default_rng(seed)
    q = np.repeat(np.arange(n_q), K)
    c = rng.choice(200, size=(n_q, K), replace=False if n_q * K <= 200 else True).ravel()
    pos = np.tile(np.arange(K), n_q)
    cs = ContextSets.from_rows(q, c, pos)
    s1 = np.arange(0, n_q, 2)
    s2 = np.arange(1, n_q, 2)
    rq, rc = required_scores(cs, s1, s2)
    lookup = ScoreLookup(rq, rc, rng.normal(size=len(rq)))
    return cs, s1, s2, lookup


def test_prefix_sets_are_the_first_k_contexts():
    cs, *_ = _setup()
    p = prefix_sets(cs, 3)
    assert np.array_equal(np.diff(p.offsets), np.full(len(cs.qids), 3))
    for i in range(len(cs.qids)):
        a, b = cs.offsets[i], p.offsets[i]
        assert np.array_equal(p.context_ids[b : b + 3], cs.context_ids[a : a + 3])
    assert np.array_equal(prefix_sets(cs, 100).context_ids, cs.context_ids)


def test_zero_tolerance_is_the_fixed_set():
    cs, s1, s2, lookup = _setup()
    res = adaptive_origin(cs, s1, s2, lookup, [1, 2, 4, K], tol=0.0)
    assert np.all(res.k_used == K)
    assert np.allclose(res.labels, origin_labels(cs, s1, s2, lookup))
    assert res.windows == len(required_scores(cs, s1, s2)[0])


def test_infinite_tolerance_stops_at_the_second_round():
    cs, s1, s2, lookup = _setup()
    res = adaptive_origin(cs, s1, s2, lookup, [2, 4, K], tol=np.inf)
    assert np.all(res.k_used == 4)
    assert np.allclose(res.labels, origin_labels(prefix_sets(cs, 4), s1, s2, lookup))
    assert res.windows == len(required_scores(prefix_sets(cs, 4), s1, s2)[0])
    assert res.windows < len(required_scores(cs, s1, s2)[0])


def test_settled_pairs_stop_and_unsettled_go_on():
    cs, s1, s2, lookup = _setup()
    full = adaptive_origin(cs, s1, s2, lookup, [1, 2, 4, K], tol=0.0)
    mid = adaptive_origin(cs, s1, s2, lookup, [1, 2, 4, K], tol=0.3)
    # each pair's label is Eq. 4 at its own stopping |Cs|
    for i in range(len(s1)):
        want = origin_labels(
            prefix_sets(cs, int(mid.k_used[i])), s1[i : i + 1], s2[i : i + 1], lookup
        )
        assert np.allclose(mid.labels[i], want[0])
    assert mid.windows <= full.windows and mid.contexts <= full.contexts


def test_bad_rounds_and_tolerance():
    cs, s1, s2, lookup = _setup()
    with pytest.raises(ValueError, match="rounds"):
        adaptive_origin(cs, s1, s2, lookup, [0, 2], tol=0.1)
    with pytest.raises(ValueError, match="tol"):
        adaptive_origin(cs, s1, s2, lookup, [1, 2], tol=-1)
