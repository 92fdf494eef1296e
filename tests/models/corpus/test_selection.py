"""Diverse context selection (Sec. 3.3): the fast methods equal the exact greedy rule."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pytest

from ctxsim.models.corpus.selection import (
    jaccard,
    lsh_miss_probability,
    minhash_signatures,
    select,
    select_exact,
    select_lsh,
    select_prefix,
    word_set,
)


def _random_sets(seed: int, n: int, vocab: int, max_len: int) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(vocab)]
    sets = [
        frozenset(rng.choice(words, size=rng.integers(0, max_len + 1), replace=False))
        for _ in range(n)
    ]
    chunks = rng.integers(0, n // 2, size=n).tolist()
    return sets, chunks


def test_word_set_and_jaccard() -> None:
    assert word_set("The cat, the HAT!") == {"the", "cat", "hat"}
    assert word_set(None) == frozenset()
    assert jaccard(frozenset("abc"), frozenset("abd")) == 0.5
    assert jaccard(frozenset(), frozenset()) == 1.0
    assert jaccard(frozenset(), frozenset("a")) == 0.0


def test_boundary_half_is_a_conflict() -> None:
    a, b, c = frozenset("abc"), frozenset("abd"), frozenset("abde")
    assert jaccard(a, b) == 0.5 and jaccard(a, c) == 0.4 and jaccard(b, c) == 0.75
    for method in ("exact", "prefix", "lsh"):
        # b conflicts with a at exactly 0.5; c (0.4 with a) is kept
        assert select([a, b, c], None, 10, 0.5, method=method, lsh_threshold=0.1) == [0, 2]
        assert select([a, b, c], None, 10, 0.51, method=method, lsh_threshold=0.1) == [0, 1]


def test_chunk_rule_and_size_limit() -> None:
    sets = [frozenset({f"x{i}"}) for i in range(6)]  # pairwise disjoint: no Jaccard conflict
    chunks = [0, 0, 1, 2, 1, 3]
    for method in ("exact", "prefix", "lsh"):
        assert select(sets, chunks, 10, 0.5, method=method) == [0, 2, 3, 5]
        assert select(sets, chunks, 2, 0.5, method=method) == [0, 2]
        assert select(sets, None, 10, None, method=method) == list(range(6))


def test_empty_word_sets() -> None:
    e = frozenset()
    sets = [e, frozenset("a"), e, frozenset("b")]
    for method in ("exact", "prefix", "lsh"):
        assert select(sets, None, 10, 0.5, method=method) == [0, 1, 3]


@pytest.mark.parametrize("threshold", [0.5, 0.3, 0.7, 0.34])
def test_prefix_filter_equals_exact_on_random_data(threshold: float) -> None:
    hits_at_boundary = 0
    for seed in range(12):
        sets, chunks = _random_sets(seed, 300, vocab=25, max_len=6)
        for k in (5, 50, 300):
            assert select_prefix(sets, chunks, k, threshold) == select_exact(
                sets, chunks, k, threshold
            )
            assert select_prefix(sets, None, k, threshold) == select_exact(sets, None, k, threshold)
        hits_at_boundary += sum(jaccard(sets[0], s) == threshold for s in sets)
    if threshold == 0.5:
        assert hits_at_boundary > 0  # the data exercises Jaccard exactly at the threshold


def test_lsh_with_verification_equals_exact_on_random_data() -> None:
    # at this operating point a pair at the 0.5 boundary is missed with probability < 1e-9
    assert lsh_miss_probability(0.5, 0.1, 256) < 1e-9
    for seed in range(4):
        sets, chunks = _random_sets(seed, 300, vocab=25, max_len=6)
        for k in (5, 100):
            got = select_lsh(sets, chunks, k, 0.5, num_perm=256, lsh_threshold=0.1, seed=seed)
            assert got == select_exact(sets, chunks, k, 0.5)


def test_lsh_never_keeps_a_found_conflict_and_miss_rate_is_monotone() -> None:
    sets, chunks = _random_sets(3, 400, vocab=25, max_len=6)
    got = select_lsh(sets, chunks, 400, 0.5, num_perm=64, lsh_threshold=0.5)
    # whatever LSH misses, the chunk rule always holds and the order is the rank order
    assert len({chunks[i] for i in got}) == len(got)
    assert got == sorted(got)
    assert lsh_miss_probability(0.5, 0.5, 128) > lsh_miss_probability(0.5, 0.3, 128)


def test_minhash_signatures_estimate_jaccard() -> None:
    a = frozenset(f"t{i}" for i in range(40))
    b = frozenset(f"t{i}" for i in range(20, 60))  # J = 20/60
    sig = minhash_signatures([a, b, frozenset()], num_perm=512, seed=7)
    est = float((sig[0] == sig[1]).mean())
    assert abs(est - 1 / 3) < 0.08
    assert (sig[2] == sig[2].max()).all()
    again = minhash_signatures([a, b, frozenset()], num_perm=512, seed=7)
    assert (sig == again).all()


# ---- the stage -----------------------------------------------------------------------------
def _publish(store, name: str, table: pa.Table, stats: dict | None = None):
    fp = uuid.uuid4().hex[:16]
    store.write_shard(name, fp, 0, table, {}, 0.0)
    return store.publish(name, fp, 1, {"stats": stats or {}})


def _fake_screen(spine, per_query: int, seed: int = 0) -> pa.Table:
    """Random candidate rankings over real contexts, with the query's own context flagged."""
    rng = np.random.default_rng(seed)
    ctx = spine["contexts"].read_table(["context_id", "chunk_id", "centre_sent_id"])
    cids = ctx.column("context_id").to_numpy()
    chunk = ctx.column("chunk_id").to_numpy()
    centre = ctx.column("centre_sent_id").to_numpy()
    q = spine["queries"].read_table(["query_id", "sent_id"])
    rows: dict[str, list] = {
        k: [] for k in ("query_id", "context_id", "chunk_id", "disc_logit", "rank", "is_own")
    }
    for qid, sid in zip(
        q.column("query_id").to_pylist(), q.column("sent_id").to_pylist(), strict=False
    ):
        pick = rng.choice(len(cids), size=min(per_query, len(cids)), replace=False)
        own = np.flatnonzero(centre == sid)
        pick = np.unique(np.r_[own, pick])[:per_query]
        rng.shuffle(pick)
        rows["query_id"] += [qid] * len(pick)
        rows["context_id"] += cids[pick].tolist()
        rows["chunk_id"] += chunk[pick].tolist()
        rows["disc_logit"] += rng.normal(size=len(pick)).tolist()
        rows["rank"] += list(range(len(pick)))
        rows["is_own"] += (centre[pick] == sid).tolist()
    return pa.table(rows)


