"""`ctxsim export`: a run's labelled pairs as a dataset someone else can load, with its card.

Formats: ``hf`` (``datasets`` ``save_to_disk``: a ``Dataset`` for one split, a ``DatasetDict``
for several; ``load_from_disk(DIR)`` reads it), ``parquet`` and ``jsonl`` (``data/<split>.*``,
declared in the card's ``configs`` so the Hub and ``load_dataset(DIR)`` find the splits). Splits
are the label stage's (train/dev/test, or eval for given pairs), rows unchanged.

Everything is written into a temporary directory beside DIR and renamed into place at the end:
an error leaves nothing behind, and nothing is written outside DIR and that sibling. A non-empty
DIR is refused unless ``overwrite``, and ``overwrite`` replaces only a previous export (one holding
the marker file every export writes), never the artefact root, a directory containing it or the
current working directory. Nothing at or below an artefact root (the store's, or the root the run
was made in) is ever a target, marker or not: the marker is a hint anyone can forge, and the
store owns everything under its root.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from ctxsim.product.contamination import (
    ContaminationParams,
    check_contamination,
    is_test_subset,
    raise_if_contaminated,
)
from ctxsim.product.diagnostics import trust_warnings
from ctxsim.store.artefacts import Artefact, ArtefactStore
from ctxsim.store.errors import InputError

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


#: written into every export; ``--overwrite`` replaces only a directory that holds it
EXPORT_MARKER = ".ctxsim-export.json"


class ExportError(InputError):
    """The export cannot be written (target not empty, not writable, run incomplete)."""


# ---- the target directory ----------------------------------------------------------------------
def _contains(outer: Path, inner: Path) -> bool:
    """Whether ``inner`` is ``outer`` or lies under it (both resolved: links followed)."""
    outer, inner = outer.resolve(), inner.resolve()
    return inner == outer or outer in inner.parents


def _roots(protected: Path | list[Path] | None) -> list[Path]:
    if protected is None:
        return []
    return [protected] if isinstance(protected, Path) else list(protected)


def check_target(out: Path, overwrite: bool, protected: Path | list[Path] | None = None) -> None:
    """Fail before writing anything: DIR must be a directory that is empty, or not exist in a
    parent that does; the parent must take a new directory. Never at or below a ``protected``
    root (artefact roots: the store owns all of it). ``overwrite`` replaces only a previous
    export (it holds ``EXPORT_MARKER``), never a directory containing a protected root, or the
    current working directory or one containing it."""
    roots = _roots(protected)
    for root in roots:
        if _contains(root, out):
            raise ExportError(
                f"--out {out} is inside the artefact root {root}: the store owns everything "
                "there; export to a directory outside it"
            )
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"--out {out} is not empty; pass --overwrite to replace its contents")
        for root in roots:
            if _contains(out, root):
                raise ExportError(
                    f"--out {out} contains the artefact root {root}; --overwrite replaces only "
                    "a previous export, refused"
                )
        if _contains(out, Path.cwd()):
            raise ExportError(
                f"--out {out} is the current directory or contains it; --overwrite replaces only "
                "a previous export, refused"
            )
        if not (out / EXPORT_MARKER).is_file():
            raise ExportError(
                f"--out {out} is not a previous ctxsim export (no {EXPORT_MARKER}); --overwrite "
                "replaces only an export, refused: choose an empty or new directory"
            )
    parent = out.parent
    if not parent.is_dir():
        raise ExportError(f"--out {out}: its parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (
        out.is_dir() and not os.access(out, os.W_OK | os.X_OK)
    ):
        raise ExportError(f"--out {out}: not writable (permission denied)")


@contextlib.contextmanager
def staged_dir(
    out: Path, overwrite: bool, protected: Path | list[Path] | None = None
) -> Iterator[Path]:
    """A fresh directory beside ``out`` to write into; renamed to ``out`` on success, removed on
    failure. A replaced ``out`` is moved aside first and deleted only after the rename."""
    check_target(out, overwrite, protected)
    tmp = out.parent / f".{out.name}.export-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
    except OSError as e:
        raise ExportError(f"--out {out}: cannot create a directory in {out.parent}: {e}") from e
    try:
        yield tmp
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.replaced-{uuid.uuid4().hex[:8]}"
            os.rename(out, old)
        try:
            os.rename(tmp, out)
        except OSError:
            if old is not None:
                os.rename(old, out)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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


def corpus_info(arts: dict[str, Artefact]) -> dict[str, Any]:
    """Source corpus files [name, bytes, sha256] from the shard fingerprint, and one checksum."""
    shard = arts.get("shard")
    if shard is None:
        return {}
    files = shard.manifest.get("fingerprint_payload", {}).get("extra", {}).get("files", [])
    blob = json.dumps(files, sort_keys=True).encode()
    return {
        "files": [{"name": f[0], "bytes": f[1], "sha256": f[2]} for f in files],
        "checksum_sha256": hashlib.sha256(blob).hexdigest(),
        "sentences": shard.num_rows,
    }


def code_version() -> dict[str, Any]:
    """ctxsim's version and, from a git checkout, the commit (with ``-dirty`` if modified)."""
    from ctxsim.store.stage import CTXSIM_VERSION

    out: dict[str, Any] = {"ctxsim": CTXSIM_VERSION}
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
        if commit.returncode == 0:
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=here,
                capture_output=True,
                text=True,
                timeout=10,
            )
            out["git_commit"] = commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return out


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


