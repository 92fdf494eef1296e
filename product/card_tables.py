"""The dataset card's tables (``product.card``): the gold, surrogate, evaluation-task and
contamination sections of its Markdown body."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ctxsim.product.contamination import is_test_subset
from ctxsim.store.artefacts import Artefact


def md_table(rows: list[tuple[Any, ...]], head: tuple[str, ...]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    return out + ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]


def surrogate_rows(ev: Artefact) -> list[tuple[Any, ...]]:
    """(test set, pairs, trained, untrained backbone) per STS test set of the evaluate stage
    (its cosine rows over whole sets; train / dev / trial splits left out); the backbone's
    cell is "-" when the evaluate stage had no backbone baseline."""
    t = ev.read_table(["dataset", "subset", "similarity", "system", "spearman_all", "n_pairs"])
    by: dict[tuple[str, str], tuple[float | None, int]] = {}
    for r in t.to_pylist():
        if r["subset"] != "all" or r["similarity"] != "cosine" or r["dataset"] == "hard":
            continue
        by[(r["dataset"], r["system"])] = (r["spearman_all"], r["n_pairs"])

    def fmt(v: float | None) -> Any:
        return "-" if v is None or not np.isfinite(v) else round(float(v), 2)

    out = []
    for key in sorted({k for k, sys in by if sys == "surrogate"}):
        subset = key.rsplit(".", 1)[1] if "." in key else "test"  # STS12-16: test by year
        if not is_test_subset(subset):
            continue
        rho, n = by[(key, "surrogate")]
        base = by.get((key, "backbone"), (None, n))[0]
        out.append((key, n, fmt(rho), fmt(base)))
    return out


def domain_rows(ev: Artefact) -> list[tuple[Any, ...]]:
    """(task, set, metric, trained, untrained backbone) per set of every task format the
    evaluate stage found beside STS (readers/evaluators: pair classification, retrieval, ...),
    on the format's primary metric, from its results.json; none when it found none."""
    from ctxsim.readers.evaluators import eval_dir_formats

    path = ev.files_dir / "results.json"
    domain = (json.loads(path.read_text()).get("domain") or {}) if path.exists() else {}

    def fmt(v: float | None) -> Any:
        return "-" if v is None or not np.isfinite(v) else round(float(v), 2)

    out = []
    for cls in eval_dir_formats():
        metric = cls.primary_metric
        for name, by_sys in (domain.get(cls.section) or {}).items():
            trained = (by_sys.get("surrogate") or {}).get(metric)
            base = (by_sys.get("backbone") or {}).get(metric)
            out.append((cls.format, name, cls.columns.get(metric, metric), fmt(trained), fmt(base)))
    return out


def gold_lines(st: dict[str, Any]) -> list[str]:
    """Given (STS) pairs: the labels themselves against gold, per evaluation set (none when the
    label stage had no given pairs)."""
    sets = sorted(k[len("n_pairs.") :] for k in st if k.startswith("n_pairs."))
    if not sets:
        return []
    lines = ["", "## Origin similarity against gold (Spearman x100)", ""]
    lines += md_table(
        [
            (
                x,
                st[f"n_pairs.{x}"],
                st.get(f"spearman_all.{x}"),
                st.get(f"spearman_all.{x}.tfidf_cosine"),
            )
            for x in sets
        ],
        ("set", "pairs", "Origin", "TF-IDF cosine"),
    )
    return lines


def evaluate_lines(ev: Artefact) -> list[str]:
    """The surrogate's STS and evaluation-task tables from the evaluate stage."""
    lines: list[str] = []
    rows = surrogate_rows(ev)
    if rows:
        lines += ["", "## A surrogate trained on these labels (Spearman x100)", ""]
        lines += [
            "STS test sets (train and dev splits left out), cosine similarity; the untrained "
            "backbone is the bar the labels must clear.",
            "",
        ]
        lines += md_table(rows, ("test set", "pairs", "trained", "untrained backbone"))
    rows = domain_rows(ev)
    if rows:
        lines += ["", "## The surrogate on the evaluation tasks (x100)", ""]
        lines += [
            "Every other task set of the evaluate stage, on its format's primary metric "
            "(cosine similarity).",
            "",
        ]
        lines += md_table(rows, ("task", "set", "metric", "trained", "untrained backbone"))
    return lines


def contamination_lines(contamination: dict[str, Any]) -> list[str]:
    """The contamination check's section (``product.contamination``)."""
    lines = ["", "## Contamination check (STS test sets)", ""]
    if contamination.get("skipped"):
        lines.append(f"Not checked: {contamination['skipped']}.")
        return lines
    lines.append(
        f"{contamination['contaminated']} of {contamination['checked_sentences']} distinct "
        "dataset sentences (labelled and query sentences) occur in the "
        f"{len(contamination['test_files'])} STS test files under "
        f"`{contamination['sts_dir']}`: {contamination['exact']} after normalisation "
        f"(exact), {contamination['ngram']} with word {contamination['ngram_n']}-gram "
        f"Jaccard >= {contamination['threshold']}."
    )
    if contamination.get("examples"):
        lines += [""]
        lines += md_table(
            [
                (e["kind"], e["jaccard"], e["test_set"], e["sentence"].replace("|", "\\|"))
                for e in contamination["examples"]
            ],
            ("match", "Jaccard", "test set", "sentence"),
        )
    return lines
