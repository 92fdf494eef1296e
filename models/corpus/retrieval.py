"""TF-IDF bag-of-n-gram retrieval of text chunks (Sun et al. 2022, Sec. 3.3, "primary screening").

The paper retrieves 20K related text chunks per sentence with TF-IDF weighted bag-of-bigram vectors
before ranking their contexts with the discriminator (Eq. 1). Here:

- scikit-learn's ``TfidfVectorizer`` does tokenising, n-grams and idf (float32, l2-normalised, so
  a dot product is a cosine);
- :func:`topk_blocked` computes ``Q @ C.T`` one block of queries at a time, as a *sparse* product
  (no dense corpus matrix ever exists), with the block size derived from a memory budget, and
  selects the top K of each row with ``np.argpartition``; ties are broken by chunk index, so the
  result equals a full sort by (-score, chunk index) exactly;
- a query none of whose n-grams is in the vocabulary (e.g. "Yes." under bigrams) is scored with a
  unigram vectoriser instead, and the caller flags it.

Only chunks with a positive score (sharing at least one n-gram with the query) are returned, so a
row may have fewer than K hits. Pure maths: no file I/O (see :func:`vectorizer_state`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ctxsim.models.errors import InputError

if TYPE_CHECKING:  # imported where used: scikit-learn costs a CLI process ~1 s to load
    from sklearn.feature_extraction.text import TfidfVectorizer

#: The vectoriser settings that must be identical at fit and at query time.
STATE_KEYS = ("ngram_range", "lowercase", "token_pattern", "sublinear_tf", "norm", "min_df")


def make_vectorizer(
    ngram_range: tuple[int, int] = (2, 2),
    lowercase: bool = True,
    token_pattern: str = r"(?u)\b\w+\b",
    sublinear_tf: bool = True,
    norm: str = "l2",
    min_df: int = 1,
    max_features: int | None = None,
) -> TfidfVectorizer:
    """A float32 TF-IDF vectoriser; the default token pattern keeps one-letter words ("I", "a")."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(
        ngram_range=tuple(ngram_range),
        lowercase=lowercase,
        token_pattern=token_pattern,
        sublinear_tf=sublinear_tf,
        norm=norm,
        min_df=min_df,
        max_features=max_features,
        dtype=np.float32,
    )


def fit_index(texts: list[str], **vectorizer_kwargs: Any) -> tuple[TfidfVectorizer, sp.csr_matrix]:
    """Fit a vectoriser on chunk texts; returns it and the (n_chunks, vocab) float32 CSR matrix."""
    if len(texts) == 0:
        raise ValueError("retrieval index: the corpus has no chunks (empty corpus)")
    vec = make_vectorizer(**vectorizer_kwargs)
    try:
        mat = vec.fit_transform(texts)
    except ValueError as e:  # sklearn: "empty vocabulary; perhaps the documents only contain..."
        raise InputError(
            f"retrieval index: no n-gram of range {vec.ngram_range} occurs in the "
            f"{len(texts)} chunks ({e})"
        ) from None
    return vec, sp.csr_matrix(mat, dtype=np.float32)


def vectorizer_state(vec: TfidfVectorizer) -> tuple[dict[str, Any], list[str], np.ndarray]:
    """(settings, terms in column order, idf) — what :func:`vectorizer_from_state` needs.

    JSON + ``.npy`` instead of pickle: readable, safe to load, stable across sklearn versions.
    """
    settings = {k: getattr(vec, k) for k in STATE_KEYS}
    settings["ngram_range"] = list(settings["ngram_range"])
    terms = vec.get_feature_names_out().tolist()
    return settings, terms, np.asarray(vec.idf_, dtype=np.float32)


def vectorizer_from_state(
    settings: dict[str, Any], terms: list[str], idf: np.ndarray
) -> TfidfVectorizer:
    """Rebuild a fitted vectoriser (same transform output as the one that was saved)."""
    if len(terms) != len(idf):
        raise ValueError(f"vectoriser state: {len(terms)} terms but {len(idf)} idf values")
    kw = {k: settings[k] for k in STATE_KEYS if k != "min_df"}
    kw["ngram_range"] = tuple(kw["ngram_range"])
    vec = make_vectorizer(**kw)
    vec.vocabulary = {t: i for i, t in enumerate(terms)}
    vec.vocabulary_ = vec.vocabulary
    vec.idf_ = np.asarray(idf, dtype=np.float64)
    return vec


