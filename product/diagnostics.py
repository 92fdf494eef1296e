"""Label diagnostics: is the generated dataset usable, before anyone trains on it?

Four checks the label stage reports (stats, ``files/diagnostics.json``, ``files/report.md``
which the pipeline publishes as a Prefect markdown artifact, and two plots):

* the label histogram per pair-mining mode (knn / shared / random / given);
* agreement with a reference encoder from the config (Spearman x100 and a scatter plot): the
  TF-IDF cosine needs no weights (the quickstart), a sentence-transformers model the registry
  names (``minilm``) needs its packaged weights, ``none`` skips it;
* how concentrated the labels are: the share within ``near_one_tol`` of 1.0 (Eq. 4's cosine of
  raw log-probabilities sits there: every context's own likelihood dominates both vectors) and
  the width of the narrowest band that holds most (more than half) of the labels; a warning
  when most labels are near 1.0 or that band is narrower than ``warn_band_width``;
* per-stage yields: retrieved chunks, screened and selected contexts per query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def narrowest_band(values: np.ndarray, share: float = 0.5) -> tuple[float, float, float]:
    """(width, low, high) of the narrowest interval holding more than ``share`` of the values."""
    v = np.sort(values[np.isfinite(values)])
    if len(v) == 0:
        return float("nan"), float("nan"), float("nan")
    m = min(len(v), int(np.floor(share * len(v))) + 1)  # "more than share"
    widths = v[m - 1 :] - v[: len(v) - m + 1]
    i = int(np.argmin(widths))
    return float(widths[i]), float(v[i]), float(v[i + m - 1])


def concentration(
    labels: np.ndarray, near_one_tol: float, warn_band_width: float
) -> tuple[dict[str, Any], list[str]]:
    """Share near 1.0 and the narrowest band of most labels, with the warnings they call for."""
    lab = np.asarray(labels, np.float64)
    ok = lab[np.isfinite(lab)]
    warnings: list[str] = []
    if len(ok) == 0:
        return {"near_one_share": None, "band_width": None}, ["no finite labels"]
    near = float(np.mean(np.abs(ok - 1.0) <= near_one_tol))
    width, lo, hi = narrowest_band(ok)
    out = {
        "near_one_share": round(near, 4),
        "near_one_tol": near_one_tol,
        "band_width": round(width, 6),
        "band_low": round(lo, 6),
        "band_high": round(hi, 6),
        "warn_band_width": warn_band_width,
    }
    if near > 0.5:
        warnings.append(
            f"{near:.0%} of the labels are within {near_one_tol:g} of 1.0: the vectors of Eq. 4 "
            "are dominated by each context's own likelihood (try score.pmi: [left] with only "
            "the left term, as configs/books.yaml does)"
        )
    if width < warn_band_width:
        warnings.append(
            f"most labels sit in [{lo:.6g}, {hi:.6g}], a band {width:.3g} wide, narrower than "
            f"label.warn_band_width={warn_band_width:g}: they hardly separate pairs"
        )
    return out, warnings


def histograms_by_mode(
    labels: np.ndarray, modes: np.ndarray, bins: int
) -> dict[str, dict[str, Any]]:
    """Counts over common edges per pair-mining mode (so the modes compare bin by bin)."""
    lab = np.asarray(labels, np.float64)
    ok = np.isfinite(lab)
    if not ok.any():
        return {}
    lo, hi = float(lab[ok].min()), float(lab[ok].max())
    edges = np.linspace(lo, hi if hi > lo else lo + 1e-9, bins + 1)
    out: dict[str, dict[str, Any]] = {}
    for mode in sorted({m for m in modes if m is not None}):
        m = ok & (modes == mode)
        if not m.any():
            continue
        counts, _ = np.histogram(lab[m], bins=edges)
        out[str(mode)] = {
            "n": int(m.sum()),
            "mean": round(float(lab[m].mean()), 5),
            "std": round(float(lab[m].std()), 5),
            "counts": counts.tolist(),
        }
    if out:
        out["_edges"] = {"edges": [round(float(e), 6) for e in edges]}  # type: ignore[dict-item]
    return out


def reference_similarity(
    name: str, s1: list[str | None], s2: list[str | None], device: str = "cpu"
) -> np.ndarray:
    """The reference encoder's cosine per pair: ``tfidf`` (no weights) or a sentence-
    transformers model by registry name or path (its weights must be installed)."""
    if name == "tfidf":
        from ctxsim.models.training.objectives import tfidf_cosine

        return tfidf_cosine(s1, s2)
    a = [x or "" for x in s1]
    b = [x or "" for x in s2]
    from ctxsim.models.encoders import encode, load_encoder

    model = load_encoder(name, None, device, model_key="label.reference_encoder")
    texts = sorted(set(a) | set(b))
    emb = encode(model, texts, 32, block=len(texts))  # one call: sentence-transformers' default
    row = {t: i for i, t in enumerate(texts)}
    return np.asarray([float(emb[row[x]] @ emb[row[y]]) for x, y in zip(a, b, strict=True)])


def agreement(labels: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """Spearman x100 between the labels and the reference encoder's similarities."""
    from scipy.stats import spearmanr

    lab = np.asarray(labels, np.float64)
    ref = np.asarray(reference, np.float64)
    ok = np.isfinite(lab) & np.isfinite(ref)
    rho = float("nan")
    if ok.sum() >= 3 and np.ptp(lab[ok]) > 0 and np.ptp(ref[ok]) > 0:
        rho = float(spearmanr(lab[ok], ref[ok]).statistic) * 100
    return {"spearman": None if not np.isfinite(rho) else round(rho, 2), "n": int(ok.sum())}


