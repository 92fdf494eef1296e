"""Domain evaluators of the `evaluate` stage: pair classification and question-to-answer retrieval.

Files come from ``readers/domain.py`` (found in the same folder as the STS sets); metrics and
intervals from ``models/evaluation/domain_metrics.py``. Every system is scored on the same pairs /
queries,
and the surrogate's difference to each other system gets a paired bootstrap interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxsim.models.evaluation import domain_metrics as D
from ctxsim.readers.domain import PairSet, QaSet
from ctxsim.tasks.evaluate.encoders import encode_sentences


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def tfidf_vectors(texts: Sequence[str]):
    """TF-IDF of word 1-2 grams, sublinear tf, fit on the evaluated texts (L2-normalised rows):
    the no-model reference of the domain tasks."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit_transform(list(texts))


def pair_set_similarities(model: Any, ps: PairSet, batch_size: int) -> np.ndarray:
    """Cosine of each pair (``model`` None: TF-IDF)."""
    if model is None:
        x = tfidf_vectors(ps.s1 + ps.s2)
        a, b = x[: len(ps)], x[len(ps) :]
        return np.asarray(a.multiply(b).sum(axis=1), dtype=np.float64).ravel()
    a = _unit(encode_sentences(model, ps.s1, batch_size))
    b = _unit(encode_sentences(model, ps.s2, batch_size))
    return (a * b).sum(axis=1).astype(np.float64)


def qa_similarity(model: Any, qa: QaSet, batch_size: int) -> np.ndarray:
    """(questions x answers) cosine matrix (``model`` None: TF-IDF)."""
    if model is None:
        x = tfidf_vectors(qa.questions + qa.answers)
        q, d = x[: len(qa.questions)], x[len(qa.questions) :]
        return np.asarray((q @ d.T).todense(), dtype=np.float64)
    q = _unit(encode_sentences(model, qa.questions, batch_size))
    d = _unit(encode_sentences(model, qa.answers, batch_size))
    return (q @ d.T).astype(np.float64)


def evaluate_domain(
    systems: Mapping[str, Any],
    pair_sets: Sequence[PairSet],
    qa_sets: Sequence[QaSet],
    *,
    batch_size: int = 64,
    bootstrap_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    reference: str = "surrogate",
    log: Any = None,
    per_item: bool = False,
) -> dict[str, Any]:
    """Scores of every system (name -> SentenceTransformer, or None for TF-IDF) on every set,
    and paired intervals of ``reference`` minus each other system. ``per_item`` adds
    ``out["per_item"]``: each system's cosine per pair and retrieval metrics per question, for
    intervals against systems scored in another call (the domain-adaptation bench)."""
    out: dict[str, Any] = {"pairs": {}, "retrieval": {}, "bootstrap": {}}
    items: dict[str, Any] = {"pairs": {}, "retrieval": {}}
    for ps in pair_sets:
        preds = {name: pair_set_similarities(m, ps, batch_size) for name, m in systems.items()}
        items["pairs"][ps.name] = preds
        out["pairs"][ps.name] = {
            name: D.pair_classification_scores(p, ps.labels) for name, p in preds.items()
        }
        if reference in preds and bootstrap_resamples > 0:
            for name, p in preds.items():
                if name != reference:
                    out["bootstrap"][f"pairs.{ps.name}.ap.{reference}-vs-{name}"] = D.ap_diff_ci(
                        ps.labels, preds[reference], p, bootstrap_resamples, confidence, seed
                    )
        if log:
            log.info("evaluate: pair classification on %s (%d pairs)", ps.name, len(ps))
    for qa in qa_sets:
        per = {
            name: D.retrieval_per_query(qa_similarity(m, qa, batch_size), qa.relevant)
            for name, m in systems.items()
        }
        items["retrieval"][qa.name] = per
        out["retrieval"][qa.name] = {name: D.retrieval_scores(v) for name, v in per.items()}
        if reference in per and bootstrap_resamples > 0:
            for name, v in per.items():
                if name == reference:
                    continue
                for metric in ("ndcg_at_10", "mrr_at_10"):
                    out["bootstrap"][f"retrieval.{qa.name}.{metric}.{reference}-vs-{name}"] = (
                        D.mean_diff_ci(
                            per[reference][metric], v[metric], bootstrap_resamples, confidence, seed
                        )
                    )
        if log:
            log.info(
                "evaluate: retrieval on %s (%d questions, %d answers)",
                qa.name,
                len(qa),
                len(qa.answers),
            )
    if per_item:
        out["per_item"] = items
    return out


def _table(
    title: str, columns: dict[str, str], count: tuple[str, str], by_set: Mapping[str, Any]
) -> list[str]:
    """One Markdown table: a row per (set, system); ``columns`` and ``count`` are (key, header)."""
    lines = [
        f"## {title}",
        "",
        "| set | system | " + " | ".join(columns.values()) + f" | {count[1]} |",
        "|---|---|" + "---|" * (len(columns) + 1),
    ]
    for name, by_sys in by_set.items():
        for sys_name, v in by_sys.items():
            cells = " | ".join(f"{v[k]:.2f}" for k in columns)
            lines.append(f"| {name} | {sys_name} | {cells} | {v[count[0]]} |")
    return [*lines, ""]


def domain_report(domain: Mapping[str, Any]) -> str:
    """The report's domain section (Markdown)."""
    lines: list[str] = []
    if domain.get("pairs"):
        lines += _table(
            "Pair classification (cosine; AP, best-threshold accuracy and F1, x100)",
            {"ap": "AP", "accuracy": "accuracy", "f1": "F1"},
            ("n_pairs", "pairs"),
            domain["pairs"],
        )
    if domain.get("retrieval"):
        lines += _table(
            "Retrieval (question to answer; x100)",
            {"ndcg_at_10": "nDCG@10", "mrr_at_10": "MRR@10", "recall_at_100": "Recall@100"},
            ("n_queries", "questions"),
            domain["retrieval"],
        )
    if domain.get("bootstrap"):
        lines += ["## Paired bootstrap intervals (domain)", "", "| comparison | delta | CI |"]
        lines.append("|---|---|---|")
        for key, ci in domain["bootstrap"].items():
            lines.append(
                f"| {key} | {ci['delta']:+.2f} | [{ci['ci_low']:+.2f}, {ci['ci_high']:+.2f}] |"
            )
        lines.append("")
    return "\n".join(lines)
