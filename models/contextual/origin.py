"""The Origin similarity (Sec. 3.3, Eq. 4), vectorised over many pairs.

For a pair (s1, s2) with context sets Cs1 and Cs2, C = Cs1 + Cs2 (concatenation, as in the paper:
a context in both sets appears twice), v_s = [S(s, c) for c in C] and
sim(s1, s2) = cosine(v_s1, v_s2). The same is computed for every Eq. 3 term on its own (label
per term) and for S with one term removed (Table 9), from one lookup of each (s, c) score.

Everything here works on integer ids and float arrays: a score table is given as parallel arrays
``(query_id, context_id, values[n, k])`` and looked up with one ``searchsorted`` per block of
pairs, so each (s, c) score is computed once upstream and only read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Eq. 3 terms in the order of the score artefact columns.
TERMS: tuple[str, ...] = ("disc", "fwd", "left", "right")
TERM_COLUMNS: dict[str, str] = {
    "disc": "disc_logprob",
    "fwd": "gen_fwd",
    "left": "gen_left",
    "right": "gen_right",
}


@dataclass
class ContextSets:
    """Cs for many sentences in CSR form: contexts of query ``qids[i]`` are
    ``context_ids[offsets[i]:offsets[i+1]]`` (in selection order)."""

    qids: np.ndarray  # sorted unique int64
    offsets: np.ndarray  # int64, len(qids) + 1
    context_ids: np.ndarray  # int64

    @classmethod
    def from_rows(
        cls, query_id: np.ndarray, context_id: np.ndarray, position: np.ndarray | None = None
    ) -> ContextSets:
        query_id = np.asarray(query_id, dtype=np.int64)
        context_id = np.asarray(context_id, dtype=np.int64)
        pos = np.zeros(len(query_id), np.int64) if position is None else np.asarray(position)
        order = np.lexsort((pos, query_id))
        q, c = query_id[order], context_id[order]
        qids, starts = np.unique(q, return_index=True)
        offsets = np.append(starts, len(q)).astype(np.int64)
        return cls(qids, offsets, c)

    def locate(self, qids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start offset, |Cs|) of each query id; |Cs| = 0 for a query without a set."""
        qids = np.asarray(qids, np.int64)
        if len(self.qids) == 0:
            return np.zeros(len(qids), np.int64), np.zeros(len(qids), np.int64)
        idx = np.minimum(np.searchsorted(self.qids, qids), len(self.qids) - 1)
        found = self.qids[idx] == qids
        starts = np.where(found, self.offsets[idx], 0)
        return starts, np.where(found, self.offsets[idx + 1] - self.offsets[idx], 0)

    def sizes(self, qids: np.ndarray) -> np.ndarray:
        return self.locate(qids)[1]


