"""STS metrics: correlations x100 in the "all" and "mean" conventions, paired BCa bootstrap
intervals for the difference of two systems, and the hard splits of Wieting et al. (2020).

* "all": one correlation over the concatenated subsets of a year (SimCSE / CLRCMD Table 1);
  "mean": the mean of per-subset correlations (SentEval, DynaMax). Both are reported, labelled.
* Paired bootstrap with bias-corrected and accelerated intervals (Efron 1987) for
  ``r(A, gold) - r(B, gold)`` as in Zhelezniak et al. (2019), Appendix D; a stratified
  percentile bootstrap for the difference of averages over several sets.
* Hard splits (Wieting et al. 2020, Sec. 4.3): symmetric word error rate
  ``SWER = WER(s1, s2)/2 + WER(s2, s1)/2``; "hard_high_gold" = gold in [4, 5] and SWER in the top
  20% (their Hard-), "hard_low_gold" = gold in [0, 1] and SWER in the bottom 20% (their Hard+),
  and "negation" = exactly one sentence contains "not" or "n't".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

_WORD = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]", re.UNICODE)
_NEG = re.compile(r"\bnot\b|n['’]t\b", re.IGNORECASE)


def spearman(pred: Sequence[float], gold: Sequence[float]) -> float:
    """Spearman rho x100 (nan when either side is constant)."""
    p, g = np.asarray(pred, float), np.asarray(gold, float)
    if len(p) < 2 or np.ptp(p) == 0 or np.ptp(g) == 0:
        return float("nan")
    return float(stats.spearmanr(p, g).statistic * 100.0)


def pearson(pred: Sequence[float], gold: Sequence[float]) -> float:
    """Pearson r x100 (nan when either side is constant)."""
    p, g = np.asarray(pred, float), np.asarray(gold, float)
    if len(p) < 2 or np.ptp(p) == 0 or np.ptp(g) == 0:
        return float("nan")
    return float(stats.pearsonr(p, g).statistic * 100.0)


def sts_scores(subsets: Mapping[str, tuple[Sequence[float], Sequence[float]]]) -> dict[str, float]:
    """Correlations of one dataset (e.g. a year) from {subset: (pred, gold)}.

    Returns spearman_all / pearson_all (subsets concatenated), spearman_mean / pearson_mean (mean
    over subsets) and n_pairs.
    """
    if not subsets:
        raise ValueError("no subsets given")
    preds = np.concatenate([np.asarray(p, float) for p, _ in subsets.values()])
    golds = np.concatenate([np.asarray(g, float) for _, g in subsets.values()])
    return {
        "spearman_all": spearman(preds, golds),
        "spearman_mean": float(np.mean([spearman(p, g) for p, g in subsets.values()])),
        "pearson_all": pearson(preds, golds),
        "pearson_mean": float(np.mean([pearson(p, g) for p, g in subsets.values()])),
        "n_pairs": int(len(golds)),
    }


def _corr_axis(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    a = a - a.mean(axis=axis, keepdims=True)
    b = b - b.mean(axis=axis, keepdims=True)
    den = np.sqrt((a * a).sum(axis=axis) * (b * b).sum(axis=axis))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(axis=axis) / den


def bootstrap_diff_ci(
    gold: Sequence[float],
    pred_a: Sequence[float],
    pred_b: Sequence[float],
    metric: str = "spearman",
    n_resamples: int = 10000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Paired BCa bootstrap CI of ``corr(A, gold) - corr(B, gold)`` x100.

    The triplets (gold_i, a_i, b_i) are resampled together (``paired=True``), so the dependence of
    the two correlations on the same gold scores is respected. ``significant`` is true when the
    interval excludes 0.
    """
    if metric not in ("spearman", "pearson"):
        raise ValueError(f"metric must be spearman or pearson, got {metric!r}")
    g, a, b = (np.asarray(v, float) for v in (gold, pred_a, pred_b))
    if not len(g) == len(a) == len(b):
        raise ValueError(f"lengths differ: gold {len(g)}, a {len(a)}, b {len(b)}")

    def statistic(gg: np.ndarray, aa: np.ndarray, bb: np.ndarray, axis: int = -1) -> np.ndarray:
        return _delta(gg, aa, bb, metric, axis)

    delta = float(statistic(g, a, b))
    if np.array_equal(a, b):  # identical systems: the difference is exactly 0 in every resample
        return {
            "delta": 0.0,
            "ci_low": 0.0,
            "ci_high": 0.0,
            "confidence": confidence,
            "n_resamples": n_resamples,
            "significant": False,
        }
    res = stats.bootstrap(
        (g, a, b),
        statistic,
        paired=True,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="BCa",
        random_state=np.random.default_rng(seed),
    )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return {
        "delta": delta,
        "ci_low": lo,
        "ci_high": hi,
        "confidence": confidence,
        "n_resamples": n_resamples,
        "significant": bool(lo > 0 or hi < 0),
    }