# ---- the card -----------------------------------------------------------------------------------
def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if n < limit:
            return name
    return "100K<n<1M" if n < 1_000_000 else "n>1M"


def label_summary(label: pa.Table) -> dict[str, Any]:
    lab = label.column("label").to_numpy(zero_copy_only=False).astype(np.float64)
    ok = lab[np.isfinite(lab)]
    if not len(ok):
        return {"n": 0}
    q = np.percentile(ok, [5, 50, 95])
    return {
        "n": int(len(ok)),
        "nan": int(len(lab) - len(ok)),
        "mean": round(float(ok.mean()), 5),
        "std": round(float(ok.std()), 5),
        "min": round(float(ok.min()), 5),
        "p05": round(float(q[0]), 5),
        "p50": round(float(q[1]), 5),
        "p95": round(float(q[2]), 5),
        "max": round(float(ok.max()), 5),
    }


def card_metadata(
    record: dict[str, Any],
    arts: dict[str, Artefact],
    table: pa.Table,
    splits: dict[str, pa.Table],
    fmt: str,
    contamination: dict[str, Any],
    license_: str | None,
) -> dict[str, Any]:
    """The YAML front matter: Hub fields first, then everything ctxsim knows under ``ctxsim``."""
    label = arts["label"]
    n = sum(t.num_rows for t in splits.values())
    src = table.column("source").to_pylist()
    licence = license_ or record.get("config", {}).get("run", {}).get("license") or "unknown"
    meta: dict[str, Any] = {
        "license": licence,
        "language": ["en"],
        "pretty_name": f"ctxsim sentence-pair similarity labels ({record['run_id']})",
        "task_categories": ["sentence-similarity"],
        "tags": ["ctxsim", "synthetic", "sentence-similarity", "contexts"],
        "size_categories": [_size_category(n)],
    }
    if licence == "other":  # the Hub wants a name for a licence of its own
        meta["license_name"] = "source-corpus-licence"
    if fmt in ("parquet", "jsonl"):
        ext = "parquet" if fmt == "parquet" else "jsonl"
        meta["configs"] = [
            {
                "config_name": "default",
                "data_files": [{"split": s, "path": f"data/{s}.{ext}"} for s in splits],
            }
        ]
    meta["dataset_info"] = {
        "features": [{"name": f.name, "dtype": str(f.type)} for f in table.schema],
        "splits": [{"name": s, "num_examples": t.num_rows} for s, t in splits.items()],
    }
    cont = {k: v for k, v in contamination.items() if k not in ("examples", "test_files")}
    if "test_files" in contamination:
        cont["test_files"] = len(contamination["test_files"])
    meta["ctxsim"] = {
        "run_id": record["run_id"],
        "run_status": record.get("status"),
        "config_source": record.get("config_source"),
        "code_version": code_version(),
        "corpus": corpus_info(arts),
        "fingerprints": {name: a.fingerprint for name, a in arts.items()},
        "counts": {
            "pairs": n,
            "by_split": {s: t.num_rows for s, t in splits.items()},
            "by_source": {s: src.count(s) for s in sorted({x for x in src if x is not None})},
        },
        "label": label_summary(table),
        "diagnostics": {k: v for k, v in label.stats.items() if k.startswith("diag_")},
        "warnings": label_warnings(label, table, src),
        "contamination": cont,
        "config": _shareable_config(record.get("config", {})),
    }
    return meta


def label_warnings(label: Artefact, table: pa.Table, src: list[Any]) -> list[str]:
    """The label stage's warnings; a label artefact from before the stage emitted the trust
    warnings (no ``diag_separation`` stat) gets them computed here, the same way."""
    out = list(label.stats.get("diag_warnings") or [])
    if "diag_separation" not in label.stats:
        out += trust_warnings(
            table.column("label").to_numpy(zero_copy_only=False),
            np.asarray(src, dtype=object),
            label.stats.get("diag_reference_spearman"),
        )
    return out