def per_query_counts(query_ids: np.ndarray, all_queries: np.ndarray) -> dict[str, float]:
    """Mean, median, min, max of rows per query (queries without rows count as 0)."""
    q = np.asarray(all_queries, np.int64)
    if len(q) == 0:
        return {"mean": 0.0, "median": 0.0, "min": 0, "max": 0, "zero": 0}
    pos = np.searchsorted(np.sort(q), np.asarray(query_ids, np.int64))
    counts = np.bincount(np.clip(pos, 0, len(q) - 1), minlength=len(q))[: len(q)]
    return {
        "mean": round(float(counts.mean()), 3),
        "median": float(np.median(counts)),
        "min": int(counts.min()),
        "max": int(counts.max()),
        "zero": int((counts == 0).sum()),
    }


def plot_diagnostics(
    out_dir: Path,
    labels: np.ndarray,
    modes: np.ndarray,
    reference: np.ndarray | None,
    reference_name: str,
    bins: int,
) -> list[str]:
    """label_by_mode.png and (with a reference) label_vs_reference.png; returns the names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lab = np.asarray(labels, np.float64)
    ok = np.isfinite(lab)
    names = []
    fig, ax = plt.subplots(figsize=(6, 4))
    edges = np.linspace(lab[ok].min(), max(lab[ok].max(), lab[ok].min() + 1e-9), bins + 1)
    for mode in sorted({m for m in modes if m is not None}):
        m = ok & (modes == mode)
        if m.any():
            ax.hist(lab[m], bins=edges, histtype="step", linewidth=1.5, label=f"{mode} ({m.sum()})")
    ax.set_xlabel("Origin label (Eq. 4)")
    ax.set_ylabel("pairs")
    ax.set_title("labels per pair-mining mode")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "label_by_mode.png", dpi=100)
    plt.close(fig)
    names.append("label_by_mode.png")
    if reference is not None:
        fig, ax = plt.subplots(figsize=(5, 4))
        m = ok & np.isfinite(reference)
        ax.scatter(reference[m], lab[m], s=5, alpha=0.5)
        ax.set_xlabel(f"reference: {reference_name} cosine")
        ax.set_ylabel("Origin label (Eq. 4)")
        fig.tight_layout()
        fig.savefig(out_dir / "label_vs_reference.png", dpi=100)
        plt.close(fig)
        names.append("label_vs_reference.png")
    return names


def report_markdown(diag: dict[str, Any]) -> str:
    """The diagnostics as Markdown (the label stage's report and its Prefect artifact)."""
    lines = ["# Label diagnostics", ""]
    for w in diag.get("warnings", []):
        lines.append(f"> **Warning:** {w}")
    if diag.get("warnings"):
        lines.append("")
    c = diag.get("concentration", {})
    lines += [
        "## Concentration",
        "",
        f"- share within {c.get('near_one_tol')} of 1.0: {c.get('near_one_share')}",
        f"- narrowest band holding most labels: [{c.get('band_low')}, {c.get('band_high')}] "
        f"(width {c.get('band_width')}; warning below {c.get('warn_band_width')})",
        "",
        "## Labels per pair-mining mode",
        "",
        "| mode | pairs | mean | std |",
        "| --- | --- | --- | --- |",
    ]
    for mode, h in diag.get("by_mode", {}).items():
        if mode != "_edges":
            lines.append(f"| {mode} | {h['n']} | {h['mean']} | {h['std']} |")
    sep = diag.get("separation")
    if sep:
        lines += [
            "",
            f"Mined ({'/'.join(MINED_MODES)}) minus random: {sep['difference']:+.4f}, bootstrap "
            f"95% CI [{sep['ci_low']:+.4f}, {sep['ci_high']:+.4f}], Cohen's d "
            f"{sep['cohens_d']:+.2f}",
        ]
    ref = diag.get("reference", {})
    lines += ["", "## Agreement with the reference encoder", ""]
    if ref.get("encoder", "none") == "none":
        lines.append("- none configured (label.reference_encoder)")
    else:
        lines.append(
            f"- {ref['encoder']}: Spearman x100 = {ref.get('spearman')} on {ref['n']} pairs"
        )
    lines += ["", "## Yields per query", "", "| stage | mean | median | min | max | zero |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for stage, y in diag.get("yields", {}).items():
        lines.append(
            f"| {stage} | {y['mean']} | {y['median']} | {y['min']} | {y['max']} | {y['zero']} |"
        )
    cont = diag.get("contamination")
    lines += ["", "## Contamination (STS test sets)", ""]
    if not cont or cont.get("skipped"):
        lines.append(f"- not checked: {(cont or {}).get('skipped', 'no STS directory')}")
    else:
        lines.append(
            f"- {cont['contaminated']} of {cont['checked_sentences']} sentences match a test "
            f"sentence ({cont['exact']} exact, {cont['ngram']} n-gram Jaccard >= "
            f"{cont['threshold']}) in {len(cont['test_files'])} test files"
        )
    return "\n".join(lines) + "\n"


#: pair-mining modes that should sit above random pairs (tasks/pairs.py)
MINED_MODES = ("knn", "shared")
#: |Spearman x100| with the reference encoder below which labels are said to barely agree
REFERENCE_NEAR_ZERO = 30.0


def mean_difference_ci(
    a: np.ndarray, b: np.ndarray, resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float, float]:
    """mean(a) - mean(b), its percentile bootstrap interval, and Cohen's d (pooled SD)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    rng = np.random.default_rng(seed)
    diffs = np.array(
        [rng.choice(a, len(a)).mean() - rng.choice(b, len(b)).mean() for _ in range(resamples)]
    )
    lo, hi = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    pooled = np.sqrt(
        ((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / max(len(a) + len(b) - 2, 1)
    )
    d = float((a.mean() - b.mean()) / pooled) if pooled > 0 else float("nan")
    return float(a.mean() - b.mean()), float(lo), float(hi), d


def separation(labels: np.ndarray, sources: np.ndarray, seed: int = 0) -> dict[str, Any] | None:
    """Mined pairs (knn / shared) against random ones: counts, means, the difference of means
    with its bootstrap 95% CI and Cohen's d; None with fewer than 5 pairs of either kind."""
    lab = np.asarray(labels, np.float64)
    src = np.asarray(sources, dtype=object)
    ok = np.isfinite(lab)
    mined = ok & np.isin(src, MINED_MODES)
    rand = ok & (src == "random")
    if mined.sum() < 5 or rand.sum() < 5:
        return None
    diff, lo, hi, d = mean_difference_ci(lab[mined], lab[rand], seed=seed)
    return {
        "mined_n": int(mined.sum()),
        "mined_mean": float(lab[mined].mean()),
        "random_n": int(rand.sum()),
        "random_mean": float(lab[rand].mean()),
        "difference": diff,
        "ci_low": lo,
        "ci_high": hi,
        "cohens_d": d,
    }


def trust_warnings(
    labels: np.ndarray, sources: np.ndarray, reference_spearman: float | None, seed: int = 0
) -> list[str]:
    """Warnings a newcomer needs before trusting the labels: mined pairs not separated from
    random ones (the difference of means with a bootstrap 95% CI whose lower end is not above
    0), and labels that barely agree with the reference encoder. The label stage emits them
    (stats ``diag_warnings``, its log); export adds them only for a label artefact made before
    it did (no ``diag_separation`` stat)."""
    return warnings_for(separation(labels, sources, seed), reference_spearman)


def warnings_for(sep: dict[str, Any] | None, reference_spearman: float | None) -> list[str]:
    """trust_warnings from a computed ``separation`` and the reference Spearman x100."""
    out = []
    if sep is not None and sep["ci_low"] <= 0:
        out.append(
            f"mined pairs ({'/'.join(MINED_MODES)}, n={sep['mined_n']}, mean "
            f"{sep['mined_mean']:.3f}) are not separated from random pairs (n="
            f"{sep['random_n']}, mean {sep['random_mean']:.3f}): difference "
            f"{sep['difference']:+.3f}, 95% CI [{sep['ci_low']:+.3f}, {sep['ci_high']:+.3f}], "
            f"Cohen's d {sep['cohens_d']:+.2f}; the labels may not follow similarity"
        )
    if reference_spearman is not None and abs(reference_spearman) < REFERENCE_NEAR_ZERO:
        out.append(
            f"the labels barely agree with the reference encoder (Spearman x100 "
            f"{reference_spearman:.1f}, |rho| below {REFERENCE_NEAR_ZERO:.0f})"
        )
    return out