def bootstrap_avg_diff_ci(
    sets: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]],
    metric: str = "spearman",
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Paired, stratified percentile bootstrap CI of the *average over sets* of
    ``corr(A, gold) - corr(B, gold)`` x100; ``sets`` maps a name to (gold, a, b).

    Each set's triplets are resampled within that set (its size kept), so a 5-set average such
    as SimCSE's "avg" gets one interval. Percentile, not BCa: the jackknife BCa needs has no
    single sample to leave out across independent strata."""
    if metric not in ("spearman", "pearson"):
        raise ValueError(f"metric must be spearman or pearson, got {metric!r}")
    if not sets:
        raise ValueError("no sets to average")
    rng = np.random.default_rng(seed)
    deltas, boot = [], np.zeros(n_resamples)
    for name, (gold, pred_a, pred_b) in sets.items():
        g, a, b = (np.asarray(v, float) for v in (gold, pred_a, pred_b))
        if not len(g) == len(a) == len(b):
            raise ValueError(f"{name}: lengths differ: gold {len(g)}, a {len(a)}, b {len(b)}")
        deltas.append(_delta(g[None], a[None], b[None], metric)[0])
        for lo in range(0, n_resamples, 250):  # 250 resamples at a time bound the memory
            idx = rng.integers(0, len(g), size=(min(250, n_resamples - lo), len(g)))
            boot[lo : lo + len(idx)] += _delta(g[idx], a[idx], b[idx], metric)
    boot /= len(sets)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = (float(q) for q in np.quantile(boot, [alpha, 1.0 - alpha]))
    return {
        "delta": float(np.mean(deltas)),
        "ci_low": lo,
        "ci_high": hi,
        "confidence": confidence,
        "n_resamples": n_resamples,
        "significant": bool(lo > 0 or hi < 0),
    }


def _delta(g: np.ndarray, a: np.ndarray, b: np.ndarray, metric: str, axis: int = -1) -> np.ndarray:
    """corr(a, g) - corr(b, g) along ``axis``, x100 (ranks first for Spearman)."""
    if metric == "spearman":
        g, a, b = (stats.rankdata(v, axis=axis) for v in (g, a, b))
    return (_corr_axis(a, g, axis) - _corr_axis(b, g, axis)) * 100.0


def words(text: str) -> list[str]:
    """Lower-cased word and punctuation tokens (for WER)."""
    return [w.lower() for w in _WORD.findall(text)]


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two token sequences (substitution, insertion, deletion)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def wer(hyp: Sequence[str], ref: Sequence[str]) -> float:
    """Word error rate of ``hyp`` against reference ``ref``: edits / len(ref)."""
    if not ref:
        return 0.0 if not hyp else float(len(hyp))
    return edit_distance(hyp, ref) / len(ref)


def swer(s1: str, s2: str) -> float:
    """Symmetric WER (Wieting et al. 2020, footnote 7)."""
    w1, w2 = words(s1), words(s2)
    return 0.5 * wer(w1, w2) + 0.5 * wer(w2, w1)


def has_negation(text: str) -> bool:
    return bool(_NEG.search(text))


def hard_splits(
    s1: Sequence[str],
    s2: Sequence[str],
    gold: Sequence[float],
    quantile: float = 0.2,
    high_gold: tuple[float, float] = (4.0, 5.0),
    low_gold: tuple[float, float] = (0.0, 1.0),
) -> dict[str, np.ndarray]:
    """Index arrays of the hard splits over all given pairs (pool STS12-16 before calling).

    The SWER quantiles are taken over every given pair, as in Wieting et al. ("of all STS pairs").
    """
    if not len(s1) == len(s2) == len(gold):
        raise ValueError(f"lengths differ: {len(s1)}, {len(s2)}, {len(gold)}")
    g = np.asarray(gold, float)
    sw = np.array([swer(a, b) for a, b in zip(s1, s2, strict=True)])
    hi_cut, lo_cut = np.quantile(sw, 1 - quantile), np.quantile(sw, quantile)
    neg = np.array([has_negation(a) != has_negation(b) for a, b in zip(s1, s2, strict=True)])
    return {
        "hard_high_gold": np.flatnonzero(
            (g >= high_gold[0]) & (g <= high_gold[1]) & (sw >= hi_cut)
        ),
        "hard_low_gold": np.flatnonzero((g >= low_gold[0]) & (g <= low_gold[1]) & (sw <= lo_cut)),
        "negation": np.flatnonzero(neg),
    }
