"""Domain evaluation metrics, in the MTEB conventions, and their paired bootstrap intervals.

* Pair classification (MTEB PairClassification): average precision of the cosine (sklearn), and
  the accuracy and F1 at their best thresholds (sentence-transformers'
  ``BinaryClassificationEvaluator`` searches, the ones MTEB uses), all x100.
* Retrieval (MTEB Retrieval): nDCG@10, MRR@10 and Recall@100 per query from trec_eval
  (``pytrec_eval``: ``ndcg_cut_10``, ``recall_100``, and ``recip_rank`` on the run cut at 10),
  then averaged, x100.
* Intervals: a pair-classification difference resamples pairs and recomputes AP for both systems
  (percentile bootstrap: AP is not an average of per-pair terms); a retrieval difference is the
  mean of per-query differences, with a BCa bootstrap over queries.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

RETRIEVAL_METRICS = ("ndcg_at_10", "mrr_at_10", "recall_at_100")
PAIR_METRICS = ("ap", "accuracy", "f1")


def pair_classification_scores(scores: Sequence[float], labels: Sequence[int]) -> dict[str, float]:
    """AP, best-threshold accuracy and F1 (x100) of similarity ``scores`` for 0/1 ``labels``."""
    from sentence_transformers.evaluation import BinaryClassificationEvaluator as B
    from sklearn.metrics import average_precision_score

    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    acc, acc_thr = B.find_best_acc_and_threshold(s, y, True)
    f1, precision, recall, f1_thr = B.find_best_f1_and_threshold(s, y, True)
    return {
        "ap": float(average_precision_score(y, s) * 100),
        "accuracy": float(acc * 100),
        "accuracy_threshold": float(acc_thr),
        "f1": float(f1 * 100),
        "f1_threshold": float(f1_thr),
        "precision": float(precision * 100),
        "recall": float(recall * 100),
        "n_pairs": int(len(y)),
        "n_positive": int(y.sum()),
    }


def retrieval_per_query(sim: np.ndarray, relevant: Sequence[int]) -> dict[str, np.ndarray]:
    """Per-query nDCG@10, MRR@10 and Recall@100 (x100) of a (queries x documents) similarity
    matrix; query i's only relevant document is ``relevant[i]``."""
    import pytrec_eval

    sim = np.asarray(sim, dtype=np.float64)
    n_q, n_d = sim.shape
    if len(relevant) != n_q:
        raise ValueError(f"{n_q} queries but {len(relevant)} relevant documents")
    k = min(100, n_d)
    top = (
        np.argpartition(-sim, k - 1, axis=1)[:, :k]
        if k < n_d
        else np.tile(np.arange(n_d), (n_q, 1))
    )
    qrels = {f"q{i}": {f"d{int(r)}": 1} for i, r in enumerate(relevant)}
    run100: dict[str, dict[str, float]] = {}
    run10: dict[str, dict[str, float]] = {}
    for i in range(n_q):
        docs = top[i][np.argsort(-sim[i, top[i]], kind="stable")]
        run100[f"q{i}"] = {f"d{int(d)}": float(sim[i, d]) for d in docs}
        run10[f"q{i}"] = {f"d{int(d)}": float(sim[i, d]) for d in docs[:10]}
    deep = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run100)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run10)
    keys = [f"q{i}" for i in range(n_q)]
    return {
        "ndcg_at_10": np.array([deep[q]["ndcg_cut_10"] for q in keys]) * 100,
        "mrr_at_10": np.array([rr[q]["recip_rank"] for q in keys]) * 100,
        "recall_at_100": np.array([deep[q]["recall_100"] for q in keys]) * 100,
    }


def retrieval_scores(per_query: dict[str, np.ndarray]) -> dict[str, float]:
    """The means of ``retrieval_per_query``'s arrays."""
    out = {m: float(np.mean(v)) for m, v in per_query.items()}
    out["n_queries"] = int(len(next(iter(per_query.values()))))
    return out


