"""Pair mining: sources, mix ratios, unordered de-duplication, and the `pairs` stage."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctxsim.models.corpus.pairs import (
    canonical,
    knn_pairs,
    knn_search,
    lsa_project,
    mix_pairs,
    random_pairs,
    shared_context_pairs,
    tfidf_embed,
)


def test_canonical_dedups_unordered_pairs() -> None:
    a, b = canonical(np.array([3, 1, 2, 5, 1]), np.array([1, 3, 2, 4, 3]))
    assert list(zip(a.tolist(), b.tolist(), strict=False)) == [(1, 3), (4, 5)]


def test_knn_flat_and_ivf_agree_and_exclude_self() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    idx_flat, sim_flat = knn_search(x, 5)
    # IVF probing every list is exact
    idx_ivf, _ = knn_search(x, 5, flat_max=10, nlist=8, nprobe=8)
    assert (idx_flat == idx_ivf).all()
    assert not (idx_flat == np.arange(400)[:, None]).any()
    brute = x @ x.T
    np.fill_diagonal(brute, -np.inf)
    assert (idx_flat[:, 0] == brute.argmax(1)).all()
    assert (np.diff(sim_flat, axis=1) <= 1e-6).all()
    a, b = knn_pairs(idx_flat, np.arange(400) + 1000)
    assert (a < b).all() and a.min() >= 1000
    assert len(set(zip(a.tolist(), b.tolist(), strict=False))) == len(a)


def test_ivf_probes_a_fixed_number_of_clusters_by_default() -> None:
    """Above flat_max the default probes IVF_NPROBE clusters (all when there are fewer): a share
    of the clusters grows with n and was slower than exact at 150,000 real sentences, while 128
    probes kept recall@3 at 0.96 from 10,000 up; 16 probes found only 0.82."""
    import faiss

    from ctxsim.models.corpus.pairs import IVF_NPROBE

    rng = np.random.default_rng(1)
    centres = rng.normal(size=(40, 24))
    x = (centres[rng.integers(0, 40, 3000)] + 0.6 * rng.normal(size=(3000, 24))).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    exact, _ = knn_search(x, 5, flat_max=len(x))
    seen: list[int] = []
    real = faiss.IndexIVFFlat.search

    def spy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(self.nprobe)
        return real(self, *args, **kwargs)

    faiss.IndexIVFFlat.search = spy
    try:
        knn_search(x, 5, flat_max=100, nlist=2 * IVF_NPROBE)
        auto, _ = knn_search(x, 5, flat_max=100, nlist=48)
        few, _ = knn_search(x, 5, flat_max=100, nlist=48, nprobe=1)
    finally:
        faiss.IndexIVFFlat.search = real
    assert seen == [IVF_NPROBE, 48, 1]
    overlap = [len(set(a) & set(b)) / 5 for a, b in zip(auto.tolist(), exact.tolist(), strict=True)]
    fewer = [len(set(a) & set(b)) / 5 for a, b in zip(few.tolist(), exact.tolist(), strict=True)]
    assert np.mean(overlap) == 1.0  # every cluster probed: exact
    assert np.mean(fewer) < np.mean(overlap)


def test_knn_with_duplicates_excludes_self() -> None:
    x = np.ones((4, 3), np.float32) / np.sqrt(3)
    idx, _ = knn_search(x, 3)
    assert sorted(idx[2].tolist()) == [0, 1, 3]


def test_shared_context_pairs() -> None:
    rng = np.random.default_rng(0)
    q = np.array([1, 2, 3, 1, 4, 5])
    c = np.array([10, 10, 10, 11, 11, 12])
    a, b = shared_context_pairs(q, c, 10, rng)
    assert set(zip(a.tolist(), b.tolist(), strict=False)) == {(1, 2), (1, 3), (2, 3), (1, 4)}
    a, b = shared_context_pairs(q, c, 1, rng)
    assert 0 < len(a) <= 4 and (a < b).all()


def test_random_pairs_distinct_and_bounded() -> None:
    rng = np.random.default_rng(0)
    a, b = random_pairs(np.arange(5), 100, rng)
    assert len(a) == 10  # only C(5, 2) exist
    assert len(set(zip(a.tolist(), b.tolist(), strict=False))) == 10 and (a < b).all()
    a, b = random_pairs(np.arange(5), 3, rng, exclude={(0, 1)})
    assert (0, 1) not in set(zip(a.tolist(), b.tolist(), strict=False)) and len(a) == 3


def test_mix_quotas_dedup_and_shortfall() -> None:
    rng = np.random.default_rng(0)
    ids = np.arange(50)
    knn = (np.array([0, 0, 1]), np.array([1, 2, 2]))
    shared = (np.array([0, 3]), np.array([1, 4]))  # (0, 1) already taken by knn
    s1, s2, src = mix_pairs(
        {"knn": knn, "shared": shared}, {"knn": 2, "shared": 2, "random": 5}, ids, rng
    )
    pairs = list(zip(s1.tolist(), s2.tolist(), strict=False))
    assert len(pairs) == len(set(pairs)) == 9
    assert list(src[:3]) == ["knn", "knn", "shared"]
    assert (src == "random").sum() == 6  # 5 + one missing shared pair
    assert (s1 < s2).all()


def test_tfidf_embed_neighbours_are_lexical() -> None:
    texts = [
        "the cat sat on the mat",
        "a cat sat on a mat",
        "stocks fell sharply today",
        "markets fell sharply",
        "he ran home",
        "she walked home",
    ]
    emb = tfidf_embed(texts, dim=4)
    assert emb.shape[0] == 6 and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    idx, _ = knn_search(emb, 1)
    assert idx[0, 0] == 1 and idx[2, 0] == 3


def _sparse_docs(n: int, vocab: int, seed: int):
    """A TF-IDF-like float32 CSR matrix with a decaying spectrum (topics of skewed weight)."""
    from scipy import sparse

    rng = np.random.default_rng(seed)
    topics = rng.random((8, vocab)) ** 8 * np.geomspace(4, 0.5, 8)[:, None]
    dense = rng.random((n, 8)) @ topics + rng.random((n, vocab)) * 0.05
    dense[dense < np.quantile(dense, 0.9)] = 0  # 10% non-zero, like bag-of-words rows
    return sparse.csr_matrix(dense.astype(np.float32))


def test_lsa_project_spans_truncated_svd_components() -> None:
    """The vocabulary-side shortcut gives TruncatedSVD's projection (same random start, signs
    arbitrary): equal inner products and the same neighbours."""
    from sklearn.decomposition import TruncatedSVD

    x_fit = _sparse_docs(300, 2000, seed=0)
    x = x_fit[:40]
    ref = TruncatedSVD(n_components=12, random_state=0).fit(x_fit).transform(x)
    got = lsa_project(x_fit, x, 12, seed=0)
    assert got.shape == (40, 12)
    np.testing.assert_allclose(got @ got.T, ref @ ref.T, rtol=0, atol=1e-4 * np.abs(ref).max() ** 2)
    np.testing.assert_allclose(np.abs(got), np.abs(ref), rtol=0, atol=1e-3 * np.abs(ref).max())
    idx_got, _ = knn_search(np.ascontiguousarray(got, np.float32), 5)
    idx_ref, _ = knn_search(np.ascontiguousarray(ref, np.float32), 5)
    assert (idx_got == idx_ref).all()


def test_lsa_project_drops_directions_beyond_the_rank() -> None:
    """More probe vectors than the matrix has rank (repeated rows): no failed factorisation,
    the projection keeps the norms of rows that lie in the fitted span."""
    from scipy import sparse

    base = _sparse_docs(6, 50, seed=1)
    x_fit = sparse.vstack([base] * 5).tocsr()  # 30 rows of rank <= 6
    got = lsa_project(x_fit, base, 10, seed=0)
    assert got.shape == (6, 10) and np.isfinite(got).all()
    np.testing.assert_allclose(
        np.linalg.norm(got, axis=1), np.sqrt(base.multiply(base).sum(1)).A1, rtol=1e-4
    )


# ---- the stage -----------------------------------------------------------------------------
def _publish(store, name: str, table: pa.Table, stats: dict | None = None, files=None):
    fp = uuid.uuid4().hex[:16]
    store.write_shard(name, fp, 0, table, {}, 0.0)
    for fname, t in (files or {}).items():
        pq.write_table(t, store.open_partial(name, fp) / "files" / fname)
    return store.publish(name, fp, 1, {"stats": stats or {}})


def _run(stage_cls, params: dict, store, up):
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally

    stage = stage_cls()
    return run_stage_locally(resolve_stage(stage, stage.Params(**params), RunParams(), store, up))[
        0
    ]


def test_pairs_stage_mine(spine, tmp_path) -> None:
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.tasks.pairs import PairsStage

    store = ArtefactStore(tmp_path)
    qids = spine["queries"].read_table(["query_id"]).column(0).to_numpy()
    # every third query shares context 7 -> many shared pairs available
    sel = pa.table(
        {
            "query_id": qids,
            "context_id": np.where(qids % 3 == 0, 7, qids + 100),
            "position": np.zeros(len(qids), np.int32),
        }
    )
    select = _publish(store, "select", sel)
    up = {"queries": spine["queries"], "select": select, "shard": spine["shard"]}
    art = _run(
        PairsStage,
        {"pairs_per_query": 2, "idf_sample": 500, "max_pairs_per_context": 500},
        store,
        up,
    )
    t = art.read_table()
    n = len(qids)
    assert art.stats["mode"] == "mine"
    assert abs(t.num_rows - 2 * n) <= 2
    s1, s2 = t.column("s1_query_id").to_numpy(), t.column("s2_query_id").to_numpy()
    assert (s1 < s2).all() and len(set(zip(s1.tolist(), s2.tolist(), strict=False))) == t.num_rows
    st = art.stats
    assert st["pairs_knn"] == round(2 * n * 0.5) and st["pairs_shared"] == round(2 * n * 0.25)
    shared = t.filter(pa.compute.equal(t["source"], "shared"))
    assert all(
        a % 3 == 0 and b % 3 == 0
        for a, b in zip(
            shared.column("s1_query_id").to_pylist(),
            shared.column("s2_query_id").to_pylist(),
            strict=False,
        )
    )
    assert t.column("gold").null_count == t.num_rows


def test_pairs_stage_given(tmp_path) -> None:
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.tasks.pairs import PairsStage

    store = ArtefactStore(tmp_path)
    queries = pa.table(
        {
            "query_id": np.arange(4),
            "text": ["a b", "a c", "d e", "d f"],
            "sent_id": pa.nulls(4, pa.int64()),
            "origin": ["STSb.dev"] * 4,
            "shard": np.zeros(4, np.int32),
        }
    )
    given = pa.table(
        {
            "pair_id": [0, 1],
            "s1_query_id": [0, 2],
            "s2_query_id": [1, 3],
            "dataset": ["STSb", "STSb"],
            "subset": ["dev", "dev"],
            "gold": [4.0, 1.5],
        }
    )
    q = _publish(store, "queries", queries, {"n_shards": 1}, {"given_pairs.parquet": given})
    sel = _publish(store, "select", pa.table({"query_id": [0], "context_id": [1], "position": [0]}))
    art = _run(PairsStage, {}, store, {"queries": q, "select": sel, "shard": q})
    t = art.read_table()
    assert art.stats["pairs_given"] == 2 and t.column("gold").to_pylist() == [4.0, 1.5]
    assert t.column("source").to_pylist() == ["given", "given"]
    with pytest.raises(FileNotFoundError):
        q2 = _publish(store, "queries", queries, {"n_shards": 1})
        _run(PairsStage, {"mode": "given"}, store, {"queries": q2, "select": sel, "shard": q2})


def test_ivf_trains_on_train_per_list_rows_per_cluster() -> None:
    """The IVF quantiser's training sample is train_per_list rows per cluster (all rows when
    fewer): k-means on it is most of IVF's cost at 100,000 queries."""
    import faiss

    rng = np.random.default_rng(2)
    x = rng.normal(size=(3000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rows: list[int] = []
    real = faiss.IndexIVFFlat.train

    def spy(self, sample):  # type: ignore[no-untyped-def]
        rows.append(len(sample))
        return real(self, sample)

    faiss.IndexIVFFlat.train = spy
    try:
        knn_search(x, 3, flat_max=100, nlist=20)
        knn_search(x, 3, flat_max=100, nlist=60)
        small, _ = knn_search(x, 3, flat_max=100, nlist=20, nprobe=20, train_per_list=40)
    finally:
        faiss.IndexIVFFlat.train = real
    assert rows == [1280, 3000, 800]  # 64 * 20, min(n, 64 * 60), then 40 * 20
    exact, _ = knn_search(x, 3, flat_max=len(x))
    assert (small == exact).all()  # every cluster probed: exact whatever the training


def test_pairs_stage_names_a_neighbour_shortfall(spine, tmp_path, caplog) -> None:
    """Mutual neighbours count once, so 1 neighbour searched cannot give 3 a query: the stats
    and the log say how many random pairs stood in; enough neighbours say nothing."""
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.tasks.pairs import PairsStage

    store = ArtefactStore(tmp_path)
    up = {"queries": spine["queries"], "shard": spine["shard"]}
    mix = {"pairs_per_query": 4, "ratio_knn": 3, "ratio_shared": 0, "ratio_random": 1}
    with caplog.at_level("INFO"):
        short = _run(PairsStage, {**mix, "knn_k": 1, "idf_sample": 500}, store, up).stats
    wanted = round(short["pairs"] * 3 / 4)
    assert short["pairs_knn_short"] == wanted - short["pairs_knn"] > 0
    assert short["pairs_random"] == short["pairs"] - short["pairs_knn"]
    assert "random pairs fill them: raise pairs.knn_k" in caplog.text
    full = _run(PairsStage, {**mix, "knn_k": 8, "idf_sample": 500}, store, up).stats
    assert "pairs_knn_short" not in full and full["pairs_knn"] == wanted
