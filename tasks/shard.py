"""Stage `shard`: corpus files -> one row per sentence, in document/section/paragraph order.

Sentence order is what later stages turn into left/right contexts (Sun et al. 2022, Sec. 3.2:
c<i and c>i), so the reader keeps reading order and never lets a context cross a section: a
section is a contiguous run of paragraphs (a chapter, or a JSON Lines record of the books corpus).

Documents are spread over shards by ``doc_id % n_shards``; every shard enumerates the same
documents in the same order, so ids are stable however many shards run, and in what order.
``sent_id = doc_id * 2**24 + (index of the kept sentence in its document)``: globally unique,
increasing in reading order, consecutive within a section.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field

from ctxsim.models.sentences import count_tokens, split_sentences
from ctxsim.readers.corpus import CorpusInputError, hf_dataset_root, hf_sections, parquet_sections
from ctxsim.store.artefacts import content_digest
from ctxsim.store.stage import Stage, StageContext, StageParams

SENTS_PER_DOC_BITS = 24


class ShardParams(StageParams):
    paths: list[str] = Field(default_factory=lambda: ["data/sample/*.jsonl"])
    # auto: by file name; a folder written by Hugging Face `save_to_disk` is read as a dataset
    format: Literal["auto", "text", "jsonl", "parquet", "hf"] = "auto"
    # JSON Lines: a record holds either one text or a list of paragraphs (the books corpus).
    text_field: str = "text"
    paragraphs_field: str = "paragraphs"
    doc_field: str | None = "book"  # consecutive records with the same value form one document
    section_field: str | None = "section"
    # Plain text: one document per file, or documents separated by blank lines.
    text_mode: Literal["file", "blank_lines"] = "file"
    # Parquet and Hugging Face datasets (readers/corpus.py): a text column (paragraphs separated
    # by blank lines); consecutive rows with the same doc / section id form one document /
    # section; without a section column every row is a section of its own.
    parquet_text_column: str = "text"
    parquet_doc_column: str | None = None
    parquet_section_column: str | None = None
    empty_files: Literal["skip", "error"] = "skip"  # skip: counted in the stats as empty_files
    encoding_errors: Literal["strict", "replace"] = "strict"
    splitter: str = "blingfire"
    min_tokens: int = Field(3, ge=1)
    max_tokens: int = Field(80, ge=1)
    max_paragraph_chars: int = Field(200_000, ge=100)
    n_shards: int = Field(2, ge=1, le=4096)


@dataclass
class Section:
    doc_key: str
    section_key: str
    paragraphs: list[str]


def _expand(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for pattern in paths:
        pattern = os.path.expanduser(pattern)
        matched = sorted(glob.glob(pattern, recursive=True))
        if not matched:
            raise CorpusInputError(f"corpus path {pattern!r} matches no file")
        for m in map(Path, matched):  # a folder stands for every file below it
            files.extend(sorted(f for f in m.rglob("*") if f.is_file()) if m.is_dir() else [m])
    if not files:
        raise CorpusInputError(f"corpus paths {paths} contain no files")
    return files


def _detect(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".json.gz", ".ndjson")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    return "text"


def _decode(raw: bytes, path: Path, base_offset: int, errors: str, line: int | None = None) -> str:
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        line = line if line is not None else raw.count(b"\n", 0, e.start) + 1
        raise CorpusInputError(
            f"{path}: invalid UTF-8 at byte offset {base_offset + e.start} (line {line})"
            " (set shard.encoding_errors: replace to substitute U+FFFD)"
        ) from None


def _open_bytes(path: Path) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _blocks(text: str) -> list[str]:
    """Blank-line separated blocks, inner whitespace collapsed."""
    out, cur = [], []
    for line in text.splitlines():
        if line.strip():
            cur.append(line.strip())
        elif cur:
            out.append(" ".join(cur))
            cur = []
    if cur:
        out.append(" ".join(cur))
    return out


def iter_sections(p: ShardParams, counts: Counter) -> Iterator[Section]:
    """All sections of the corpus in a deterministic order."""
    hf_seen: set[Path] = set()
    for path in _expand(p.paths):
        fmt = _detect(path, p.format)
        hf = hf_dataset_root(path) if fmt in ("auto", "hf", "text") else None
        if fmt == "hf" and hf is None:
            raise CorpusInputError(f"{path}: not in a folder written by save_to_disk (format hf)")
        if hf is not None:  # a save_to_disk folder: read once, as a dataset, in its order
            if hf not in hf_seen:
                hf_seen.add(hf)
                yield from (Section(*x) for x in hf_sections(hf, p, counts, _blocks))
            continue
        if path.stat().st_size == 0:
            if p.empty_files == "error":
                raise CorpusInputError(f"{path}: empty file")
            counts["empty_files"] += 1
            continue
        if fmt == "jsonl":
            yield from _jsonl_sections(path, p, counts)
        elif fmt == "parquet":
            yield from (Section(*x) for x in parquet_sections(path, p, counts, _blocks))
        else:
            with _open_bytes(path) as f:
                text = _decode(f.read(), path, 0, p.encoding_errors)
            blocks = _blocks(text)
            if not blocks:
                counts["empty_documents"] += 1
                continue
            if p.text_mode == "file":
                yield Section(str(path), f"{path}#0", blocks)
            else:
                for i, block in enumerate(blocks):
                    yield Section(f"{path}:{i}", f"{path}:{i}#0", [block])


def _jsonl_sections(path: Path, p: ShardParams, counts: Counter) -> Iterator[Section]:
    offset = 0
    with _open_bytes(path) as f:
        for lineno, raw in enumerate(f, start=1):
            start, offset = offset, offset + len(raw)
            line = _decode(raw, path, start, p.encoding_errors, lineno).strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusInputError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise CorpusInputError(f"{path}:{lineno}: expected a JSON object")
            if p.paragraphs_field in rec:
                paras = rec[p.paragraphs_field]
                if not isinstance(paras, list) or not all(isinstance(x, str) for x in paras):
                    raise CorpusInputError(
                        f"{path}:{lineno}: field {p.paragraphs_field!r} must be a list of strings"
                    )
                paras = [x.strip() for x in paras if x and x.strip()]
            elif p.text_field in rec:
                if not isinstance(rec[p.text_field], str):
                    raise CorpusInputError(
                        f"{path}:{lineno}: field {p.text_field!r} must be a string"
                    )
                paras = _blocks(rec[p.text_field])
            else:
                raise CorpusInputError(
                    f"{path}:{lineno}: record has neither "
                    f"{p.paragraphs_field!r} nor {p.text_field!r}"
                )
            if not paras:
                counts["empty_documents"] += 1
                continue
            doc = rec.get(p.doc_field) if p.doc_field else None
            sec = rec.get(p.section_field) if p.section_field else None
            doc_key = f"{path}:{doc}" if doc is not None else f"{path}:{lineno}"
            sec_key = f"{doc_key}#{sec}" if sec is not None else f"{doc_key}#{lineno}"
            yield Section(doc_key, sec_key, paras)


SHARD_SCHEMA = pa.schema(
    [
        ("sent_id", pa.int64()),
        ("doc_id", pa.int64()),
        ("doc_name", pa.string()),
        ("section_id", pa.int64()),
        ("para_idx", pa.int32()),
        ("sent_idx", pa.int32()),
        ("text", pa.string()),
        ("n_tokens", pa.int32()),
        ("shard", pa.int32()),
    ]
)


class ShardStage(Stage):
    name = "shard"
    version = "1"
    Params = ShardParams
    inputs = ()
    run_fields = ()

    def fingerprint_extra(self, params: ShardParams) -> dict[str, Any]:
        """Input files by content (sha256) and name below their common folder: an edited
        corpus gets a new fingerprint, a copied or moved one keeps it."""
        files = [f.resolve() for f in _expand(params.paths)]
        base = Path(os.path.commonpath([str(f.parent) for f in files]))
        rows = [[str(f.relative_to(base)), f.stat().st_size, content_digest(f)] for f in files]
        return {"files": rows}

    def num_shards(self, ctx: StageContext) -> int:
        return ctx.params.n_shards

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: ShardParams = ctx.params
        counts: Counter = Counter()
        cols: dict[str, list] = {f.name: [] for f in SHARD_SCHEMA}
        doc_id, section_id, last_doc = -1, -1, None
        for sec in iter_sections(p, counts):
            if sec.doc_key != last_doc:
                doc_id, last_doc, kept_in_doc = doc_id + 1, sec.doc_key, 0
            section_id += 1
            if doc_id % p.n_shards != shard:
                continue
            counts["sections"] += 1
            sent_idx = 0
            for para_idx, para in enumerate(sec.paragraphs):
                counts["paragraphs"] += 1
                if len(para) > p.max_paragraph_chars:
                    counts["dropped_paragraph_too_long"] += 1
                    sent_idx += 1  # a gap: no context may span the dropped paragraph
                    continue
                for sent in split_sentences(para, p.splitter):
                    n_tok = count_tokens(sent)
                    reason = (
                        "too_short"
                        if n_tok < p.min_tokens
                        else "too_long"
                        if n_tok > p.max_tokens
                        else None
                    )
                    if reason:
                        counts[f"dropped_{reason}"] += 1
                    else:
                        if kept_in_doc >= 1 << SENTS_PER_DOC_BITS:
                            raise CorpusInputError(
                                f"document {sec.doc_key} has over 2**24 sentences"
                            )
                        cols["sent_id"].append((doc_id << SENTS_PER_DOC_BITS) + kept_in_doc)
                        cols["doc_id"].append(doc_id)
                        cols["doc_name"].append(sec.doc_key.rsplit("/", 1)[-1])
                        cols["section_id"].append(section_id)
                        cols["para_idx"].append(para_idx)
                        cols["sent_idx"].append(sent_idx)
                        cols["text"].append(sent)
                        cols["n_tokens"].append(n_tok)
                        cols["shard"].append(shard)
                        kept_in_doc += 1
                    sent_idx += 1
        if doc_id < 0:
            raise CorpusInputError(f"corpus {p.paths} holds no non-empty document")
        table = pa.table(cols, schema=SHARD_SCHEMA)
        stats = {
            "sentences": table.num_rows,
            "documents": len(set(cols["doc_id"])),
            "tokens": int(sum(cols["n_tokens"])),
            # Corpus-wide counts are seen by every shard: report them once, from shard 0.
            **{k: v for k, v in counts.items() if shard == 0 or not k.startswith("empty_")},
        }
        return table, stats