def _interval(delta: float, lo: float, hi: float, confidence: float, n: int) -> dict[str, float]:
    return {
        "delta": float(delta),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "confidence": confidence,
        "n_resamples": n,
        "significant": bool(lo > 0 or hi < 0),
    }


def mean_diff_ci(
    a: Sequence[float],
    b: Sequence[float],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Paired BCa bootstrap CI of ``mean(a) - mean(b)`` (per-query metrics of two systems)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if np.ptp(d) == 0:  # every resample has the same mean (BCa is undefined there)
        return _interval(float(d[0]), float(d[0]), float(d[0]), confidence, n_resamples)
    res = stats.bootstrap(
        (d,),
        np.mean,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="BCa",
        random_state=np.random.default_rng(seed),
    )
    ci = res.confidence_interval
    return _interval(float(d.mean()), ci.low, ci.high, confidence, n_resamples)


def seed_mean_diff_ci(
    a: np.ndarray,
    b: np.ndarray,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Paired percentile bootstrap CI of the seed-mean difference of per-query metrics, with
    ``a`` and ``b`` of shape (training seeds, queries), row k of ``a`` paired with row k of
    ``b``: each resample draws the seeds and then the queries (a two-stage bootstrap), so
    the interval holds the spread between trained models as well as between queries."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if d.ndim != 2:
        raise ValueError(f"seeds x queries expected, got shape {d.shape}")
    rng = np.random.default_rng(seed)
    k, n = d.shape
    deltas = np.empty(n_resamples)
    for i in range(n_resamples):
        deltas[i] = d[rng.integers(0, k, k)][:, rng.integers(0, n, n)].mean()
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(deltas, [alpha, 1 - alpha])
    return _interval(float(d.mean()), lo, hi, confidence, n_resamples)


def ap_diff_ci(
    labels: Sequence[int],
    a: Sequence[float],
    b: Sequence[float],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    resample_rows: bool = False,
) -> dict[str, float]:
    """Paired percentile bootstrap CI of ``AP(a) - AP(b)`` x100: pairs are resampled together;
    a resample holding one class only is drawn again. ``a`` and ``b`` may be 2-D (one row per
    training seed of a system): AP is then the mean of the rows' APs, as for a seed-averaged
    figure, and each resample draws the same pairs for every row. With ``resample_rows`` each
    resample also draws the rows (row k of ``a`` with row k of ``b``), so the interval holds the
    spread between training seeds too, not only between pairs."""
    from sklearn.metrics import average_precision_score

    y = np.asarray(labels, dtype=np.int64)
    sa = np.atleast_2d(np.asarray(a, dtype=np.float64))
    sb = np.atleast_2d(np.asarray(b, dtype=np.float64))
    if resample_rows and len(sa) != len(sb):
        raise ValueError(f"seeds resampled in pairs: {len(sa)} rows against {len(sb)}")

    def mean_ap(yy: np.ndarray, rows: np.ndarray) -> float:
        return float(np.mean([average_precision_score(yy, r) for r in rows]))

    delta = (mean_ap(y, sa) - mean_ap(y, sb)) * 100
    if np.array_equal(sa, sb):
        return _interval(0.0, 0.0, 0.0, confidence, n_resamples)
    rng = np.random.default_rng(seed)
    n = len(y)
    deltas = np.empty(n_resamples)
    i = 0
    while i < n_resamples:
        ix = rng.integers(0, n, n)
        yy = y[ix]
        if yy.min() == yy.max():
            continue
        seeds = rng.integers(0, len(sa), len(sa)) if resample_rows else slice(None)
        deltas[i] = (mean_ap(yy, sa[seeds][:, ix]) - mean_ap(yy, sb[seeds][:, ix])) * 100
        i += 1
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(deltas, [alpha, 1 - alpha])
    return _interval(delta, lo, hi, confidence, n_resamples)
