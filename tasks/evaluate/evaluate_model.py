"""``evaluate_model``: every STS set found, every system and similarity, paired BCa intervals,
Wieting et al. (2020) hard splits and iSTS F1, for any sentence-transformers model."""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.models.encoders import bf16_scope
from ctxsim.models.training.objectives import tfidf_cosine
from ctxsim.readers.evaluators import Evaluator, IstsEvaluator, StsEvaluator, discover_eval_dir
from ctxsim.readers.sts import StsSet
from ctxsim.tasks.evaluate.domain import domain_report, evaluate_domain
from ctxsim.tasks.evaluate.encoders import (
    backbone_vectors,
    dynamax_scores,
    load_st,
    pair_similarities,
    wordllama_vectors,
)
from ctxsim.tasks.evaluate.encoding_cache import (
    VectorCache,
    cached_baselines,
    cached_pair_similarities,
)
from ctxsim.tasks.evaluate.ists import ists_system
from ctxsim.tasks.evaluate.report import render_report, write_plots
from ctxsim.tasks.evaluate.sts_scores import (
    PerSystem,
    Preds,
    bootstrap_intervals,
    dataset_blocks,
    hard_splits_rows,
    sts_rows,
)

#: names the key's old name (evaluate.sts_dir, still read): a run without data writes the report
#: it wrote before the rename
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


def _systems(model_path: str, baselines: dict[str, str | None]) -> dict[str, str | None]:
    return {"surrogate": model_path, **baselines}


def _shown(path: str, relative_to: str | Path | None) -> str:
    """A model path as reported: relative to ``relative_to`` (the artefact root) when under it."""
    if relative_to is not None:
        try:
            return str(Path(path).resolve().relative_to(Path(relative_to).resolve()))
        except ValueError:
            pass
    return path