@dataclass
class TopK:
    """Hits as flat arrays, CSR-like: the hits of query q are ``offsets[q]:offsets[q+1]``."""

    offsets: np.ndarray  # int64, n_queries + 1
    index: np.ndarray  # int64 column (chunk row) index, sorted by (-score, index) within a query
    score: np.ndarray  # float32


def block_rows(n_cols: int, memory_mb: float, bytes_per_entry: int = 16) -> int:
    """Queries per block so that one block's score matrix stays under ``memory_mb``.

    A block's sparse product holds at most ``rows * n_cols`` entries of ~12 bytes (float32 value +
    int64 index) plus the selection workspace; 16 bytes per entry is the worst case.
    """
    if memory_mb <= 0:
        raise ValueError(f"memory budget must be > 0 MB, got {memory_mb}")
    return max(1, int(memory_mb * 2**20 // (max(n_cols, 1) * bytes_per_entry)))


def select_topk(
    values: np.ndarray, cols: np.ndarray, k: int, positive_only: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` of one row by (-value, col), exact under ties (optionally positive values only).

    ``np.argpartition`` finds the k-th largest value t in O(n); every value > t is in, and the
    smallest columns among the values == t fill the remaining slots, so the result does not depend
    on argpartition's arbitrary order among equals.
    """
    pos = values > 0 if positive_only else np.ones(len(values), dtype=bool)
    if not pos.all():
        values, cols = values[pos], cols[pos]
    if len(values) > k:
        kth = np.argpartition(-values, k - 1)[k - 1]
        t = values[kth]
        above = values > t
        eq = np.flatnonzero(values == t)
        need = k - int(above.sum())
        eq = eq[np.argsort(cols[eq], kind="stable")[:need]]
        keep = np.concatenate([np.flatnonzero(above), eq])
        values, cols = values[keep], cols[keep]
    order = np.lexsort((cols, -values))
    return cols[order].astype(np.int64), values[order].astype(np.float32)


def transpose_index(chunks: sp.csr_matrix) -> sp.csr_matrix:
    """C.T as float32 CSR, the right operand of every query block (compute once, reuse)."""
    return sp.csr_matrix(chunks.T, dtype=np.float32)


def resolve_backend(backend: str) -> str:
    """``auto`` = sparse_dot_topn when installed (multi-threaded product + top-n in C++)."""
    if backend == "auto":
        try:
            import sparse_dot_topn  # noqa: F401
        except ImportError:
            return "scipy"
        return "sparse_dot_topn"
    if backend not in ("scipy", "sparse_dot_topn"):
        raise ValueError(f"unknown retrieval backend {backend!r} (auto | scipy | sparse_dot_topn)")
    return backend


def topk_blocked(
    queries: sp.csr_matrix,
    chunks: sp.csr_matrix,
    k: int,
    memory_mb: float = 512.0,
    backend: str = "scipy",
    threads: int = 1,
    chunks_t: sp.csr_matrix | None = None,
) -> TopK:
    """Top-``k`` rows of ``chunks`` for every row of ``queries`` by dot product (cosine).

    Memory is bounded by ``memory_mb`` per block of queries whatever their number. Backends:
    ``scipy`` (sparse product, then exact selection per row) or ``sparse_dot_topn`` (product and
    top-(k+1) in C++, ``threads`` threads); with the latter a row whose k-th and (k+1)-th values
    tie is recomputed exactly, so both give the same set and order (up to float rounding of the
    products). Pass ``chunks_t`` (:func:`transpose_index`) to skip transposing on every call.
    """
    if k < 1:
        raise ValueError(f"top_k must be >= 1, got {k}")
    if queries.shape[1] != chunks.shape[1]:
        raise ValueError(
            f"query vectors have {queries.shape[1]} features but the index has {chunks.shape[1]}"
        )
    backend = resolve_backend(backend)
    queries = sp.csr_matrix(queries, dtype=np.float32)
    ct = chunks_t if chunks_t is not None else transpose_index(chunks)
    nq, nc = queries.shape[0], chunks.shape[0]
    if backend == "sparse_dot_topn":
        from sparse_dot_topn import sp_matmul_topn

        step = block_rows(min(nc, k + 1), memory_mb)
    else:
        step = block_rows(nc, memory_mb)
    offsets = np.zeros(nq + 1, dtype=np.int64)
    idx_parts: list[np.ndarray] = []
    score_parts: list[np.ndarray] = []
    for lo in range(0, nq, step):
        qb = queries[lo : lo + step]
        if backend == "sparse_dot_topn":
            block = sp_matmul_topn(qb, ct, top_n=k + 1, sort=False, n_threads=threads)
        else:
            block = sp.csr_matrix(qb @ ct)
        for r in range(block.shape[0]):
            a, b = block.indptr[r], block.indptr[r + 1]
            vals, cols = block.data[a:b], block.indices[a:b]
            if backend == "sparse_dot_topn" and len(vals) > k:
                part = np.partition(vals, [len(vals) - k - 1, len(vals) - k])
                if part[len(vals) - k - 1] == part[len(vals) - k]:  # a tie straddles rank k
                    row = sp.csr_matrix(qb[r] @ ct)
                    vals, cols = row.data, row.indices
            cols, vals = select_topk(vals, cols, k)
            idx_parts.append(cols)
            score_parts.append(vals)
            offsets[lo + r + 1] = offsets[lo + r] + len(cols)
    return TopK(
        offsets=offsets,
        index=np.concatenate(idx_parts) if idx_parts else np.zeros(0, np.int64),
        score=np.concatenate(score_parts) if score_parts else np.zeros(0, np.float32),
    )


def topk_bruteforce(queries: sp.csr_matrix, chunks: sp.csr_matrix, k: int) -> TopK:
    """Reference: the same scores, a full dense sort by (-score, index). For tests only."""
    dense = np.asarray((sp.csr_matrix(queries, dtype=np.float32) @ chunks.T).todense())
    offsets, idx, sc = [0], [], []
    cols = np.arange(dense.shape[1])
    for row in dense:
        order = np.lexsort((cols, -row))
        order = order[row[order] > 0][:k]
        idx.append(order.astype(np.int64))
        sc.append(row[order].astype(np.float32))
        offsets.append(offsets[-1] + len(order))
    return TopK(np.asarray(offsets, np.int64), np.concatenate(idx), np.concatenate(sc))


def encode_queries(
    texts: list[str], main: TfidfVectorizer, fallback: TfidfVectorizer | None
) -> tuple[sp.csr_matrix, sp.csr_matrix | None, np.ndarray]:
    """Query vectors under the main vectoriser, and under the fallback for rows with no n-gram.

    Returns ``(main_matrix, fallback_matrix_or_None, needs_fallback bool mask)``; the fallback
    matrix has one row per query (rows not needing it are zero) so row numbers stay aligned.
    """
    qm = sp.csr_matrix(main.transform(texts), dtype=np.float32)
    empty = np.diff(qm.indptr) == 0
    qf = None
    if fallback is not None and empty.any():
        qf = sp.csr_matrix(fallback.transform(texts), dtype=np.float32)
        keep = sp.diags(empty.astype(np.float32))
        qf = sp.csr_matrix(keep @ qf, dtype=np.float32)
        qf.eliminate_zeros()
    return qm, qf, empty


def retrieve(
    texts: list[str],
    main: TfidfVectorizer,
    main_matrix: sp.csr_matrix,
    k: int,
    memory_mb: float = 512.0,
    fallback: TfidfVectorizer | None = None,
    fallback_matrix: sp.csr_matrix | None = None,
    backend: str = "scipy",
    threads: int = 1,
) -> tuple[TopK, np.ndarray]:
    """Top-k chunks per query text; queries with no known main n-gram use the fallback index.

    Returns the hits and a bool mask of the queries that were scored by the fallback.
    """
    if main_matrix.shape[0] == 0:
        raise ValueError("retrieval index is empty (no chunks)")
    if (fallback is None) != (fallback_matrix is None):
        raise ValueError("fallback vectoriser and fallback matrix go together")
    qm, qf, empty = encode_queries(texts, main, fallback)
    hits = topk_blocked(qm, main_matrix, k, memory_mb, backend, threads)
    if qf is None:
        return hits, np.zeros(len(texts), dtype=bool)
    rows = np.flatnonzero(empty)
    fb = topk_blocked(qf[rows], fallback_matrix, k, memory_mb, backend, threads)
    counts = np.diff(hits.offsets)
    counts[rows] = np.diff(fb.offsets)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    index = np.empty(offsets[-1], np.int64)
    score = np.empty(offsets[-1], np.float32)
    src = {int(r): j for j, r in enumerate(rows)}
    for q in range(len(texts)):
        a, b = offsets[q], offsets[q + 1]
        if q in src:
            j = src[q]
            s = slice(fb.offsets[j], fb.offsets[j + 1])
            index[a:b], score[a:b] = fb.index[s], fb.score[s]
        else:
            s = slice(hits.offsets[q], hits.offsets[q + 1])
            index[a:b], score[a:b] = hits.index[s], hits.score[s]
    return TopK(offsets, index, score), empty