def _shareable_config(config: dict[str, Any]) -> dict[str, Any]:
    """The run's config without what only names this machine (the artefact root)."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    if isinstance(out.get("run"), dict):
        out["run"].pop("root", None)
    return out


def _table(rows: list[tuple[Any, ...]], head: tuple[str, ...]) -> list[str]:
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


def card_markdown(
    meta: dict[str, Any],
    arts: dict[str, Artefact],
    figures: list[tuple[str, str]],
    contamination: dict[str, Any],
    fmt: str,
) -> str:
    """README.md: YAML front matter, then what the data is, how it was made and how good it is."""
    c = meta["ctxsim"]
    lines = [
        "---",
        yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=100).rstrip(),
        "---",
        "",
        f"# {meta['pretty_name']}",
        "",
        "Sentence pairs labelled by **Origin similarity** (Sun et al., TACL 2022, *Sentence "
        "Similarity Based on Contexts*, Eq. 4): each sentence is scored against a set of "
        "corpus contexts C = Cs1 + Cs2 retrieved and selected for the pair (Eq. 3), and the "
        "label is the similarity of the two score vectors. Generated by "
        f"ctxsim {c['code_version'].get('ctxsim')} "
        f"(commit `{c['code_version'].get('git_commit', 'unknown')}`), run `{c['run_id']}`.",
        "",
        "## Loading",
        "",
        "```python",
    ]
    if fmt == "hf":
        lines += ["from datasets import load_from_disk", "ds = load_from_disk('DIR')"]
    else:
        lines += ["from datasets import load_dataset", "ds = load_dataset('DIR')"]
    lines += ["```", "", "## Counts", ""]
    lines += _table(
        [(s, k) for s, k in c["counts"]["by_split"].items()]
        + [(f"source={s}", k) for s, k in c["counts"]["by_source"].items()],
        ("rows", "pairs"),
    )
    if c.get("warnings"):
        lines += ["", "## Warnings", ""]
        lines += [f"- {w}" for w in c["warnings"]]
    lab = c["label"]
    lines += ["", "## Labels", ""]
    lines += _table([tuple(lab.values())], tuple(lab.keys()))
    d = c["diagnostics"]
    if d:
        lines += ["", "Diagnostics of the label stage:", ""]
        lines += [f"- `{k[5:]}`: {v}" for k, v in sorted(d.items())]
    for rel, caption in figures:
        lines += ["", f"![{caption}]({rel})", "", f"*{caption}*"]
    st = arts["label"].stats
    sets = sorted(k[len("n_pairs.") :] for k in st if k.startswith("n_pairs."))
    if sets:  # given (STS) pairs: the labels themselves against gold, per evaluation set
        lines += ["", "## Origin similarity against gold (Spearman x100)", ""]
        lines += _table(
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
    ev = arts.get("evaluate")
    if ev is not None:
        rows = surrogate_rows(ev)
        if rows:
            lines += ["", "## A surrogate trained on these labels (Spearman x100)", ""]
            lines += [
                "STS test sets (train and dev splits left out), cosine similarity; the untrained "
                "backbone is the bar the labels must clear.",
                "",
            ]
            lines += _table(rows, ("test set", "pairs", "trained", "untrained backbone"))
    lines += ["", "## Contamination check (STS test sets)", ""]
    if contamination.get("skipped"):
        lines.append(f"Not checked: {contamination['skipped']}.")
    else:
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
            lines += _table(
                [
                    (e["kind"], e["jaccard"], e["test_set"], e["sentence"].replace("|", "\\|"))
                    for e in contamination["examples"]
                ],
                ("match", "Jaccard", "test set", "sentence"),
            )
    corpus = c["corpus"]
    lines += ["", "## Source corpus", ""]
    if corpus:
        lines.append(
            f"{len(corpus['files'])} files, {corpus['sentences']} sentences; checksum (sha256 of "
            f"the file list with each file's sha256): `{corpus['checksum_sha256']}`."
        )
    lines += [
        "",
        "## Fields",
        "",
        "`s1`, `s2`: the sentences; `label`: Origin similarity (Eq. 4 with S of Eq. 3); "
        "`label_disc` / `label_fwd` / `label_left` / `label_right`: the same from one Eq. 3 term "
        "(NaN where the term was not computed); `n_ctx1`, `n_ctx2`: |Cs|; `source`: how the "
        "pair was mined (knn, shared, random, given); `split`; `dataset`, `subset`, `gold`: "
        "for given (STS) pairs only; `pair_id`, `s1_id`, `s2_id`: ids within the run.",
        "",
        "## Reproducing",
        "",
        "The full configuration is in the front matter (`ctxsim.config`); every stage's "
        "fingerprint is listed under `ctxsim.fingerprints`. `ctxsim explain S1 S2 --run "
        f"{c['run_id']}` shows which contexts decided a label.",
        "",
        "## Licence",
        "",
        f"`{meta['license']}` (from the run's `run.license`); the sentences keep the licence "
        "of the source corpus"
        + (" (`license_name: source-corpus-licence`)." if "license_name" in meta else "."),
        "",
    ]
    return "\n".join(lines)


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


def parse_card(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, Markdown body) of a README.md with YAML front matter."""
    if not text.startswith("---\n"):
        raise ValueError("dataset card has no YAML front matter")
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        raise ValueError("dataset card's front matter is not closed by ---")
    return yaml.safe_load(head), body