def _empty_result(model: str) -> dict[str, Any]:
    return {
        "model": model,
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


def _find_data(
    eval_dir: str | Path | None, max_pairs: int | None, seed: int, log: Any, result: dict
) -> tuple[list[StsSet], list[Evaluator]]:
    """(STS sets, the sets of every other format of readers/evaluators) under ``eval_dir``; a
    warning in ``result`` (and the log) when there is none of them."""
    if eval_dir is None:  # iSTS alone: no STS sets were asked for
        return [], []
    sets = [e.data for e in StsEvaluator.discover(eval_dir, max_pairs, seed)]
    others = discover_eval_dir(eval_dir)
    if not sets and not others:
        msg = DATA_HINT.format(where=eval_dir)
        log.warning(msg)
        result["warnings"] = [msg]
    return sets, others


def _score_models(
    surrogate: Any,
    model_path: str,
    baselines: dict[str, str | None],
    sets: list[StsSet],
    similarities: Sequence[str],
    load: Any,
    cache: tuple[int, VectorCache | None],
    keep_encoders: bool,
    log: Any,
) -> tuple[Preds, dict[str, Any]]:
    """Each model system (the surrogate, then the baselines that are models) on every STS set
    and similarity, the baselines through the cache when there is one (``cache``: batch size,
    cache); with ``keep_encoders``, the loaded models by system (for the domain tasks)."""
    batch_size, vectors = cache
    preds: Preds = {}
    encoders: dict[str, Any] = {}
    for system, path in _systems(model_path, baselines).items():
        if system in ("dynamax", "tfidf"):
            continue
        model = surrogate if system == "surrogate" else load(path)
        if keep_encoders:
            encoders[system] = model
        model_id = vectors.model_id(system, path) if vectors is not None else None
        for s in sets:
            if model_id is None:  # no cache, or the surrogate (never cached)
                sc = pair_similarities(model, s.s1, s.s2, batch_size, similarities)
            else:
                pairs = (s.s1, s.s2)
                sc = cached_pair_similarities(
                    model, model_id, pairs, batch_size, similarities, vectors
                )
            for sim, v in sc.items():
                preds.setdefault((system, sim), {})[s.name] = v
        log.info("evaluate: scored %d sets with %s", len(sets), system)
    return preds, encoders


def _dynamax(
    src: str | None, surrogate: Any, sets: list[StsSet], load: Any, shown: Any
) -> tuple[dict[str, np.ndarray], str]:
    """DynaMax scores of every set and what its word vectors were: wordllama (``src`` None or
    "wordllama"; the surrogate's input embeddings when it is not installed) or the input
    embeddings of the model at ``src``."""
    try:
        if src in (None, "wordllama"):
            tokenize, vec = wordllama_vectors()
            vectors = "wordllama"
        else:
            tokenize, vec = backbone_vectors(load(src))
            vectors = shown(src)
    except ImportError:
        tokenize, vec = backbone_vectors(surrogate)
        vectors = "surrogate input embeddings (wordllama not installed)"
    return {s.name: dynamax_scores(s.s1, s.s2, tokenize, vec) for s in sets}, vectors


def _add_model_free_preds(
    preds: Preds,
    baselines: dict[str, str | None],
    surrogate: Any,
    sets: list[StsSet],
    load: Any,
    shown: Any,
    result: dict[str, Any],
) -> None:
    """Add the baselines that are not sentence models to ``preds``: DynaMax (its word vectors
    named in ``result["dynamax_vectors"]``) and TF-IDF cosine of each pair (the no-model
    reference)."""
    if "dynamax" in baselines and sets:
        dyn, result["dynamax_vectors"] = _dynamax(
            baselines["dynamax"], surrogate, sets, load, shown
        )
        preds[("dynamax", "dynamax")] = dyn
    if "tfidf" in baselines and sets:
        preds[("tfidf", "tfidf")] = {s.name: tfidf_cosine(s.s1, s.s2) for s in sets}


def _ists(
    surrogate: Any,
    ists_dir: str | Path,
    similarities: Sequence[str],
    remove_oppo: bool,
    out_dir: str | Path | None,
    log: Any,
) -> dict[str, dict[str, Any]]:
    """iSTS alignment F1 of the surrogate per domain and similarity (against the gold with and
    without non-EQUI alignments); with ``out_dir``, the system's .wa files are written there.
    A missing ``ists_dir`` is a warning and no figures (the STS figures still stand)."""
    from ctxsim.readers.ists import write_wa

    out: dict[str, dict[str, Any]] = {}
    if not Path(ists_dir).expanduser().is_dir():
        log.warning("evaluate: ists_dir %s does not exist; iSTS skipped", ists_dir)
        return out
    for dom in IstsEvaluator.discover(ists_dir, remove_oppo):
        entry = {}
        for sim in similarities:
            sysp = dom.predict(lambda d, sim=sim: ists_system(surrogate, d, sim))
            entry[sim] = dom.scores(sysp)
            if out_dir is not None:
                write_wa(sysp, Path(out_dir) / f"ists.{dom.name}.{sim}.wa")
        out[dom.name] = entry
    return out


def _write_outputs(
    out: Path,
    result: dict[str, Any],
    per_system: PerSystem,
    hard_idx: dict[str, np.ndarray],
    surrogate: Any,
    sets: list[StsSet],
    preds: Preds,
    log: Any,
) -> None:
    """results.json (without the rows), report.md and the plots, in ``out``."""
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


def _write_or_warn(
    out_dir: str | Path, keep: bool, result: dict[str, Any], log: Any, *outputs: Any
) -> None:
    """``_write_outputs`` into ``out_dir``; with ``keep`` (the CLI) a report that could not be
    written is a warning in ``result`` (the CLI keeps the figures it computed), else the error."""
    try:
        _write_outputs(Path(out_dir), result, *outputs, log)
    except OSError as err:
        if not keep:
            raise
        msg = f"--out-dir {out_dir}: report not written ({err.strerror or err})"
        log.warning("evaluate: %s", msg)
        result.setdefault("warnings", []).append(msg)


def _sts_figures(
    sets: list[StsSet],
    preds: Preds,
    hard: tuple[float, tuple[float, float], tuple[float, float]],
    intervals: dict[str, Any],
    result: dict[str, Any],
) -> tuple[list[dict[str, Any]], PerSystem, dict[str, np.ndarray]]:
    """(rows, per-system scores, hard-split indices) of the STS sets; the hard splits, the
    per-dataset blocks and (given resamples) the paired intervals go into ``result``."""
    rows, per_system = sts_rows(sets, preds)
    hard_idx = hard_splits_rows(sets, preds, *hard, rows, result)
    dataset_blocks(per_system, result)
    if ("surrogate", "cosine") in preds and intervals["bootstrap_resamples"] > 0:
        result["bootstrap"] = bootstrap_intervals(
            sets,
            preds,
            intervals["bootstrap_resamples"],
            intervals["confidence"],
            intervals["seed"],
        )
    return rows, per_system, hard_idx


def _domain(
    encoders: dict[str, Any],
    paths: dict[str, str | None],
    sets: list[Evaluator],
    cache: tuple[int, VectorCache | None],
    intervals: dict[str, Any],
    log: Any,
) -> dict[str, Any]:
    """The domain tasks' figures of the loaded encoders (and TF-IDF where ``paths`` names it),
    the baselines' vectors through the cache when there is one (``cache``: batch size, cache)."""
    batch_size, vectors = cache
    systems: dict[str, Any] = encoders | ({"tfidf": None} if "tfidf" in paths else {})
    if vectors is not None:
        systems = cached_baselines(systems, paths, batch_size, vectors)
    return evaluate_domain(systems, sets, batch_size=batch_size, log=log, **intervals)


def _vector_cache(folder: str | Path | None, log: Any) -> VectorCache | None:
    return None if folder is None else VectorCache(Path(folder), log)


def _log_cache(vectors: VectorCache | None, log: Any) -> None:
    if vectors is not None and (vectors.hits or vectors.misses):
        log.info(
            "evaluate: the baselines' encodings: %d arrays read from %s, %d computed",
            vectors.hits,
            vectors.folder,
            vectors.misses,
        )


def evaluate_model(
    model_path: str | Path,
    eval_dir: str | Path | None,
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
    keep_result_on_write_error: bool = False,
    bf16_cpu: bool = False,
    encoding_cache: str | Path | None = None,
) -> dict[str, Any]:
    """Evaluate a sentence-transformers model directory on the sets of every task format found
    in ``eval_dir`` (readers/evaluators) and the iSTS gold of ``ists_dir``; returns the result.

    ``baselines``: system name -> model path (scored like the surrogate), ``tfidf`` -> TF-IDF
    cosine (any value), ``dynamax`` -> None (wordllama's vectors when installed, else the
    surrogate's input embeddings) or "backbone" (that model's). ``out_dir``: plots, report.md
    and results.json. Model paths under ``paths_relative_to`` (a run's root) are reported
    relative to it. ``keep_result_on_write_error`` (the CLI): a report that cannot be written is
    a warning in the result, the figures are returned (a stage raises: never half published).
    ``bf16_cpu``: encoder passes in bf16 on a CPU with the units (CUDA always scores in bf16).
    ``encoding_cache``: the folder keeping the baselines' vectors (encoding_cache.py).
    """
    log = logger or logging.getLogger("ctxsim.evaluate")
    baselines = dict(baselines or {})
    model_path = str(model_path)

    shown = functools.partial(_shown, relative_to=paths_relative_to)

    def load(path: str | Path | None) -> Any:
        return load_st(path, device, max_seq_length)

    result = _empty_result(shown(model_path))
    sets, others = _find_data(eval_dir, max_pairs_per_subset, seed, log, result)
    domain = bool(others)

    intervals = {"bootstrap_resamples": bootstrap_resamples, "confidence": confidence, "seed": seed}
    cache = (batch_size, _vector_cache(encoding_cache, log))  # the baselines' encodings
    with bf16_scope(device, bf16_cpu):  # every encoder pass below
        # every system's predictions on the STS sets
        surrogate = load(model_path)
        preds, encoders = _score_models(
            surrogate, model_path, baselines, sets, similarities, load, cache, domain, log
        )
        _add_model_free_preds(preds, baselines, surrogate, sets, load, shown, result)

        # STS: rows, hard splits, per-dataset blocks, paired intervals
        hard = (hard_quantile, hard_high_gold, hard_low_gold)
        rows, per_system, hard_idx = _sts_figures(sets, preds, hard, intervals, result)

        if ists_dir is not None:
            ists = (similarities, ists_remove_oppo, out_dir, log)
            result["ists"] = _ists(surrogate, ists_dir, *ists)

        if domain:
            paths = _systems(model_path, baselines)
            result["domain"] = _domain(encoders, paths, others, cache, intervals, log)
        encoders.clear()
    _log_cache(cache[1], log)

    result |= {"n_sets": len(sets)} | ({"n_domain_sets": len(others)} if domain else {})
    result = _nan_to_none(result) | {"rows": _nan_to_none(rows)}
    if out_dir is not None:
        outputs = (per_system, hard_idx, surrogate, sets, preds)
        _write_or_warn(out_dir, keep_result_on_write_error, result, log, *outputs)
    return result