def _run_select(spine, store, screen, **params):
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.select_contexts import SelectStage

    stage = SelectStage()
    up = {k: spine[k] for k in ("queries", "contexts", "shard")}
    if screen is not None:
        up["screen"] = screen
    plan = resolve_stage(stage, stage.Params(**params), RunParams(), store, up)
    return run_stage_locally(plan)[0]


def test_select_stage_applies_the_rules(spine, tmp_path) -> None:
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.tasks.select_contexts.lookups import ContextIndex, SentenceTexts

    store = ArtefactStore(tmp_path)
    screen = _publish(store, "screen", _fake_screen(spine, 60))
    art = _run_select(spine, store, screen, max_size=6, method="prefix")
    exact = _run_select(spine, store, screen, max_size=6, method="exact")
    sel = art.read_table()
    assert all(np.isnan(sel.column("order_score").to_numpy()))  # screen order: no S
    sel = sel.drop_columns(["order_score"])
    assert sel.to_pylist() == exact.read_table().drop_columns(["order_score"]).to_pylist()
    assert sel.num_rows > 0 and art.stats["queries"] == spine["queries"].num_rows
    cindex = ContextIndex(spine["contexts"].read_table())
    texts = SentenceTexts(spine["shard"])
    qsent = dict(
        zip(
            *[spine["queries"].read_table().column(c).to_pylist() for c in ("query_id", "sent_id")],
            strict=False,
        )
    )
    for qid in set(sel.column("query_id").to_pylist()):
        rows = [r for r in sel.to_pylist() if r["query_id"] == qid]
        assert [r["position"] for r in rows] == list(range(len(rows)))
        assert len(rows) <= 6
        assert len({r["chunk_id"] for r in rows}) == len(rows)  # one context per chunk
        cids = np.array([r["context_id"] for r in rows])
        assert not cindex.window_contains(cids, qsent[qid]).any()  # own window excluded
        sets = texts.word_sets(cindex.prev_sent_ids(cids))
        for i in range(len(sets)):
            for j in range(i):
                assert jaccard(sets[i], sets[j]) < 0.5
        ranks = [r["rank"] for r in rows]
        assert ranks == sorted(ranks)  # chosen in rank order


def test_select_random_strategy_and_missing_screen(spine, tmp_path) -> None:
    from ctxsim.store.artefacts import ArtefactStore

    store = ArtefactStore(tmp_path)
    art = _run_select(spine, store, None, max_size=4, strategy="random")
    sel = art.read_table()
    assert sel.num_rows == 4 * spine["queries"].num_rows
    with pytest.raises(ValueError, match="screen"):
        _run_select(spine, store, None, max_size=4, strategy="ranked")
