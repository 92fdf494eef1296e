"""``evaluate_model``: every STS set found, every system and similarity, paired BCa intervals,
Wieting et al. (2020) hard splits and iSTS F1, for any sentence-transformers model."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.models import metrics as M
from ctxsim.models.ists import (
    equi_filter,
    ists_f1,
)
from ctxsim.models.objectives import tfidf_cosine
from ctxsim.readers.domain import discover_domain
from ctxsim.readers.sts import StsSet, dataset_key, discover, sample_pairs
from ctxsim.tasks.evaluate.domain import domain_report, evaluate_domain
from ctxsim.tasks.evaluate.encoders import (
    backbone_vectors,
    dynamax_scores,
    load_st,
    score_pairs,
    wordllama_vectors,
)
from ctxsim.tasks.evaluate.ists import ists_system
from ctxsim.tasks.evaluate.report import SEVEN, render_report, write_plots

DATA_HINT = (
    "no STS data found at {where}: put the STS sets there (uniform TSV "
    "<DATASET>.<subset>.tsv or the organisers' files; `ctxsim data download sts DIR` fetches "
    "them on a connected machine) and set evaluate.sts_dir"
)


def _nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_nan_to_none(v) for v in x]
    return x


def _group_scores(sets: list[StsSet], preds: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    groups: dict[str, dict[str, tuple]] = {}
    for s in sets:
        groups.setdefault(dataset_key(s), {})[s.subset] = (preds[s.name], s.gold)
    return {k: M.sts_scores(v) for k, v in groups.items()}


def _avg7(per: dict[str, dict[str, float]]) -> dict[str, Any]:
    have = [k for k in SEVEN if k in per]
    if not have:
        return {}
    return {
        "spearman_all": float(np.mean([per[k]["spearman_all"] for k in have])),
        "spearman_mean": float(np.mean([per[k]["spearman_mean"] for k in have])),
        "n_sets": len(have),
        "sets": have,
    }


def _systems(model_path: str, baselines: dict[str, str | None]) -> dict[str, str | None]:
    return {"surrogate": model_path, **baselines}


def evaluate_model(
    model_path: str | Path,
    sts_dir: str | Path | None,
    ists_dir: str | Path | None = None,
    *,
    baselines: dict[str, str | None] | None = None,
    similarities: Sequence[str] = ("cosine", "rcmd"),
    device: str = "cpu",
    batch_size: int = 64,
    max_seq_length: int = 128,
    max_pairs_per_subset: int | None = None,
    bootstrap_resamples: int = 1000,
    confidence: float = 0.95,
    hard_quantile: float = 0.2,
    hard_high_gold: tuple[float, float] = (4.0, 5.0),
    hard_low_gold: tuple[float, float] = (0.0, 1.0),
    ists_remove_oppo: bool = False,
    out_dir: str | Path | None = None,
    seed: int = 0,
    logger: Any = None,
    paths_relative_to: str | Path | None = None,
) -> dict[str, Any]:
    """Evaluate a sentence-transformers model directory; returns the JSON-able result.

    ``baselines`` maps a system name to a model path (cosine/RCMD like the surrogate), ``tfidf``
    (any value) to TF-IDF cosine of each pair (models.objectives.tfidf_cosine), or to None
    for ``dynamax`` (value None: word vectors from wordllama when installed, else the surrogate's
    input embeddings; "backbone" value: that model's input embeddings). With ``out_dir``, plots,
    ``report.md`` and ``results.json`` are written there. Model paths under
    ``paths_relative_to`` (the artefact root, inside a run) are reported relative to it, so the
    same run on another root writes the same report.
    """
    import logging

    log = logger or logging.getLogger("ctxsim.evaluate")
    baselines = dict(baselines or {})
    model_path = str(model_path)

    def shown(path: str) -> str:
        if paths_relative_to is not None:
            try:
                return str(Path(path).resolve().relative_to(Path(paths_relative_to).resolve()))
            except ValueError:
                pass
        return path

    result: dict[str, Any] = {
        "model": shown(model_path),
        "conventions": {
            "spearman_all": "x100, subsets of a year concatenated (SimCSE/CLRCMD)",
            "spearman_mean": "x100, mean over subsets (SentEval/DynaMax)",
        },
        "datasets": {},
        "rcmd": {},
        "ists": {},
        "hard": {},
        "baselines": {},
        "bootstrap": {},
    }
    sets: list[StsSet] = []
    if sts_dir is not None and Path(sts_dir).expanduser().is_dir():
        sets = [
            sample_pairs(s, max_pairs_per_subset, seed)
            for s in discover(Path(sts_dir).expanduser())
        ]
    pair_sets, qa_sets = discover_domain(sts_dir) if sts_dir is not None else ([], [])
    if not sets and not pair_sets and not qa_sets:
        msg = DATA_HINT.format(where=sts_dir)
        log.warning(msg)
        result["warnings"] = [msg]

    surrogate = load_st(model_path, device, max_seq_length)
    preds: dict[tuple[str, str], dict[str, np.ndarray]] = {}  # (system, similarity) -> set -> pred
    encoders: dict[str, Any] = {}  # the domain tasks score every system side by side
    for system, path in _systems(model_path, baselines).items():
        if system in ("dynamax", "tfidf"):
            continue
        model = surrogate if system == "surrogate" else load_st(path, device, max_seq_length)
        if pair_sets or qa_sets:
            encoders[system] = model
        for s in sets:
            sc = score_pairs(model, s.s1, s.s2, batch_size, similarities)
            for sim, v in sc.items():
                preds.setdefault((system, sim), {})[s.name] = v
        log.info("evaluate: scored %d sets with %s", len(sets), system)
    if "dynamax" in baselines and sets:
        src = baselines["dynamax"]
        try:
            tokenize, vec = (
                wordllama_vectors()
                if src in (None, "wordllama")
                else backbone_vectors(load_st(src, device, max_seq_length))
            )
            result["dynamax_vectors"] = "wordllama" if src in (None, "wordllama") else shown(src)
        except ImportError:
            tokenize, vec = backbone_vectors(surrogate)
            result["dynamax_vectors"] = "surrogate input embeddings (wordllama not installed)"
        preds[("dynamax", "dynamax")] = {
            s.name: dynamax_scores(s.s1, s.s2, tokenize, vec) for s in sets
        }

    if "tfidf" in baselines and sets:  # the no-model reference (TF-IDF cosine of each pair)
        preds[("tfidf", "tfidf")] = {s.name: tfidf_cosine(s.s1, s.s2) for s in sets}

    rows: list[dict[str, Any]] = []
    per_system: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for (system, sim), p in preds.items():
        per = _group_scores(sets, p)
        per_system[(system, sim)] = per
        for key, sc in per.items():
            rows.append(
                {
                    "dataset": key,
                    "subset": "all",
                    "similarity": sim,
                    "system": system,
                    "spearman_all": sc["spearman_all"],
                    "spearman_mean": sc["spearman_mean"],
                    "pearson": sc["pearson_all"],
                    "n_pairs": sc["n_pairs"],
                }
            )
        for s in sets:
            rho, r = M.spearman(p[s.name], s.gold), M.pearson(p[s.name], s.gold)
            rows.append(
                {
                    "dataset": dataset_key(s),
                    "subset": s.subset,
                    "similarity": sim,
                    "system": system,
                    "spearman_all": rho,
                    "spearman_mean": rho,
                    "pearson": r,
                    "n_pairs": len(s),
                }
            )

    # hard splits over the pooled STS12-16 pairs (all sets when no STS12-16 is present)
    pool = [s for s in sets if s.dataset in ("STS12", "STS13", "STS14", "STS15", "STS16")] or sets
    hard_idx: dict[str, np.ndarray] = {}
    if pool:
        a1 = [x for s in pool for x in s.s1]
        a2 = [x for s in pool for x in s.s2]
        gold = np.array([x for s in pool for x in s.gold])
        hard_idx = M.hard_splits(a1, a2, gold, hard_quantile, hard_high_gold, hard_low_gold)
        for (system, sim), p in preds.items():
            pp = np.concatenate([p[s.name] for s in pool])
            hs = {}
            for split, ix in hard_idx.items():
                hs[split] = {
                    "spearman": M.spearman(pp[ix], gold[ix]),
                    "pearson": M.pearson(pp[ix], gold[ix]),
                    "n_pairs": int(len(ix)),
                }
                rows.append(
                    {
                        "dataset": "hard",
                        "subset": split,
                        "similarity": sim,
                        "system": system,
                        "spearman_all": hs[split]["spearman"],
                        "spearman_mean": hs[split]["spearman"],
                        "pearson": hs[split]["pearson"],
                        "n_pairs": int(len(ix)),
                    }
                )
            if system == "surrogate" and sim == "cosine":
                result["hard"] = hs
            elif system != "surrogate":
                result["baselines"].setdefault(system, {}).setdefault("hard", {})[sim] = hs

    for (system, sim), per in per_system.items():
        block = {k: {**v, "similarity": sim} for k, v in per.items()}
        if system == "surrogate":
            result["datasets" if sim == "cosine" else "rcmd"] = block
            result.setdefault("avg7", {})[sim] = _avg7(per)
        else:
            b = result["baselines"].setdefault(system, {})
            b.setdefault("datasets", {})[sim] = block
            b.setdefault("avg7", {})[sim] = _avg7(per)

    # paired bootstrap: surrogate (cosine) minus each baseline, per dataset
    if ("surrogate", "cosine") in preds and bootstrap_resamples > 0:
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
                cis[key] = M.bootstrap_diff_ci(
                    g, a, b, "spearman", bootstrap_resamples, confidence, seed
                )
            result["bootstrap"][f"surrogate.cosine-vs-{system}.{sim}"] = cis

    # iSTS
    if ists_dir is not None and Path(ists_dir).expanduser().is_dir():
        from ctxsim.readers.ists import discover_ists, write_wa

        for dom in discover_ists(Path(ists_dir).expanduser()):
            gold_eq = equi_filter(dom.gold, remove_oppo=ists_remove_oppo)
            entry = {}
            for sim in similarities:
                sysp = ists_system(surrogate, dom, sim)
                f_eq = ists_f1(gold_eq, sysp, ("ali",))["ali"]
                f_raw = ists_f1(dom.gold, sysp, ("ali",))["ali"]
                entry[sim] = {
                    "f1_ali_equi": f_eq["f1"] * 100,
                    "precision_equi": f_eq["precision"] * 100,
                    "recall_equi": f_eq["recall"] * 100,
                    "f1_ali": f_raw["f1"] * 100,
                    "n_pairs": len(dom.gold),
                }
                if out_dir is not None:
                    write_wa(sysp, Path(out_dir) / f"ists.{dom.name}.{sim}.wa")
            result["ists"][dom.name] = entry
    elif ists_dir is not None:
        log.warning("evaluate: ists_dir %s does not exist; iSTS skipped", ists_dir)

    if pair_sets or qa_sets:
        if "tfidf" in baselines:
            encoders["tfidf"] = None
        result["domain"] = evaluate_domain(
            encoders,
            pair_sets,
            qa_sets,
            batch_size=batch_size,
            bootstrap_resamples=bootstrap_resamples,
            confidence=confidence,
            seed=seed,
            log=log,
        )
    encoders.clear()

    result["n_sets"] = len(sets)
    if pair_sets or qa_sets:
        result["n_domain_sets"] = len(pair_sets) + len(qa_sets)
    result = _nan_to_none(result)
    result["rows"] = _nan_to_none(rows)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(
            json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2)
        )
        report = render_report(result, per_system, hard_idx)
        if result.get("domain"):
            report = report.rstrip("\n") + "\n\n" + domain_report(result["domain"])
        (out / "report.md").write_text(report)
        if sets:
            try:
                write_plots(out, surrogate, sets, preds.get(("surrogate", "cosine"), {}))
            except Exception as e:  # noqa: BLE001 - a plot must not sink an evaluation
                log.warning("evaluate: plotting failed: %s", e)
    return result
