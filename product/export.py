"""`ctxsim export`: a run's labelled pairs as a dataset someone else can load, with its card.

Formats: ``hf`` (``datasets`` ``save_to_disk``: a ``Dataset`` for one split, a ``DatasetDict``
for several; ``load_from_disk(DIR)`` reads it), ``parquet`` and ``jsonl`` (``data/<split>.*``,
declared in the card's ``configs`` so the Hub and ``load_dataset(DIR)`` find the splits). Splits
are the label stage's (train/dev/test, or eval for given pairs), rows unchanged.

Everything is written into a temporary directory beside DIR and renamed into place at the end:
an error leaves nothing behind, and nothing is written outside DIR and that sibling. A non-empty
DIR is refused unless ``overwrite``, and ``overwrite`` replaces only a previous export (one holding
the marker file every export writes), never the artefact root, a directory containing it or the
current working directory. Nothing at or below an artefact root (the store's, the root the run
was made in, or any other, recognised by its runs/, _cache/ and manifests) is ever a target,
marker or not: the marker is a hint anyone can forge, and the store owns everything under its
root.

This module reads the run and writes the rows; the target checks are product/export_target.py,
the card (README.md) product/card.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ctxsim.product.card import card_markdown, card_metadata, parse_card
from ctxsim.product.contamination import (
    ContaminationParams,
    check_contamination,
    raise_if_contaminated,
)
from ctxsim.product.export_target import EXPORT_MARKER, ExportError, check_target, staged_dir
from ctxsim.store.artefacts import Artefact, ArtefactStore

__all__ = [
    "EXPORT_MARKER",
    "FIGURES",
    "FORMATS",
    "SPLIT_ORDER",
    "ExportError",
    "export_run",
    "parse_card",
    "read_labels",
    "run_artefacts",
    "run_contamination",
    "split_tables",
    "write_rows",
]

FORMATS = ("hf", "parquet", "jsonl")
SPLIT_ORDER = ("train", "dev", "test", "eval")
#: figures copied next to the card when the run has them: (stage, file, caption)
FIGURES = (
    ("label", "label_hist.png", "Label distribution per pair-mining mode"),
    ("label", "label_by_mode.png", "Label histograms per pair-mining mode (common bins)"),
    ("label", "label_vs_reference.png", "Labels against the reference encoder"),
    ("evaluate", "scatter.png", "Surrogate trained on these labels: cosine vs STS gold"),
    ("evaluate", "heatmaps.png", "Surrogate token-pair contributions (RCMD)"),
)


# ---- what a run holds ---------------------------------------------------------------------------
def run_artefacts(store: ArtefactStore, run_id: str) -> tuple[dict[str, Any], dict[str, Artefact]]:
    """The run record and its published artefacts by stage (a run without `label` is an error)."""
    record = store.read_run(run_id)
    stages = record.get("stages", {})
    if "label" not in stages:
        raise ExportError(
            f"run {run_id} has no label stage (stages: {', '.join(stages) or 'none'}); "
            "run the pipeline through `label` first"
        )
    arts = {name: store.require(name, st["fingerprint"]) for name, st in stages.items()}
    return record, arts


def read_labels(art: Artefact, run_id: str) -> pa.Table:
    """The label table, refused when a label is NaN or infinite: a dataset must not publish
    them (the label stage lets through at most ``label.max_nonfinite_fraction``)."""
    label = art.read_table()
    lab = label.column("label").to_numpy(zero_copy_only=False).astype(np.float64)
    bad = int((~np.isfinite(lab)).sum())
    if bad:
        raise ExportError(
            f"run {run_id}: {bad} of {len(lab)} labels in {art.path} are not finite (NaN or "
            "inf); not exported: fix what left those pairs without contexts and re-run label"
        )
    return label


def split_tables(label: pa.Table) -> dict[str, pa.Table]:
    """The label table by split, in train/dev/test/eval order, rows in artefact order."""
    splits = label.column("split").to_pylist()
    names = [s for s in SPLIT_ORDER if s in splits] + sorted(
        {s for s in splits if s not in SPLIT_ORDER and s is not None}
    )
    return {s: label.filter(pc.equal(label.column("split"), s)) for s in names}


def run_contamination(
    record: dict[str, Any],
    arts: dict[str, Artefact],
    label: pa.Table,
    sts_dir: str | None,
) -> dict[str, Any]:
    """The contamination check at export time, with the run's settings (label.contamination)
    against ``sts_dir`` (default: the one the run's config names)."""
    section = record.get("config", {}).get("label", {}).get("contamination", {}) or {}
    params = ContaminationParams(**section)
    where = sts_dir or params.sts_dir
    srcs = set(label.column("source").to_pylist()) if "source" in label.column_names else set()
    if srcs == {"given"} and sts_dir is None:
        return {"skipped": "given pairs are evaluation pairs (Origin), not a dataset"}
    if not where or not Path(where).is_dir():
        rel = (
            f", read relative to the working directory {Path.cwd()}"
            if where and not Path(where).expanduser().is_absolute()
            else ""
        )
        return {"skipped": f"no STS directory ({where!r}{rel}); pass --sts-dir"}
    texts = label.column("s1").to_pylist() + label.column("s2").to_pylist()
    if "queries" in arts:
        texts += arts["queries"].read_table(["text"]).column("text").to_pylist()
    report = check_contamination(texts, where, params)
    report["error_setting"] = params.error
    return report


# ---- writing ------------------------------------------------------------------------------------
def write_rows(splits: dict[str, pa.Table], out: Path, fmt: str) -> None:
    if fmt == "hf":
        from datasets import Dataset, DatasetDict, disable_progress_bars
        from datasets.table import InMemoryTable

        disable_progress_bars()

        dsets = {s: Dataset(InMemoryTable(t)) for s, t in splits.items()}
        if len(dsets) == 1:
            next(iter(dsets.values())).save_to_disk(str(out))
        else:
            DatasetDict(dsets).save_to_disk(str(out))
        return
    data = out / "data"
    data.mkdir()
    for s, t in splits.items():
        if fmt == "parquet":
            pq.write_table(t, data / f"{s}.parquet", compression="zstd")
        else:
            with open(data / f"{s}.jsonl", "w", encoding="utf-8") as f:
                for row in t.to_pylist():
                    f.write(json.dumps(row, ensure_ascii=False, allow_nan=True) + "\n")


def export_run(
    store: ArtefactStore,
    run_id: str,
    out: str | Path,
    fmt: str = "hf",
    overwrite: bool = False,
    sts_dir: str | None = None,
    license_: str | None = None,
) -> dict[str, Any]:
    """Write run ``run_id``'s labelled pairs and README.md into ``out``; returns a summary."""
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    out = Path(out).expanduser().absolute()
    protected = [Path(store.root)]
    check_target(out, overwrite, protected)  # before reading artefacts: a refusal costs nothing
    record, arts = run_artefacts(store, run_id)
    made_in = ((record.get("config") or {}).get("run") or {}).get("root")
    if made_in:  # the root the run was made in (a store moved or reached through a link)
        protected.append(Path(str(made_in)).expanduser().absolute())
        check_target(out, overwrite, protected)
    label = read_labels(arts["label"], run_id)
    splits = split_tables(label)
    contamination = run_contamination(record, arts, label, sts_dir)
    if contamination.get("error_setting") and contamination.get("contaminated"):
        raise_if_contaminated(contamination, "label.contamination.error")
    meta = card_metadata(record, arts, label, splits, fmt, contamination, license_)
    with staged_dir(out, overwrite, protected) as tmp:
        write_rows(splits, tmp, fmt)
        figures: list[tuple[str, str]] = []
        for stage, name, caption in FIGURES:
            src = arts[stage].files_dir / name if stage in arts else None
            if src is not None and src.is_file():
                (tmp / "figures").mkdir(exist_ok=True)
                fig = name if name.startswith(f"{stage}_") else f"{stage}_{name}"
                shutil.copy2(src, tmp / "figures" / fig)
                figures.append((f"figures/{fig}", caption))
        (tmp / "README.md").write_text(
            card_markdown(meta, arts, figures, contamination, fmt), encoding="utf-8"
        )
        (tmp / "contamination.json").write_text(json.dumps(contamination, indent=2))
        (tmp / EXPORT_MARKER).write_text(
            json.dumps({"run_id": run_id, "format": fmt, "exporter": "ctxsim"}, indent=2)
        )
    return {
        "out": str(out),
        "format": fmt,
        "run_id": run_id,
        "splits": {s: t.num_rows for s, t in splits.items()},
        "contaminated": contamination.get("contaminated"),
        "figures": [f for f, _ in figures],
    }