def _ragged_concat(
    cs: ContextSets, s1: np.ndarray, s2: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each pair p, the context ids of Cs1 + Cs2, flat: (pair_index, context_id, from_cs1)."""
    st1, n1 = cs.locate(s1)
    st2, n2 = cs.locate(s2)
    lens = n1 + n2
    total = int(lens.sum())
    pair_idx = np.repeat(np.arange(len(s1), dtype=np.int64), lens)
    # position within the pair's concatenated list
    first = np.repeat(np.cumsum(lens) - lens, lens)
    k = np.arange(total, dtype=np.int64) - first
    n1r = np.repeat(n1, lens)
    src = np.where(k < n1r, np.repeat(st1, lens) + k, np.repeat(st2, lens) + (k - n1r))
    ctx = cs.context_ids[src] if total else np.zeros(0, np.int64)
    return pair_idx, ctx, k < n1r


def required_scores(
    cs: ContextSets, s1: np.ndarray, s2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The unique (query_id, context_id) pairs whose S is needed to label these pairs:
    {s1, s2} x (Cs1 ∪ Cs2) over all pairs. The score stage computes exactly these, once."""
    s1 = np.asarray(s1, np.int64)
    s2 = np.asarray(s2, np.int64)
    p, c, _ = _ragged_concat(cs, s1, s2)
    q = np.concatenate([s1[p], s2[p]])
    cc = np.concatenate([c, c])
    key = np.unique(np.stack([q, cc], axis=1), axis=0) if len(q) else np.zeros((0, 2), np.int64)
    return key[:, 0].copy(), key[:, 1].copy()


class ScoreLookup:
    """Scores of (query_id, context_id) pairs, found by binary search on a combined key.

    ``values`` is (n, k): one column per score view (S, each term, ...). A duplicated key is an
    error: it would mean a score was computed twice and one of them silently ignored.
    """

    def __init__(self, query_id: np.ndarray, context_id: np.ndarray, values: np.ndarray):
        q = np.asarray(query_id, np.int64)
        c = np.asarray(context_id, np.int64)
        values = np.asarray(values, np.float64)
        if values.ndim == 1:
            values = values[:, None]
        if len(q) != len(c) or len(q) != len(values):
            raise ValueError("query_id, context_id and values must have the same length")
        self._cmax = int(c.max()) + 1 if len(c) else 1
        if len(q) and (q.min() < 0 or c.min() < 0):
            raise ValueError("query_id and context_id must be non-negative")
        key = q * self._cmax + c
        order = np.argsort(key, kind="stable")
        self.keys = key[order]
        dup = np.flatnonzero(self.keys[1:] == self.keys[:-1])
        if len(dup):
            k = int(self.keys[dup[0]])
            raise ValueError(
                f"score table has duplicate (query_id, context_id) = "
                f"({k // self._cmax}, {k % self._cmax})"
            )
        self.values = values[order]
        self.n_lookups = 0  # rows looked up, for cost accounting and tests

    def get(self, query_id: np.ndarray, context_id: np.ndarray) -> np.ndarray:
        q = np.asarray(query_id, np.int64)
        c = np.asarray(context_id, np.int64)
        self.n_lookups += len(q)
        key = q * self._cmax + np.minimum(c, self._cmax - 1)
        idx = np.searchsorted(self.keys, key)
        idx_c = np.minimum(idx, max(len(self.keys) - 1, 0))
        ok = (idx < len(self.keys)) & (c < self._cmax)
        if len(self.keys):
            ok &= self.keys[idx_c] == key
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise KeyError(
                f"no score for (query_id={int(q[bad])}, context_id={int(c[bad])}); "
                "the score stage must cover required_scores(select, pairs)"
            )
        return self.values[idx_c]


#: Vector similarities for Eq. 4. The paper uses cosine and notes that "different metrics such
#: as cosine similarity" may compare v_s1 and v_s2 (Sec. 3.3); the others cancel a context's own
#: likelihood or a sentence's fluency (see ``similarity_by_group``). Measured on STSb dev with the
#: books corpus (bench/results/origin_curve_cs10.md), cosine is the best for S.
SIMILARITIES: tuple[str, ...] = ("cosine", "pearson", "neg_rmse", "cross_fit")


def similarity_by_group(
    group: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    n_groups: int,
    how: str = "cosine",
    from_first: np.ndarray | None = None,
) -> np.ndarray:
    """sim(a[group == g], b[group == g]) for every g, columns (score views) independently.

    a, b: (m, k) score vectors of s1 and s2 over C. Returns (n_groups, k), NaN where undefined.

    * ``cosine`` — Eq. 4 as written. Every entry is a log-probability (negative), so the raw
      cosine is dominated by the shared offset of each context's own likelihood.
    * ``pearson`` — each vector centred first: removes each sentence's overall fluency.
    * ``neg_rmse`` — minus the RMS difference: a context's own likelihood, shared by both
      vectors, cancels in a - b.
    * ``cross_fit`` — how well each sentence fits the *other's* contexts relative to the owner:
      mean over c in Cs1 of S(s2, c) - S(s1, c), plus mean over c in Cs2 of S(s1, c) - S(s2, c)
      (needs ``from_first``, True where the context came from Cs1). A log-likelihood ratio,
      so it too cancels the context's own likelihood.
    """
    if how not in SIMILARITIES:
        raise ValueError(f"similarity {how!r}: use one of {SIMILARITIES}")
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    out = np.empty((n_groups, a.shape[1]))
    cnt = np.bincount(group, minlength=n_groups).astype(np.float64)
    if how == "cross_fit":
        if from_first is None:
            raise ValueError("cross_fit needs from_first (which contexts are from Cs1)")
        first = np.asarray(from_first, bool)
        n_first = np.bincount(group, weights=first.astype(np.float64), minlength=n_groups)

    def gsum(x: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
        w = x if where is None else np.where(where, x, 0.0)
        return np.bincount(group, weights=w, minlength=n_groups)

    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(a.shape[1]):
            x, y = a[:, j], b[:, j]
            if how == "neg_rmse":
                out[:, j] = -np.sqrt(gsum((x - y) ** 2) / cnt)
                continue
            if how == "cross_fit":
                d = y - x  # S(s2, c) - S(s1, c)
                out[:, j] = gsum(d, first) / n_first - gsum(d, ~first) / (cnt - n_first)
                continue
            if how == "pearson":
                x = x - (gsum(x) / cnt)[group]
                y = y - (gsum(y) / cnt)[group]
            den = np.sqrt(gsum(x * x) * gsum(y * y))
            out[:, j] = np.clip(
                np.where(den > 0, gsum(x * y) / np.where(den > 0, den, 1.0), np.nan), -1, 1
            )
    return np.where(np.isfinite(out), out, np.nan)


def origin_labels(
    cs: ContextSets,
    s1: np.ndarray,
    s2: np.ndarray,
    lookup: ScoreLookup,
    block_pairs: int = 20000,
    similarity: str = "cosine",
) -> np.ndarray:
    """Eq. 4 for every pair and every score view: (n_pairs, k) with k = lookup's columns."""
    s1 = np.asarray(s1, np.int64)
    s2 = np.asarray(s2, np.int64)
    out = np.full((len(s1), lookup.values.shape[1]), np.nan)
    for lo in range(0, len(s1), max(1, block_pairs)):
        hi = min(len(s1), lo + block_pairs)
        p, c, first = _ragged_concat(cs, s1[lo:hi], s2[lo:hi])
        if len(p) == 0:
            continue
        v1 = lookup.get(s1[lo:hi][p], c)
        v2 = lookup.get(s2[lo:hi][p], c)
        out[lo:hi] = similarity_by_group(p, v1, v2, hi - lo, similarity, first)
    return out


def origin_labels_naive(
    cs_lists: dict[int, Sequence[int]],
    pairs: Sequence[tuple[int, int]],
    score: dict[tuple[int, int], float],
) -> list[float]:
    """One pair at a time with Python lists (the reference and benchmark baseline)."""
    out = []
    for a, b in pairs:
        ctx = list(cs_lists.get(a, [])) + list(cs_lists.get(b, []))
        v1 = [score[(a, c)] for c in ctx]
        v2 = [score[(b, c)] for c in ctx]
        dot = sum(x * y for x, y in zip(v1, v2, strict=True))
        n1 = sum(x * x for x in v1) ** 0.5
        n2 = sum(y * y for y in v2) ** 0.5
        out.append(dot / (n1 * n2) if n1 > 0 and n2 > 0 else float("nan"))
    return out


def recover_lambdas(s: np.ndarray, terms: np.ndarray, tol: float = 1e-4) -> np.ndarray | None:
    """λ of Eq. 3 from rows where S = Σ λ_k term_k (least squares); None if S is not such a
    linear combination (residual above ``tol`` relative to |S|). Columns of all-NaN terms get 0."""
    s = np.asarray(s, np.float64)
    t = np.asarray(terms, np.float64)
    present = ~np.all(np.isnan(t), axis=0)
    rows = ~np.isnan(s) & ~np.any(np.isnan(t[:, present]), axis=1)
    lam = np.zeros(t.shape[1])
    if rows.sum() < max(1, present.sum()):
        return None
    coef, *_ = np.linalg.lstsq(t[rows][:, present], s[rows], rcond=None)
    resid = np.abs(t[rows][:, present] @ coef - s[rows]).max()
    if resid > tol * max(1.0, np.abs(s[rows]).max()):
        return None
    lam[present] = coef
    return lam


def spearman_x100(pred: np.ndarray, gold: np.ndarray) -> float:
    """Spearman rank correlation x100 over the finite predictions (NaN if < 3 of them)."""
    from scipy.stats import spearmanr

    pred = np.asarray(pred, np.float64)
    gold = np.asarray(gold, np.float64)
    ok = np.isfinite(pred) & np.isfinite(gold)
    if ok.sum() < 3 or np.ptp(pred[ok]) == 0 or np.ptp(gold[ok]) == 0:
        return float("nan")
    return float(spearmanr(pred[ok], gold[ok]).statistic * 100.0)


#: subset names that are separate evaluation sets rather than parts of one year's set
SPLIT_SUBSETS = {"train", "dev", "test", "trial"}


def report_name(dataset: str, subset: str) -> str:
    """Evaluation-set name: a year's subsets form one set (STS12), splits are sets of their own
    (STSb.dev, SICK-R.trial)."""
    return f"{dataset}.{subset}" if subset in SPLIT_SUBSETS else dataset


def spearman_conventions(
    pred: np.ndarray, gold: np.ndarray, subset: Sequence[str]
) -> tuple[float, float]:
    """("all", "mean") Spearman x100: subsets concatenated vs. the mean over subsets."""
    subset = np.asarray(subset, dtype=object)
    per = [spearman_x100(pred[subset == s], gold[subset == s]) for s in sorted(set(subset))]
    per = [x for x in per if np.isfinite(x)]
    return spearman_x100(pred, gold), float(np.mean(per)) if per else float("nan")


def pair_split(s1: np.ndarray, s2: np.ndarray, seed: int, ratios: Sequence[float]) -> np.ndarray:
    """Deterministic split index per unordered pair: splitmix64 of (min, max, seed) mapped to
    [0, 1) and cut at the cumulative ratios (e.g. 98/1/1 -> 0, 1, 2)."""
    a = np.minimum(s1, s2).astype(np.uint64)
    b = np.maximum(s1, s2).astype(np.uint64)
    with np.errstate(over="ignore"):
        x = a * np.uint64(0x9E3779B97F4A7C15) ^ (
            b + np.uint64(seed) * np.uint64(0xBF58476D1CE4E5B9)
        )
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    u = (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    r = np.asarray(ratios, np.float64)
    cuts = np.cumsum(r / r.sum())[:-1]
    return np.searchsorted(cuts, u, side="right")


def check_split_ratios(ratios: list[float], key: str) -> list[float]:
    """Three non-negative train/dev/test weights with a positive sum (``pair_split``'s
    ``ratios``), else a ValueError naming the config ``key``."""
    if len(ratios) != 3 or min(ratios) < 0 or sum(ratios) <= 0:
        raise ValueError(f"{key} needs three non-negative numbers (train/dev/test)")
    return ratios


#: the splits a generated pair falls in (``pair_split``'s indices), and a given pair's
SPLITS = ("train", "dev", "test")
GIVEN_SPLIT = "eval"


def pair_split_names(
    s1: np.ndarray, s2: np.ndarray, seed: int, ratios: Sequence[float], given: bool
) -> np.ndarray:
    """Each pair's split name: ``eval`` for all when the pairs were given (an STS file's),
    else ``train``/``dev``/``test`` by ``pair_split``. The `label` stage writes these, and
    `train` recomputes them for an objective that reads the pairs without labels, so both
    train on the same pairs."""
    if given:
        return np.full(len(s1), GIVEN_SPLIT, dtype=object)
    return np.asarray(SPLITS, dtype=object)[pair_split(s1, s2, seed, ratios)]


def rescale_labels(values: np.ndarray, how: str) -> np.ndarray:
    """Map Eq. 4 labels onto the surrogate's cosine range.

    Cosines of raw S vectors (all entries are log-probabilities, so all negative) crowd into
    about [0.93, 1]; regressing a sentence encoder's cosine onto that range pulls every pair
    together. ``rank`` keeps only their order (uniform on [0, 1], ties averaged), which is all
    that Spearman-evaluated similarity needs; ``minmax`` keeps relative gaps; ``none`` is the
    paper's literal target.
    """
    v = np.asarray(values, dtype=np.float64)
    if how == "none" or len(v) == 0:
        return v
    if how == "minmax":
        lo, hi = float(np.min(v)), float(np.max(v))
        return np.zeros_like(v) if hi == lo else (v - lo) / (hi - lo)
    if how == "rank":
        from scipy.stats import rankdata

        return np.zeros_like(v) if len(v) == 1 else (rankdata(v) - 1) / (len(v) - 1)
    raise ValueError(f"label scaling {how!r}: use none, rank or minmax")
