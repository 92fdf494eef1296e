"""What the `label` stage reports about its labels: the stats (counts, spread, splits, seconds
per pair), the Origin report on given pairs (Spearman per evaluation set, per Eq. 3 term, and
for the TF-IDF and backbone baselines: ``files/origin.json``) and the label histogram."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ctxsim.models.contextual.origin import (
    GIVEN_SPLIT,
    SPLITS,
    TERMS,
    report_name,
    spearman_conventions,
)
from ctxsim.models.training.objectives import tfidf_cosine
from ctxsim.store.stage import StageContext

if TYPE_CHECKING:
    from ctxsim.tasks.label.params import LabelParams


def label_stats(
    ctx: StageContext,
    p: LabelParams,
    table: pa.Table,
    n1: np.ndarray,
    n2: np.ndarray,
    t_label: float,
    n_lookups: int,
) -> dict[str, Any]:
    """The stage's stats: pairs and non-finite labels, mean |Cs|, the label distribution, pairs
    per split and per source, and the seconds per labelled pair of each upstream stage."""
    lab = table.column("label").to_numpy(zero_copy_only=False).astype(np.float64)
    ok = np.isfinite(lab)
    n = table.num_rows
    stats: dict[str, Any] = {
        "pairs": n,
        "pairs_nan": int((~ok).sum()),
        "mean_cs": round(float(np.mean(np.r_[n1, n2])) if n else 0.0, 3),
        "score_lookups": int(n_lookups),
        "label_seconds": round(t_label, 4),
        "label_seconds_per_pair": t_label / max(1, n),
    }
    if ok.any():
        q = np.percentile(lab[ok], [5, 50, 95])
        counts, edges = np.histogram(lab[ok], bins=p.hist_bins)
        stats.update(
            label_mean=round(float(lab[ok].mean()), 5),
            label_std=round(float(lab[ok].std()), 5),
            label_p05=round(float(q[0]), 5),
            label_p50=round(float(q[1]), 5),
            label_p95=round(float(q[2]), 5),
            label_hist_counts=counts.tolist(),
            label_hist_edges=[round(float(e), 5) for e in edges],
        )
    split = table.column("split").to_numpy(zero_copy_only=False)
    for s in (*SPLITS, GIVEN_SPLIT):
        stats[f"split_{s}"] = int((split == s).sum())
    src = table.column("source").to_numpy(zero_copy_only=False)
    for s in sorted({x for x in src if x is not None}):
        stats[f"pairs_{s}"] = int((src == s).sum())
        m = (src == s) & ok
        if m.any():
            stats[f"label_mean_{s}"] = round(float(lab[m].mean()), 5)
    for stage in ("select", "pairs", "score", "embed"):  # seconds per labelled pair, by stage
        if stage not in ctx.upstream:
            continue
        secs = ctx.upstream[stage].manifest.get("timings", {}).get("total_seconds")
        if secs is not None and n:
            stats[f"{stage}_seconds_per_pair"] = float(secs) / n
    return stats


def origin_report(
    ctx: StageContext,
    p: LabelParams,
    table: pa.Table,
    labels: np.ndarray,
    views: dict[str, np.ndarray],
    lam: np.ndarray | None,
) -> dict[str, Any]:
    """``files/origin.json`` of given pairs: per evaluation set, Spearman x100 of the labels in
    the "all" and "mean" conventions and of every view (the contextual model's: each term alone,
    without each term, the other similarities, the encoder's cosine; and the baselines); the λ
    recovered and the run's config."""
    ds = table.column("dataset").to_pylist()
    sub = table.column("subset").to_pylist()
    gold = table.column("gold").to_numpy(zero_copy_only=False).astype(np.float64)
    sets = np.asarray([report_name(d, s) for d, s in zip(ds, sub, strict=True)], dtype=object)
    subs = np.asarray(sub, dtype=object)
    base = tfidf_cosine(table.column("s1").to_pylist(), table.column("s2").to_pylist())
    views = dict(views)
    views["tfidf_cosine"] = base
    if "generator" in ctx.upstream:
        views["backbone_cosine"] = backbone_cosine(
            ctx, table.column("s1").to_pylist(), table.column("s2").to_pylist()
        )
    out: dict[str, Any] = {}
    for name in sorted(set(sets)):
        m = sets == name
        s_all, s_mean = spearman_conventions(labels[m], gold[m], subs[m])
        r: dict[str, Any] = {
            "spearman_all": _r(s_all),
            "spearman_mean": _r(s_mean),
            "n_pairs": int(m.sum()),
            "n_nan": int(np.isnan(labels[m]).sum()),
            "views": {},
        }
        for view, pred in views.items():
            if np.all(np.isnan(pred[m])):
                continue
            a, b = spearman_conventions(pred[m], gold[m], subs[m])
            r["views"][view] = {"spearman_all": _r(a), "spearman_mean": _r(b)}
        out[name] = r
    return {
        "datasets": out,
        "lambdas": None if lam is None else dict(zip(TERMS, map(float, lam), strict=True)),
        "config": {"label": p.model_dump(mode="json"), **ctx.all_params},
    }


def origin_stats(report: dict[str, Any]) -> dict[str, Any]:
    """The Origin report's figures as flat stats: Spearman (both conventions) and pairs per
    evaluation set, and each view's Spearman in the "all" convention."""
    stats: dict[str, Any] = {}
    for ds, r in report["datasets"].items():
        stats[f"spearman_all.{ds}"] = r["spearman_all"]
        stats[f"spearman_mean.{ds}"] = r["spearman_mean"]
        stats[f"n_pairs.{ds}"] = r["n_pairs"]
        for view, v in r.get("views", {}).items():
            stats[f"spearman_all.{ds}.{view}"] = v["spearman_all"]
    return stats


def plot_labels(ctx: StageContext, table: pa.Table, given: bool) -> None:
    """``files/label_hist.png``: the labels' histogram per source and, for given pairs, the
    labels against the gold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lab = table.column("label").to_numpy(zero_copy_only=False).astype(np.float64)
    src = table.column("source").to_numpy(zero_copy_only=False)
    ok = np.isfinite(lab)
    ncols = 2 if given else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6 * ncols, 4), squeeze=False)
    ax = axes[0, 0]
    for s in sorted({x for x in src if x is not None}):
        m = ok & (src == s)
        if m.any():
            ax.hist(lab[m], bins=30, alpha=0.6, label=f"{s} ({int(m.sum())})")
    ax.set_xlabel("Origin label (Eq. 4 cosine)")
    ax.set_ylabel("pairs")
    ax.legend()
    if given:
        gold = table.column("gold").to_numpy(zero_copy_only=False).astype(np.float64)
        axes[0, 1].scatter(gold[ok], lab[ok], s=4, alpha=0.4)
        axes[0, 1].set_xlabel("gold similarity")
        axes[0, 1].set_ylabel("Origin label")
    fig.tight_layout()
    fig.savefig(ctx.files_dir / "label_hist.png", dpi=100)
    plt.close(fig)


def _r(x: float) -> float | None:
    return None if not np.isfinite(x) else round(float(x), 2)


def backbone_cosine(ctx: StageContext, a: list[str | None], b: list[str | None]) -> np.ndarray:
    """Cosine of the generator backbone's mean-pooled sentence states: how much the contexts add
    over the model's own view of the two sentences."""
    from ctxsim.scores.loading import load_scorer

    scorer, _ = load_scorer(ctx.input("generator").files_dir, ctx.device)
    texts = sorted({t for t in (*a, *b) if t})
    emb = scorer.embed(texts)
    emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    row = {t: i for i, t in enumerate(texts)}
    out = np.full(len(a), np.nan)
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        if x and y:
            out[k] = float(emb[row[x]] @ emb[row[y]])
    return out
