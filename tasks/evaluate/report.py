"""The evaluation report: ``report.md`` in the paper's 7-set layout, scatter plots and
CLRCMD-style token heatmaps."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.models.evaluation import metrics as M
from ctxsim.models.evaluation.similarity import (
    rcmd_contributions,
)
from ctxsim.readers.sts import StsSet, dataset_key
from ctxsim.tasks.evaluate.encoders import token_vectors

SEVEN = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSb.test", "SICK-R.test"]
SEVEN_LABELS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSb", "SICK-R"]


def _have(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _fmt(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def render_report(result: dict[str, Any], per_system: dict, hard_idx: dict) -> str:
    """Markdown: the 7-set table (Sun et al. Table 2 layout), hard splits, iSTS, bootstrap."""
    lines = [f"# Evaluation of `{result['model']}`", ""]
    for w in result.get("warnings", []):
        lines += [f"> {w}", ""]
    for conv in ("spearman_all", "spearman_mean"):
        if not any(_have(per.get(k, {}).get(conv)) for per in per_system.values() for k in SEVEN):
            continue  # none of the seven sets was evaluated (a domain run): no empty table
        lines += [
            f"## STS, Spearman x100 ({conv.replace('_', ' ')})",
            "",
            "| system | similarity | " + " | ".join(SEVEN_LABELS) + " | Avg |",
            "|" + " --- |" * (len(SEVEN_LABELS) + 3),
        ]
        for (system, sim), per in per_system.items():
            vals = [per.get(k, {}).get(conv) for k in SEVEN]
            have = [v for v in vals if v is not None and not math.isnan(v)]
            avg = float(np.mean(have)) if have else None
            lines.append(
                f"| {system} | {sim} | " + " | ".join(_fmt(v) for v in vals) + f" | {_fmt(avg)} |"
            )
        lines.append("")
    others = sorted({k for per in per_system.values() for k in per} - set(SEVEN))
    if others:
        lines += [
            "## Other sets (Spearman all x100)",
            "",
            "| system | similarity | " + " | ".join(others) + " |",
            "|" + " --- |" * (len(others) + 2),
        ]
        for (system, sim), per in per_system.items():
            lines.append(
                f"| {system} | {sim} | "
                + " | ".join(_fmt(per.get(k, {}).get("spearman_all")) for k in others)
                + " |"
            )
        lines.append("")
    if hard_idx:
        lines += [
            "## Hard splits (Wieting et al. 2020), Spearman x100",
            "",
            "| system | similarity | "
            + " | ".join(f"{k} (n={len(v)})" for k, v in hard_idx.items())
            + " |",
            "|" + " --- |" * (len(hard_idx) + 2),
        ]
        lines += [*_hard_rows(result), ""]
    if result.get("ists"):
        lines += [
            "## iSTS 2016 alignment F1 x100",
            "",
            "| domain | similarity | F1 (equi gold) | P | R | F1 (raw gold) |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for dom, e in result["ists"].items():
            for sim, v in e.items():
                lines.append(
                    f"| {dom} | {sim} | {_fmt(v['f1_ali_equi'])} | {_fmt(v['precision_equi'])}"
                    f" | {_fmt(v['recall_equi'])} | {_fmt(v['f1_ali'])} |"
                )
        lines.append("")
    if result.get("bootstrap"):
        lines += _bootstrap_lines(result["bootstrap"])
    if per_system:  # the plots are drawn from the STS sets: none without them
        lines += [
            "Plots: `scatter.png` (surrogate cosine vs gold), `heatmaps.png` (RCMD token-pair "
            "contributions).",
            "",
        ]
    return "\n".join(lines)


def _bootstrap_lines(bootstrap: dict[str, Any]) -> list[str]:
    """The paired intervals' section: a row per comparison and set, then a blank line."""
    lines = [
        "## Paired BCa bootstrap: surrogate minus baseline (Spearman x100)",
        "",
        "| comparison | set | delta | CI low | CI high | significant |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for comp, cis in bootstrap.items():
        for key, ci in cis.items():
            lines.append(
                f"| {comp} | {key} | {_fmt(ci['delta'])} | {_fmt(ci['ci_low'])} | "
                f"{_fmt(ci['ci_high'])} | {ci['significant']} |"
            )
    return [*lines, ""]


def _hard_rows(result: dict[str, Any]) -> list[str]:
    out = []
    if result.get("hard"):
        out.append(
            "| surrogate | cosine | "
            + " | ".join(_fmt(v["spearman"]) for v in result["hard"].values())
            + " |"
        )
    for system, b in result.get("baselines", {}).items():
        for sim, hs in b.get("hard", {}).items():
            out.append(
                f"| {system} | {sim} | "
                + " | ".join(_fmt(v["spearman"]) for v in hs.values())
                + " |"
            )
    return out


def write_plots(out: Path, model, sets: list[StsSet], pred: dict[str, np.ndarray]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[StsSet]] = {}
    for s in sets:
        groups.setdefault(dataset_key(s), []).append(s)
    n = len(groups)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (key, ss) in zip(axes.flat, groups.items(), strict=False):
        g = np.concatenate([s.gold for s in ss])
        p = np.concatenate([pred[s.name] for s in ss]) if pred else np.zeros_like(g)
        ax.scatter(g, p, s=3, alpha=0.3)
        ax.set_title(f"{key} ρ={M.spearman(p, g):.1f}", fontsize=9)
        ax.set_xlabel("gold", fontsize=8)
        ax.set_ylabel("cosine", fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(out / "scatter.png", dpi=110)
    plt.close(fig)

    # heatmaps: positive / neutral / negative pair, short sentences, from STS13 when present
    src = [s for s in sets if s.dataset == "STS13"] or sets
    cands = [
        (s.gold[i], s.s1[i], s.s2[i])
        for s in src
        for i in range(len(s))
        if len(s.s1[i].split()) <= 12 and len(s.s2[i].split()) <= 12
    ]
    if not cands:
        return
    golds = np.array([c[0] for c in cands])
    hi, lo = golds.max(), golds.min()
    picks = [
        ("positive", int(np.argmax(golds))),
        ("neutral", int(np.argmin(np.abs(golds - (hi + lo) / 2)))),
        ("negative", int(np.argmin(golds))),
    ]
    import torch

    fig, axes = plt.subplots(1, 3, figsize=(16, 5.5))
    for ax, (label, k) in zip(axes, picks, strict=True):
        g, a, b = cands[k]
        x, t1, _ = token_vectors(model, a)
        y, t2, _ = token_vectors(model, b)
        c = rcmd_contributions(torch.from_numpy(x), torch.from_numpy(y)).numpy()
        ax.imshow(c, cmap="Blues")
        ax.set_yticks(range(len(t1)), t1, fontsize=7)
        ax.set_xticks(range(len(t2)), t2, fontsize=7, rotation=90)
        ax.set_title(f"{label} (gold {g:.2f}, RCMD {c.sum():.2f})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "heatmaps.png", dpi=110)
    plt.close(fig)
