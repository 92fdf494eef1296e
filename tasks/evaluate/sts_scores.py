"""The STS figures of ``evaluate_model``: a table row per system, similarity and set (subsets
pooled per dataset, then each set), Wieting et al.'s hard splits, the per-dataset blocks with the
seven-set averages, and the paired BCa intervals of the surrogate's differences."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxsim.models.evaluation import metrics as M
from ctxsim.readers.sts import StsSet, dataset_key
from ctxsim.tasks.evaluate.report import SEVEN


def group_scores(sets: list[StsSet], preds: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    groups: dict[str, dict[str, tuple]] = {}
    for s in sets:
        groups.setdefault(dataset_key(s), {})[s.subset] = (preds[s.name], s.gold)
    return {k: M.sts_scores(v) for k, v in groups.items()}


def avg7(per: dict[str, dict[str, float]]) -> dict[str, Any]:
    have = [k for k in SEVEN if k in per]
    if not have:
        return {}
    return {
        "spearman_all": float(np.mean([per[k]["spearman_all"] for k in have])),
        "spearman_mean": float(np.mean([per[k]["spearman_mean"] for k in have])),
        "n_sets": len(have),
        "sets": have,
    }


#: (system, similarity) -> STS set name -> predicted similarity of each pair
Preds = dict[tuple[str, str], dict[str, np.ndarray]]
#: (system, similarity) -> dataset key (STS12, STSb, ...) -> scores of sts_scores
PerSystem = dict[tuple[str, str], dict[str, dict[str, float]]]


def table_row(
    dataset: str, subset: str, sim: str, system: str, rho: float, rho_mean: float, r: float, n: int
) -> dict[str, Any]:
    """One row of the evaluate stage's table (one system and similarity on one set)."""
    return {
        "dataset": dataset,
        "subset": subset,
        "similarity": sim,
        "system": system,
        "spearman_all": rho,
        "spearman_mean": rho_mean,
        "pearson": r,
        "n_pairs": n,
    }


def sts_rows(sets: list[StsSet], preds: Preds) -> tuple[list[dict[str, Any]], PerSystem]:
    """Per system and similarity: a row per dataset (its subsets pooled) then one per set."""
    rows: list[dict[str, Any]] = []
    per_system: PerSystem = {}
    for (system, sim), p in preds.items():
        per = group_scores(sets, p)
        per_system[(system, sim)] = per
        for key, sc in per.items():
            rows.append(
                table_row(
                    key,
                    "all",
                    sim,
                    system,
                    sc["spearman_all"],
                    sc["spearman_mean"],
                    sc["pearson_all"],
                    sc["n_pairs"],
                )
            )
        for s in sets:
            rho, r = M.spearman(p[s.name], s.gold), M.pearson(p[s.name], s.gold)
            rows.append(table_row(dataset_key(s), s.subset, sim, system, rho, rho, r, len(s)))
    return rows, per_system


def hard_splits_rows(
    sets: list[StsSet],
    preds: Preds,
    quantile: float,
    high_gold: tuple[float, float],
    low_gold: tuple[float, float],
    rows: list[dict[str, Any]],
    result: dict[str, Any],
) -> dict[str, np.ndarray]:
    """Wieting et al. (2020) hard splits over the pooled STS12-16 pairs (all sets when no STS12-16
    is present): rows appended to ``rows``, the surrogate's (cosine) in ``result["hard"]`` and each
    baseline's under its ``result["baselines"]`` entry. Returns the splits' pair indices."""
    pool = [s for s in sets if s.dataset in ("STS12", "STS13", "STS14", "STS15", "STS16")] or sets
    if not pool:
        return {}
    a1 = [x for s in pool for x in s.s1]
    a2 = [x for s in pool for x in s.s2]
    gold = np.array([x for s in pool for x in s.gold])
    hard_idx = M.hard_splits(a1, a2, gold, quantile, high_gold, low_gold)
    for (system, sim), p in preds.items():
        pp = np.concatenate([p[s.name] for s in pool])
        hs = {}
        for split, ix in hard_idx.items():
            hs[split] = {
                "spearman": M.spearman(pp[ix], gold[ix]),
                "pearson": M.pearson(pp[ix], gold[ix]),
                "n_pairs": int(len(ix)),
            }
            rho = hs[split]["spearman"]
            rows.append(
                table_row("hard", split, sim, system, rho, rho, hs[split]["pearson"], int(len(ix)))
            )
        if system == "surrogate" and sim == "cosine":
            result["hard"] = hs
        elif system != "surrogate":
            result["baselines"].setdefault(system, {}).setdefault("hard", {})[sim] = hs
    return hard_idx


def dataset_blocks(per_system: PerSystem, result: dict[str, Any]) -> None:
    """Per-dataset scores and the seven-set averages: the surrogate's at the top of ``result``
    (cosine under ``datasets``, RCMD under ``rcmd``), each baseline's under its entry."""
    for (system, sim), per in per_system.items():
        block = {k: {**v, "similarity": sim} for k, v in per.items()}
        if system == "surrogate":
            result["datasets" if sim == "cosine" else "rcmd"] = block
            result.setdefault("avg7", {})[sim] = avg7(per)
        else:
            b = result["baselines"].setdefault(system, {})
            b.setdefault("datasets", {})[sim] = block
            b.setdefault("avg7", {})[sim] = avg7(per)


def bootstrap_intervals(
    sets: list[StsSet], preds: Preds, resamples: int, confidence: float, seed: int
) -> dict[str, dict[str, Any]]:
    """Paired BCa intervals of the Spearman difference: the surrogate (cosine) minus each
    baseline, per dataset; keyed ``surrogate.cosine-vs-<system>.<similarity>``."""
    out: dict[str, dict[str, Any]] = {}
    ref = preds[("surrogate", "cosine")]
    gold_by_key: dict[str, list[StsSet]] = {}
    for s in sets:
        gold_by_key.setdefault(dataset_key(s), []).append(s)
    for (system, sim), p in preds.items():
        if system == "surrogate":
            continue
        cis = {}
        for key, ss in gold_by_key.items():
            g = np.concatenate([s.gold for s in ss])
            a = np.concatenate([ref[s.name] for s in ss])
            b = np.concatenate([p[s.name] for s in ss])
            cis[key] = M.bootstrap_diff_ci(g, a, b, "spearman", resamples, confidence, seed)
        out[f"surrogate.cosine-vs-{system}.{sim}"] = cis
    return out
