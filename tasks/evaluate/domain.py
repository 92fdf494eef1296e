"""Domain evaluation of the `evaluate` stage: every set of the formats found under
``evaluate.eval_dir`` beside the STS sets (readers/evaluators: pair classification, QA retrieval,
and any format registered there), every system scored on the same items, and the surrogate's
difference to each other system as a paired bootstrap interval (each format's ``interval``).

A system is a sentence-transformers model (``EncoderSimilarity``: cosine of its embeddings) or
None (``TfidfSimilarity``: word 1-2 gram TF-IDF fit on the evaluated texts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxsim.readers.evaluators import Evaluator, eval_dir_formats
from ctxsim.tasks.evaluate.encoders import encode_sentences


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def tfidf_vectors(texts: Sequence[str]):
    """TF-IDF of word 1-2 grams, sublinear tf, fit on the evaluated texts (L2-normalised rows):
    the no-model reference of the domain tasks."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit_transform(list(texts))


class TfidfSimilarity:
    """Cosine of word 1-2 gram TF-IDF vectors fit on the texts compared."""

    def paired(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        x = tfidf_vectors(list(s1) + list(s2))
        a, b = x[: len(s1)], x[len(s1) :]
        return np.asarray(a.multiply(b).sum(axis=1), dtype=np.float64).ravel()

    def matrix(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        x = tfidf_vectors(list(queries) + list(docs))
        q, d = x[: len(queries)], x[len(queries) :]
        return np.asarray((q @ d.T).todense(), dtype=np.float64)


class EncoderSimilarity:
    """Cosine of a sentence-transformers model's embeddings (each side encoded on its own,
    length-bucketed batches of ``batch_size``)."""

    def __init__(self, model: Any, batch_size: int = 64) -> None:
        self.model, self.batch_size = model, batch_size

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        return _unit(encode_sentences(self.model, list(texts), self.batch_size))

    def paired(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        return (self._encode(s1) * self._encode(s2)).sum(axis=1).astype(np.float64)

    def matrix(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        return (self._encode(queries) @ self._encode(docs).T).astype(np.float64)


def as_similarity(system: Any, batch_size: int = 64) -> Any:
    """A system as an evaluator scores it: None is TF-IDF, a similarity stays, a model is the
    cosine of its embeddings."""
    if system is None:
        return TfidfSimilarity()
    if hasattr(system, "paired") and hasattr(system, "matrix"):
        return system
    return EncoderSimilarity(system, batch_size)


def pair_set_similarities(model: Any, ps: Any, batch_size: int = 64) -> np.ndarray:
    """Similarity of each pair of a ``PairSet`` (``model`` None: TF-IDF)."""
    return as_similarity(model, batch_size).paired(ps.s1, ps.s2)


def qa_similarity(model: Any, qa: Any, batch_size: int = 64) -> np.ndarray:
    """(questions x answers) similarity matrix of a ``QaSet`` (``model`` None: TF-IDF)."""
    return as_similarity(model, batch_size).matrix(qa.questions, qa.answers)


def evaluate_domain(
    systems: Mapping[str, Any],
    sets: Sequence[Evaluator],
    *,
    batch_size: int = 64,
    bootstrap_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    reference: str = "surrogate",
    log: Any = None,
    per_item: bool = False,
) -> dict[str, Any]:
    """Scores of every system (name -> SentenceTransformer, None for TF-IDF, or a similarity)
    on every set, under ``out[set.section][set.name][system]``, and paired intervals of
    ``reference`` minus each other system (``out["bootstrap"]``, keyed
    ``section.set.metric.reference-vs-system``). ``per_item`` adds ``out["per_item"]``: each
    system's predictions per set (cosine per pair, metrics per question), for intervals against
    systems scored in another call (the benches)."""
    sections = [c.section for c in eval_dir_formats()] + [type(e).section for e in sets]
    out: dict[str, Any] = {sec: {} for sec in sections} | {"bootstrap": {}}
    items: dict[str, Any] = {sec: {} for sec in sections}
    sims = {name: as_similarity(m, batch_size) for name, m in systems.items()}
    for ev in sets:
        preds = {name: ev.predict(sim) for name, sim in sims.items()}
        items[ev.section][ev.name] = preds
        out[ev.section][ev.name] = {name: ev.scores(p) for name, p in preds.items()}
        if reference in preds and bootstrap_resamples > 0:
            for name, p in preds.items():
                if name == reference:
                    continue
                for metric in ev.interval_metrics:
                    key = f"{ev.section}.{ev.name}.{metric}.{reference}-vs-{name}"
                    out["bootstrap"][key] = ev.interval(
                        preds[reference], p, metric, bootstrap_resamples, confidence, seed
                    )
        if log:
            log.info("evaluate: %s", ev.describe())
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
    """The report's domain section (Markdown): a table per format that has figures."""
    lines: list[str] = []
    for cls in {c.section: c for c in eval_dir_formats()}.values():
        if domain.get(cls.section):
            lines += _table(cls.title, cls.columns, cls.count, domain[cls.section])
    if domain.get("bootstrap"):
        lines += ["## Paired bootstrap intervals (domain)", "", "| comparison | delta | CI |"]
        lines.append("|---|---|---|")
        for key, ci in domain["bootstrap"].items():
            lines.append(
                f"| {key} | {ci['delta']:+.2f} | [{ci['ci_low']:+.2f}, {ci['ci_high']:+.2f}] |"
            )
        lines.append("")
    return "\n".join(lines)
