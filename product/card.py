"""The dataset card `ctxsim export` writes: README.md with Hub-style YAML front matter.

The front matter holds the Hub's fields first (licence, task, sizes, the splits' data files),
then everything ctxsim knows under ``ctxsim`` (run, code version, corpus checksum, fingerprints,
counts, label summary, diagnostics, warnings, contamination, the shareable config); the body says
what the data is, how it was made and how good it is. ``parse_card`` reads one back.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import yaml

from ctxsim.product.card_tables import (
    contamination_lines,
    evaluate_lines,
    gold_lines,
    md_table,
)
from ctxsim.product.diagnostics import trust_warnings
from ctxsim.store.artefacts import Artefact
from ctxsim.store.errors import InputError


class CardError(InputError):
    """A dataset card that cannot be read back (``parse_card``)."""


# ---- where the data came from -------------------------------------------------------------------
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
        "route": route_info(record, arts),
        "label": label_summary(table),
        "diagnostics": {k: v for k, v in label.stats.items() if k.startswith("diag_")},
        "warnings": label_warnings(label, table, src),
        "contamination": cont,
        "config": _shareable_config(record.get("config", {})),
    }
    return meta


def explainable(stages: Any, form: str | None = None) -> bool:
    """Whether ``ctxsim explain`` can decompose a run's labels (``stages``: its stage names,
    record or artefacts): an LM-route run needs a `select` stage (explain reruns the stages that
    build Cs); an encoder-route run an `embed` stage and the closed form (``form``: its
    label.encoder.form, None read as closed), the one form that is a sum over contexts
    (flows/explain.py ``explain_problem``). The run summary and the card suggest it only then."""
    return "select" in stages or ("embed" in stages and (form or "closed") == "closed")


def route_info(record: dict[str, Any], arts: dict[str, Artefact]) -> dict[str, Any]:
    """What labelled the pairs (label.contextual): the LM route (S of Eq. 3 over the Cs that
    `select` built), or the encoder route: the embed artefact's scorer, its cosine over every
    corpus context unit, Origin in closed form or label.encoder.form; with the scorer's name,
    content digest and the embed fingerprint."""
    label_cfg = (record.get("config") or {}).get("label") or {}
    contextual = str(label_cfg.get("contextual") or "lm")
    if contextual != "encoder":
        return {"contextual": contextual}
    st = arts["label"].stats
    enc = label_cfg.get("encoder") or {}
    form = st.get("encoder_form") or enc.get("form") or label_cfg.get("encoder_form") or "closed"
    info: dict[str, Any] = {"contextual": "encoder", "form": form}
    for key in ("tau", "k", "centred"):
        value = enc.get(key, label_cfg.get(key))
        if value is not None and (
            key == "centred" or key == {"softmax": "tau", "topk": "k"}.get(form)
        ):
            info[key] = value
    emb = arts.get("embed")
    units = st.get("encoder_contexts") or (emb.stats.get("contexts") if emb else None)
    info["corpus_units"] = units
    if emb is not None:
        payload = emb.manifest.get("fingerprint_payload") or {}
        scorer = (payload.get("extra") or {}).get("scorer") or {}
        name = str(scorer.get("name") or "")
        info["scorer"] = Path(name).name if "/" in name else name  # no local paths on a card
        info["scorer_digest"] = scorer.get("digest")
        info["embed_fingerprint"] = emb.fingerprint
    return info


def _route_sentence(r: dict[str, Any]) -> str:
    """The card's sentence on how the labels were made, for the route that ran."""
    if r.get("contextual") != "encoder":
        return (
            "each sentence is scored against a set of corpus contexts C = Cs1 + Cs2 retrieved "
            "and selected for the pair (Eq. 3), and the label is the similarity of the two "
            "score vectors."
        )
    form = r.get("form", "closed")
    how = {
        "closed": "in closed form, through the scatter matrix of the context embeddings",
        "softmax": f"over p(c | s), the softmax of the cosines / tau (tau = {r.get('tau')})",
        "topk": f"over the union of each sentence's k = {r.get('k')} nearest units",
    }.get(form, form)
    units = r.get("corpus_units")
    digest = str(r.get("scorer_digest") or "")[:16]
    return (
        f"the encoder route (label.contextual: encoder): every corpus context unit "
        f"({units if units is not None else 'all'} units) is scored against each sentence by "
        f"the cosine of the scorer `{r.get('scorer')}` (content digest `{digest}`, embed "
        f"artefact `{r.get('embed_fingerprint')}`), and the label is the similarity of the two "
        f"sentences' score profiles over all of them, computed {how} "
        f"(label.encoder.form: {form}); no contexts are retrieved or selected."
    )


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


