"""Which sentence pairs get labels: nearest neighbours, shared contexts, random pairs.

Random pairs of sentences are almost all unrelated, so a labelled set made only of them teaches
the surrogate (Sec. 3.4) little about the high-similarity range; nearest neighbours in an
embedding space and pairs whose context sets overlap (Sec. 3.3: s1 and s2 fit the same context)
supply related pairs. The mix is set in the config and the label histogram shows the coverage.

Pairs are unordered: (a, b) and (b, a) are one pair, stored as (min, max); self-pairs are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

SOURCES: tuple[str, ...] = ("knn", "shared", "random")


def canonical(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unordered pairs as (min, max), self-pairs removed, duplicates removed (first kept)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keep = lo != hi
    lo, hi = lo[keep], hi[keep]
    if len(lo) == 0:
        return lo, hi
    _, first = np.unique(np.stack([lo, hi], 1), axis=0, return_index=True)
    first = np.sort(first)
    return lo[first], hi[first]


def tfidf_embed(
    texts: Sequence[str], dim: int, fit_texts: Sequence[str] | None = None, seed: int = 0
) -> np.ndarray:
    """L2-normalised LSA vectors (TF-IDF uni+bigrams -> truncated SVD), float32 (n, d).

    No weights needed; the IDF comes from ``fit_texts`` (e.g. a corpus sample) when given, and
    the SVD is fitted on ``fit_texts`` + ``texts`` (:func:`lsa_project`). The TF-IDF is float32:
    float64 costs more for the same neighbours (bench/results/pairs_svd.md).
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1, dtype=np.float32)
    fit = list(texts) if fit_texts is None else list(fit_texts) + list(texts)
    xf = vec.fit_transform(fit)
    x = vec.transform(texts)
    k = min(dim, xf.shape[1] - 1, xf.shape[0] - 1)
    x = lsa_project(xf, x, k, seed=seed) if k >= 2 else x.toarray()
    return normalize(np.asarray(x, np.float32)).astype(np.float32)


def lsa_project(
    x_fit: Any, x: Any, k: int, *, n_oversamples: int = 10, n_iter: int = 5, seed: int = 0
) -> np.ndarray:
    """Rows of ``x`` on the top ``k`` right singular vectors of ``x_fit`` (sparse, n x V): (m, k).

    sklearn's randomized TruncatedSVD (Halko et al.: the same random start from ``seed``, 5
    power iterations with LU normalisation, 10 extra vectors) reshaped for a vocabulary far
    larger than the sample: books' 50,500 sentences have 391,000 uni+bigrams, and sklearn's
    LU and QR steps on vocabulary x (k + 10) matrices were most of the pairs stage's CPU. Here
    the iterates are normalised on the sentence side only (the same subspace in exact
    arithmetic) and the final basis and singular vectors come from two (k + 10)-square
    eigenproblems in float64 (Rayleigh-Ritz) instead of a vocabulary-side QR and SVD. The signs
    of the components are arbitrary (no ``svd_flip``): inner products, and so neighbours, do
    not see them. On books_generated 17.0 against sklearn's 36.7 CPU-s, the same 10 nearest
    neighbours in order for 500 of 500 queries (bench/results/pairs_lsa.md).
    """
    from scipy.linalg import eigh, lu, qr

    n, vocab = x_fit.shape
    p = min(k + n_oversamples, n, vocab)
    xt = x_fit.T  # a CSC view: its products with dense blocks beat a CSR copy's 2x here
    # sklearn's check_random_state(seed).normal(size=(n, p)), in float32 like a float32 input
    z = np.random.RandomState(seed).normal(size=(n, p)).astype(x_fit.dtype)
    for _ in range(n_iter):
        z, _ = lu(x_fit @ (xt @ z), permute_l=True, check_finite=False)
    z, _ = qr(z.astype(np.float64), mode="economic", check_finite=False)
    fit64, x64 = x_fit.astype(np.float64), x.astype(np.float64)
    xt64 = fit64.T  # a view, as xt: no second conversion
    w = np.empty((n, p))  # x_fit @ y, y = x_fit.T @ z: the (vocab x p) basis before orthogonalising
    xy = np.empty((x.shape[0], p))  # x @ y
    for lo in range(0, p, 64):  # y in column blocks: never all vocab x p of it at once
        y = xt64 @ z[:, lo : lo + 64]
        w[:, lo : lo + 64] = fit64 @ y
        xy[:, lo : lo + 64] = x64 @ y
    lam, e = eigh(z.T @ w)  # y.T @ y
    keep = lam > lam[-1] * p * np.finfo(np.float64).eps
    basis = e[:, keep] / np.sqrt(lam[keep])  # y @ basis: an orthonormal basis of span(y)
    xq = w @ basis  # x_fit projected on it
    _, f = eigh(xq.T @ xq)  # ascending: the right singular vectors' coordinates, last first
    out = np.zeros((x.shape[0], k))  # beyond x_fit's rank: zero columns (TruncatedSVD: noise)
    proj = xy @ (basis @ f[:, ::-1][:, :k])
    out[:, : proj.shape[1]] = proj
    return out


