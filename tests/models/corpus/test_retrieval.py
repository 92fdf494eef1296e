"""Retrieval (Sec. 3.3 primary screening): blocked top-K = brute force, ties, fallback, errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.models.corpus.retrieval import (
    fit_index,
    retrieve,
    select_topk,
    topk_blocked,
    topk_bruteforce,
    vectorizer_from_state,
    vectorizer_state,
)

WORDS = "the cat dog sat on a mat log ran fast slow red blue house tree river".split()


def corpus(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, rng.integers(3, 12))) for _ in range(n)]
    # Exact duplicates and a chunk of only unigram-able text make ties and edge cases certain.
    texts += texts[:5] + ["river"]
    return texts


def backends() -> list[str]:
    try:
        import sparse_dot_topn  # noqa: F401
    except ImportError:
        return ["scipy"]
    return ["scipy", "sparse_dot_topn"]


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("memory_mb", [1e-6, 0.01, 512.0])  # 1 query per block ... one block
@pytest.mark.parametrize("k", [1, 3, 7, 1000])
def test_blocked_topk_equals_bruteforce_with_ties(memory_mb: float, k: int, backend: str) -> None:
    texts = corpus(60, 0)
    vec, mat = fit_index(texts)
    q = vec.transform(texts[:20] + texts[:3] + ["cat sat", "zebra unknown"])
    got = topk_blocked(q, mat, k, memory_mb, backend=backend, threads=2)
    ref = topk_bruteforce(q, mat, k)
    np.testing.assert_array_equal(got.offsets, ref.offsets)
    np.testing.assert_array_equal(got.index, ref.index)
    np.testing.assert_array_equal(got.score, ref.score)
    assert got.score.dtype == np.float32
    # Duplicated chunks (i and 60 + i) tie exactly: the smaller index always comes first.
    for qi in range(len(got.offsets) - 1):
        idx = got.index[got.offsets[qi] : got.offsets[qi + 1]]
        pos = {c: r for r, c in enumerate(idx)}
        for i in range(5):
            if i in pos and 60 + i in pos:
                assert pos[i] < pos[60 + i]


def test_scores_are_tfidf_cosines() -> None:
    texts = corpus(40, 1)
    vec, mat = fit_index(texts)
    q = vec.transform(texts[:10])
    hits = topk_blocked(q, mat, 5)
    dense_q, dense_c = q.toarray().astype(np.float64), mat.toarray().astype(np.float64)
    norms = np.outer(np.linalg.norm(dense_q, axis=1), np.linalg.norm(dense_c, axis=1))
    cos = dense_q @ dense_c.T / np.maximum(norms, 1e-12)  # "river" has no bigram: a zero row
    for r in range(10):
        sl = slice(hits.offsets[r], hits.offsets[r + 1])
        np.testing.assert_allclose(hits.score[sl], cos[r, hits.index[sl]], rtol=1e-5)
        assert hits.index[sl][0] == r or cos[r, hits.index[sl][0]] == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=40),
    st.integers(1, 45),
    st.booleans(),
)
def test_select_topk_exact_under_heavy_ties(vals: list[int], k: int, positive_only: bool) -> None:
    values = np.asarray(vals, np.float32)
    cols = np.random.default_rng(len(vals)).permutation(len(vals)) * 3
    idx, sc = select_topk(values, cols, k, positive_only)
    keep = values > 0 if positive_only else np.ones(len(values), bool)
    order = np.lexsort((cols[keep], -values[keep]))[:k]
    np.testing.assert_array_equal(idx, cols[keep][order])
    np.testing.assert_array_equal(sc, values[keep][order])


def test_unigram_fallback_for_queries_without_known_bigram() -> None:
    texts = corpus(30, 2)
    vec, mat = fit_index(texts, ngram_range=(2, 2))
    fvec, fmat = fit_index(texts, ngram_range=(1, 1))
    queries = ["the cat sat on a mat", "River.", "zebra"]  # bigram / one word / unknown word
    hits, fb = retrieve(queries, vec, mat, 4, 64.0, fvec, fmat)
    assert fb.tolist() == [False, True, True]
    counts = np.diff(hits.offsets)
    assert counts[0] > 0 and counts[1] > 0 and counts[2] == 0
    uni = topk_blocked(fvec.transform(["River."]), fmat, 4)
    np.testing.assert_array_equal(hits.index[hits.offsets[1] : hits.offsets[2]], uni.index)
    # Without a fallback index, the one-word query has no hits and is not flagged.
    hits2, fb2 = retrieve(queries, vec, mat, 4)
    assert fb2.tolist() == [False, False, False] and np.diff(hits2.offsets)[1] == 0


def test_vectorizer_state_round_trip() -> None:
    texts = corpus(30, 3)
    vec, mat = fit_index(texts, ngram_range=(1, 2))
    settings_, terms, idf = vectorizer_state(vec)
    again = vectorizer_from_state(settings_, terms, idf)
    diff = abs(again.transform(texts) - vec.transform(texts))
    assert diff.max() < 1e-7
    with pytest.raises(ValueError, match="idf values"):
        vectorizer_from_state(settings_, terms[:-1], idf)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="empty corpus"):
        fit_index([])
    with pytest.raises(ValueError, match="no n-gram"):
        fit_index(["a", "!!"], ngram_range=(3, 3))
    vec, mat = fit_index(corpus(10, 4))
    with pytest.raises(ValueError, match="top_k"):
        topk_blocked(vec.transform(["cat"]), mat, 0)
    with pytest.raises(ValueError, match="features"):
        topk_blocked(sp.csr_matrix((1, 3), dtype=np.float32), mat, 2)
    with pytest.raises(ValueError, match="memory budget"):
        topk_blocked(vec.transform(["cat"]), mat, 2, memory_mb=0)
    with pytest.raises(ValueError, match="unknown retrieval backend"):
        topk_blocked(vec.transform(["cat"]), mat, 2, backend="faiss")


# ---- stages ---------------------------------------------------------------------------------
def run_stages(spine: dict, root, params: dict[str, dict]) -> dict:
    """Run some of this issue's stages on top of the session's spine artefacts (no Prefect)."""
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks import load_stage

    store, run, arts = ArtefactStore(root), RunParams(root=str(root), device="cpu"), dict(spine)
    for name, kw in params.items():
        stage = load_stage(name)
        plan = resolve_stage(
            stage, stage.Params(**kw), run, store, {i: arts[i] for i in stage.inputs}
        )
        arts[name] = run_stage_locally(plan)[0]
    return arts


def test_index_and_retrieve_stages(spine, tmp_path) -> None:
    from ctxsim.store.index_files import load_index

    arts = run_stages(spine, tmp_path, {"index": {}, "retrieve": {"top_k": 30, "memory_mb": 0.05}})
    index, ret, queries = arts["index"], arts["retrieve"], arts["queries"]
    assert index.num_rows == arts["contexts"].stats["chunks"]
    assert not list(index.files_dir.glob("*.pkl"))
    chunk_ids, vec, mat, fvec, fmat = load_index(index.files_dir)
    assert mat.shape[0] == len(chunk_ids) and fvec is not None
    t = ret.read_table()
    assert (
        t.schema.field("score").type == pa.float32() and t.schema.field("rank").type == pa.int32()
    )
    df = t.to_pandas()
    assert df.groupby("query_id").size().max() <= 30
    for _, g in df.groupby("query_id"):
        assert g["rank"].tolist() == list(range(len(g)))
        assert (np.diff(g["score"].to_numpy()) <= 0).all()
    # A corpus query's own chunk contains it verbatim: it is retrieved, almost always first.
    q = queries.read_table(["query_id", "sent_id"]).to_pandas()
    chunks = pa.parquet.read_table(arts["contexts"].files_dir / "chunks.parquet").to_pandas()
    first = dict(zip(chunks.chunk_id, chunks.first_sent_id, strict=True))
    n = dict(zip(chunks.chunk_id, chunks.n_sents, strict=True))
    top = df[df["rank"] == 0].set_index("query_id")["chunk_id"]
    own_first = [
        first[top[r.query_id]] <= r.sent_id < first[top[r.query_id]] + n[top[r.query_id]]
        for r in q.itertuples()
        if r.query_id in top.index
    ]
    assert np.mean(own_first) > 0.8


def test_index_stage_empty_corpus_is_a_clear_error(tmp_path) -> None:
    import pyarrow.parquet as pq

    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, Stage, resolve_stage, run_stage_locally
    from ctxsim.tasks.index import IndexParams, IndexStage

    store = ArtefactStore(tmp_path)

    class Empty(Stage):
        def __init__(self, name: str, table: pa.Table, chunks: pa.Table | None = None):
            self.name, self._t, self._c = name, table, chunks

        def run_shard(self, ctx, shard):
            if self._c is not None:
                pq.write_table(self._c, ctx.files_dir / "chunks.parquet")
            return self._t, {}

    from ctxsim.store.stage import StageParams
    from ctxsim.tasks.contexts import CHUNK_SCHEMA, CONTEXT_SCHEMA

    run = RunParams(root=str(tmp_path))
    sh = pa.table({"sent_id": pa.array([], pa.int64()), "text": pa.array([], pa.string())})
    arts = {
        "shard": run_stage_locally(
            resolve_stage(Empty("shard", sh), StageParams(), run, store, {})
        )[0],
        "contexts": run_stage_locally(
            resolve_stage(
                Empty("contexts", CONTEXT_SCHEMA.empty_table(), CHUNK_SCHEMA.empty_table()),
                StageParams(),
                run,
                store,
                {},
            )
        )[0],
    }
    with pytest.raises(ValueError, match="empty corpus"):
        run_stage_locally(resolve_stage(IndexStage(), IndexParams(), run, store, arts))