def _head_lines(meta: dict[str, Any], fmt: str) -> list[str]:
    """Front matter, title, loading snippet, counts and warnings."""
    c = meta["ctxsim"]
    route = c.get("route") or {}
    lines = [
        "---",
        yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=100).rstrip(),
        "---",
        "",
        f"# {meta['pretty_name']}",
        "",
        "Sentence pairs labelled by **Origin similarity** (Sun et al., TACL 2022, *Sentence "
        "Similarity Based on Contexts*, Eq. 4): " + _route_sentence(route) + " Generated by "
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
    lines += md_table(
        [(s, k) for s, k in c["counts"]["by_split"].items()]
        + [(f"source={s}", k) for s, k in c["counts"]["by_source"].items()],
        ("rows", "pairs"),
    )
    if c.get("warnings"):
        lines += ["", "## Warnings", ""]
        lines += [f"- {w}" for w in c["warnings"]]
    return lines


def _label_lines(
    c: dict[str, Any], arts: dict[str, Artefact], figures: list[tuple[str, str]]
) -> list[str]:
    """The label summary, the label stage's diagnostics, the figures and the gold table."""
    lab = c["label"]
    lines = ["", "## Labels", ""]
    lines += md_table([tuple(lab.values())], tuple(lab.keys()))
    d = c["diagnostics"]
    if d:
        lines += ["", "Diagnostics of the label stage:", ""]
        lines += [f"- `{k[5:]}`: {v}" for k, v in sorted(d.items())]
    for rel, caption in figures:
        lines += ["", f"![{caption}]({rel})", "", f"*{caption}*"]
    return lines + gold_lines(arts["label"].stats)


def _tail_lines(meta: dict[str, Any]) -> list[str]:
    """Source corpus, fields, reproducing and licence."""
    c = meta["ctxsim"]
    encoder = (c.get("route") or {}).get("contextual") == "encoder"
    corpus = c["corpus"]
    lines = ["", "## Source corpus", ""]
    if corpus:
        lines.append(
            f"{len(corpus['files'])} files, {corpus['sentences']} sentences; checksum (sha256 of "
            f"the file list with each file's sha256): `{corpus['checksum_sha256']}`."
        )
    lines += [
        "",
        "## Fields",
        "",
        (
            "`s1`, `s2`: the sentences; `label`: Origin similarity (Eq. 4 over the scorer's "
            "cosines); `label_disc` / `label_fwd` / `label_left` / `label_right`: NaN (the "
            "encoder route computes no Eq. 3 terms); `n_ctx1`, `n_ctx2`: the corpus context "
            "units each profile runs over; "
            if encoder
            else "`s1`, `s2`: the sentences; `label`: Origin similarity (Eq. 4 with S of Eq. 3); "
            "`label_disc` / `label_fwd` / `label_left` / `label_right`: the same from one Eq. 3 "
            "term (NaN where the term was not computed); `n_ctx1`, `n_ctx2`: |Cs|; "
        )
        + "`source`: how the pair was mined (knn, shared, random, given); `split`; `dataset`, "
        "`subset`, `gold`: for given (STS) pairs only; `pair_id`, `s1_id`, `s2_id`: ids within "
        "the run.",
        "",
        "## Reproducing",
        "",
        "The full configuration is in the front matter (`ctxsim.config`); every stage's "
        "fingerprint is listed under `ctxsim.fingerprints`."
        + (
            f" `ctxsim explain S1 S2 --run {c['run_id']}` shows which contexts decided a label."
            if explainable(c.get("fingerprints", {}), (c.get("route") or {}).get("form"))
            else ""
        ),
        "",
        "## Licence",
        "",
        f"`{meta['license']}` (from the run's `run.license`); the sentences keep the licence "
        "of the source corpus"
        + (" (`license_name: source-corpus-licence`)." if "license_name" in meta else "."),
        "",
    ]
    return lines


def card_markdown(
    meta: dict[str, Any],
    arts: dict[str, Artefact],
    figures: list[tuple[str, str]],
    contamination: dict[str, Any],
    fmt: str,
) -> str:
    """README.md: YAML front matter, then what the data is, how it was made and how good it is."""
    lines = _head_lines(meta, fmt) + _label_lines(meta["ctxsim"], arts, figures)
    ev = arts.get("evaluate")
    if ev is not None:
        lines += evaluate_lines(ev)
    lines += contamination_lines(contamination)
    lines += _tail_lines(meta)
    return "\n".join(lines)


def parse_card(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, Markdown body) of a README.md with YAML front matter."""
    if not text.startswith("---\n"):
        raise CardError("dataset card has no YAML front matter (a first line ---)")
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        raise CardError("dataset card's front matter is not closed by ---")
    return yaml.safe_load(head), body
