"""Adaptive |Cs| (models/contextual/adaptive_cs.py): rounds of context prefixes, stopping on a
settled
Eq. 4 value, and the windows it saves."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.models.contextual.adaptive_cs import adaptive_origin, prefix_sets
from ctxsim.models.contextual.origin import ContextSets, ScoreLookup, origin_labels, required_scores

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


def test_score_stage_scores_in_rounds_and_label_uses_each_pairs_cs(tmp_path):
    """In the pipeline (score.adaptive_rounds): the score stage scores only what the rounds
    need, writes the |Cs| each pair stopped at, and label labels each pair over exactly that
    prefix of its sets, with the same S values as a fixed-|Cs| run."""
    import pyarrow.parquet as pq

    from ctxsim.scores.views import ADAPTIVE_FILE, score_views
    from tests.conftest import run_spine

    common = {"generator.train_steps": 5, "discriminator.max_windows_per_epoch": 500}
    fixed = run_spine(tmp_path, common, until="label")
    loose = run_spine(
        tmp_path, common | {"score.adaptive_rounds": "[2, 4]", "score.adaptive_tol": 1e9}, "label"
    )
    full_windows = fixed["score"].read_table()
    sc = loose["score"].read_table()
    assert loose["score"].stats["adaptive_rounds"].startswith("2,4,")
    # an infinite tolerance settles every pair after the second round (|Cs| 4)
    sizes = pq.read_table(loose["score"].files_dir / ADAPTIVE_FILE)
    assert set(sizes.column("cs_size").to_pylist()) == {4}
    assert 0 < sc.num_rows < full_windows.num_rows
    lab, ref = loose["label"].read_table(), fixed["label"].read_table()
    assert max(lab.column("n_ctx1").to_pylist() + lab.column("n_ctx2").to_pylist()) <= 4
    # the labels are Eq. 4 over the first 4 contexts, from the fixed run's own S values
    sel = fixed["select"].read_table(["query_id", "context_id", "position"])
    cs = ContextSets.from_rows(
        sel.column("query_id").to_numpy(),
        sel.column("context_id").to_numpy(),
        sel.column("position").to_numpy(),
    )
    _, values = score_views(full_windows)
    lookup = ScoreLookup(
        full_windows.column("query_id").to_numpy(),
        full_windows.column("context_id").to_numpy(),
        values,
    )
    s1, s2 = lab.column("s1_id").to_numpy(), lab.column("s2_id").to_numpy()
    want = origin_labels(prefix_sets(cs, 4), s1, s2, lookup)[:, 0]
    np.testing.assert_allclose(lab.column("label").to_numpy(), want, rtol=1e-5, atol=1e-6)
    assert ref.num_rows == lab.num_rows
    # tolerance 0: no pair settles early; the labels are the fixed run's
    strict = run_spine(
        tmp_path, common | {"score.adaptive_rounds": "[2, 4]", "score.adaptive_tol": 0.0}, "label"
    )
    assert strict["score"].read_table().num_rows == full_windows.num_rows
    np.testing.assert_allclose(
        strict["label"].read_table().column("label").to_numpy(),
        ref.column("label").to_numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