# Exact search up to FLAT_MAX rows, IVF above, probing IVF_NPROBE clusters per query, trained
# on IVF_TRAIN_PER_LIST rows per cluster: recall@3 0.96-0.99 from 10,000 to 150,000 real
# sentences (nlist 4 sqrt(n)), and at 150,000 faster than exact (1.19x); a share of the
# clusters (a sixth) grows with n and was slower than exact there; 64 rows per cluster found
# the same neighbours as 256 (bench/results/knn_mining_books*.md).
FLAT_MAX = 150_000
IVF_NPROBE = 128
IVF_TRAIN_PER_LIST = 64


def default_nprobe(nlist: int) -> int:
    """Clusters probed when none is asked for: IVF_NPROBE, or all when there are fewer."""
    return min(nlist, IVF_NPROBE)


def knn_search(
    emb: np.ndarray,
    k: int,
    flat_max: int = FLAT_MAX,
    nlist: int | None = None,
    nprobe: int | None = None,
    use_gpu: bool = False,
    seed: int = 0,
    train_per_list: int = IVF_TRAIN_PER_LIST,
) -> tuple[np.ndarray, np.ndarray]:
    """k nearest neighbours (inner product) of every row, self excluded: (idx, sim), (n, k).

    Exact ``IndexFlatIP`` up to ``flat_max`` rows, ``IndexIVFFlat`` (nlist ~ 4·sqrt(n)) above,
    trained on a seeded sample of ``train_per_list`` rows per cluster, searching ``nprobe``
    clusters (None: ``default_nprobe``); on GPU when faiss-gpu is
    installed and ``use_gpu``. Missing neighbours are -1.
    """
    import faiss

    x = np.ascontiguousarray(emb, dtype=np.float32)
    n, d = x.shape
    k_eff = min(k + 1, n)
    if n <= flat_max:
        index = faiss.IndexFlatIP(d)
    else:
        nl = nlist or int(4 * np.sqrt(n))
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFFlat(quantizer, d, nl, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(seed)
        sample = x[rng.choice(n, size=min(n, train_per_list * nl), replace=False)]
        index.train(sample)
        index.nprobe = nprobe if nprobe is not None else default_nprobe(nl)
    if use_gpu and hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
        index = faiss.index_cpu_to_all_gpus(index)
    index.add(x)
    sim, idx = index.search(x, k_eff)
    invalid = (idx == np.arange(n)[:, None]) | (idx < 0)  # self may not be first on ties
    order = np.argsort(invalid, axis=1, kind="stable")
    idx = np.take_along_axis(idx, order, 1)
    sim = np.take_along_axis(sim, order, 1)
    invalid = np.take_along_axis(invalid, order, 1)
    out_i = np.full((n, k), -1, np.int64)
    out_s = np.full((n, k), np.nan, np.float32)
    kk = min(k, k_eff)
    out_i[:, :kk] = np.where(invalid[:, :kk], -1, idx[:, :kk])
    out_s[:, :kk] = np.where(invalid[:, :kk], np.nan, sim[:, :kk])
    return out_i, out_s


def knn_pairs(nbr_idx: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs from a neighbour table, nearest first (all 1st neighbours, then 2nd...)."""
    n, k = nbr_idx.shape
    cols = nbr_idx.T.ravel()  # neighbour rank-major order
    rows = np.tile(np.arange(n), k)
    ok = cols >= 0
    return canonical(ids[rows[ok]], ids[cols[ok]])


def shared_context_pairs(
    query_id: np.ndarray,
    context_id: np.ndarray,
    max_pairs_per_context: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of queries whose context sets share a context, at most ``max_pairs_per_context``
    drawn per shared context (a context shared by m queries has m(m-1)/2 pairs)."""
    q = np.asarray(query_id, np.int64)
    c = np.asarray(context_id, np.int64)
    order = np.lexsort((q, c))
    q, c = q[order], c[order]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    ends = np.r_[starts[1:], len(c)]
    a_out: list[np.ndarray] = []
    b_out: list[np.ndarray] = []
    for s, e in zip(starts, ends, strict=True):
        members = np.unique(q[s:e])
        m = len(members)
        if m < 2:
            continue
        n_all = m * (m - 1) // 2
        if n_all <= max_pairs_per_context:
            ii, jj = np.triu_indices(m, 1)
        else:
            ii = rng.integers(0, m, size=2 * max_pairs_per_context)
            jj = rng.integers(0, m, size=2 * max_pairs_per_context)
        a, b = canonical(members[ii], members[jj])
        a_out.append(a[:max_pairs_per_context])
        b_out.append(b[:max_pairs_per_context])
    if not a_out:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a, b = canonical(np.concatenate(a_out), np.concatenate(b_out))
    perm = rng.permutation(len(a))
    return a[perm], b[perm]


def random_pairs(
    ids: np.ndarray, n: int, rng: np.random.Generator, exclude: set[tuple[int, int]] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``n`` distinct uniform random unordered pairs not in ``exclude``."""
    ids = np.asarray(ids, np.int64)
    m = len(ids)
    cap = m * (m - 1) // 2 - (len(exclude) if exclude else 0)
    n = max(0, min(n, cap))
    taken: set[tuple[int, int]] = set(exclude or ())
    a_out: list[int] = []
    b_out: list[int] = []
    for _ in range(50):
        if len(a_out) >= n:
            break
        need = n - len(a_out)
        a = ids[rng.integers(0, m, size=2 * need + 8)]
        b = ids[rng.integers(0, m, size=2 * need + 8)]
        for x, y in zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist(), strict=True):
            if x != y and (x, y) not in taken:
                taken.add((x, y))
                a_out.append(x)
                b_out.append(y)
                if len(a_out) >= n:
                    break
    return np.asarray(a_out, np.int64), np.asarray(b_out, np.int64)


def mix_pairs(
    candidates: dict[str, tuple[np.ndarray, np.ndarray]],
    quotas: dict[str, int],
    ids: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Take each source's quota in the order knn, shared, random, skipping pairs taken already;
    a shortfall of knn or shared is filled with random pairs. Returns (s1, s2, source)."""
    taken: set[tuple[int, int]] = set()
    s1: list[int] = []
    s2: list[int] = []
    src: list[str] = []
    short = 0
    for name in ("knn", "shared"):
        a, b = candidates.get(name, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        got = 0
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            if got >= quotas.get(name, 0):
                break
            if (x, y) in taken:
                continue
            taken.add((x, y))
            s1.append(x)
            s2.append(y)
            src.append(name)
            got += 1
        short += quotas.get(name, 0) - got
    ra, rb = random_pairs(ids, quotas.get("random", 0) + short, rng, exclude=taken)
    s1 += ra.tolist()
    s2 += rb.tolist()
    src += ["random"] * len(ra)
    return np.asarray(s1, np.int64), np.asarray(s2, np.int64), np.asarray(src, dtype=object)
