"""The readers of the corpora users bring, for the shard stage (tasks/shard.py): ``expand_paths``
turns ``shard.paths`` into files and ``iter_sections`` reads them, in a deterministic order, as
sections (a contiguous run of paragraphs that no context window crosses): plain text (one
document per file, or per blank-line separated block), JSON Lines (a record holds one text or a
list of paragraphs), and tables with a named text column and optional document / section id
columns, as Parquet files or as a Hugging Face dataset saved with ``Dataset.save_to_disk``.

Why one table reader for both: a row is a piece of text (paragraphs split on blank lines);
consecutive rows with the same document id form one document (a document spans shards never),
and with a section column, consecutive rows with the same section id form one section, so a
context window may cross rows of a section but never a section boundary. Without a section
column every row is a section of its own (the shard stage's behaviour for Parquet so far).

Bad input raises ``CorpusInputError`` naming the file (or dataset folder) and the column or row.
"""

from __future__ import annotations

import glob
import json
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from ctxsim.readers.tree import files_under
from ctxsim.store.errors import InputError
from ctxsim.store.inputs import open_input

#: the files ``Dataset.save_to_disk`` writes beside its Arrow shards
HF_MARKERS = ("state.json", "dataset_info.json")
HF_DICT_MARKER = "dataset_dict.json"


class CorpusInputError(InputError):
    """Bad corpus input; the message names the file and the position."""


class TableColumns(Protocol):
    """The shard settings a table reader needs (tasks/shard.py ShardParams)."""

    parquet_text_column: str
    parquet_doc_column: str | None
    parquet_section_column: str | None
    empty_files: str


class CorpusSettings(TableColumns, Protocol):
    """The shard settings the readers need (tasks/shard.py ShardParams)."""

    paths: list[str]
    format: str
    text_field: str
    paragraphs_field: str
    doc_field: str | None
    lead_fields: list[str]
    section_field: str | None
    text_mode: str
    encoding_errors: str


def hf_dataset_root(path: Path) -> Path | None:
    """The ``save_to_disk`` folder a path is or lies in (a ``DatasetDict``'s folder for the
    files of its splits), else None."""
    up = [path, path.parent, path.parent.parent] if path.is_file() else [path, path.parent]
    for d in up:  # a DatasetDict holds split folders that each look like a Dataset
        if (d / HF_DICT_MARKER).is_file():
            return d
    for d in up[:2]:
        if d.is_dir() and all((d / m).is_file() for m in HF_MARKERS):
            return d
    return None


def _columns(p: TableColumns) -> list[str]:
    """The columns to read, each once (one column may name both documents and sections)."""
    cols = (p.parquet_text_column, p.parquet_doc_column, p.parquet_section_column)
    return list(dict.fromkeys(c for c in cols if c is not None))


def _check_columns(where: Path, available: Sequence[str], p: TableColumns) -> None:
    for setting, col in (
        ("parquet_text_column", p.parquet_text_column),
        ("parquet_doc_column", p.parquet_doc_column),
        ("parquet_section_column", p.parquet_section_column),
    ):
        if col is not None and col not in available:
            raise CorpusInputError(
                f"{where}: no column {col!r} (shard.{setting}); columns: {', '.join(available)}"
            )


def _empty(where: Path, p: TableColumns, counts: Counter) -> None:
    if p.empty_files == "error":
        raise CorpusInputError(f"{where}: empty file (no rows)")
    counts["empty_files"] += 1


def table_sections(
    where: Path,
    texts: Sequence[Any],
    docs: Sequence[Any] | None,
    sections: Sequence[Any] | None,
    p: TableColumns,
    counts: Counter,
    blocks: Any,
) -> Iterator[tuple[str, str, list[str]]]:
    """(doc key, section key, paragraphs) from table columns in row order; ``blocks`` splits a
    text into paragraphs (``text_blocks``)."""
    cur: tuple[str, str, list[str]] | None = None
    for i, text in enumerate(texts):
        if text is not None and not isinstance(text, str):
            raise CorpusInputError(
                f"{where}: row {i} of column {p.parquet_text_column!r} is "
                f"{type(text).__name__}, not a string"
            )
        if text is None:  # counted per file: the shard stage warns (or fails: null_cells)
            counts["null_text_cells"] += 1
            counts[f"null_text_cells:{where}"] += 1
        paras = blocks(text or "")
        doc_key = f"{where}:{docs[i] if docs is not None else i}"
        sec_key = f"{doc_key}#{sections[i] if sections is not None else i}"
        if cur is not None and sections is not None and (cur[0], cur[1]) == (doc_key, sec_key):
            cur[2].extend(paras)
            continue
        if cur is not None:
            yield from _nonempty(cur, counts)
        cur = (doc_key, sec_key, list(paras))
    if cur is not None:
        yield from _nonempty(cur, counts)


def _nonempty(sec: tuple[str, str, list[str]], counts: Counter) -> Iterator:
    if sec[2]:
        yield sec
    else:
        counts["empty_documents"] += 1


def parquet_sections(
    path: Path, p: TableColumns, counts: Counter, blocks: Any
) -> Iterator[tuple[str, str, list[str]]]:
    """Sections of one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise CorpusInputError(f"{path}: not a readable Parquet file ({e})") from None
    _check_columns(path, schema.names, p)
    table = pq.read_table(path, columns=_columns(p))
    if table.num_rows == 0:
        _empty(path, p, counts)
        return
    yield from _table(path, table, p, counts, blocks)


def hf_sections(
    root: Path, p: TableColumns, counts: Counter, blocks: Any
) -> Iterator[tuple[str, str, list[str]]]:
    """Sections of a dataset saved with ``Dataset.save_to_disk`` (a ``DatasetDict`` is read split
    by split, in name order)."""
    from datasets import Dataset, DatasetDict, load_from_disk

    try:
        data = load_from_disk(str(root))
    except (OSError, ValueError, json.JSONDecodeError) as e:
        raise CorpusInputError(f"{root}: not a dataset saved with save_to_disk ({e})") from None
    parts = (
        [(f"{root}[{k}]", data[k]) for k in sorted(data)]
        if isinstance(data, DatasetDict)
        else [(str(root), data)]
    )
    for name, ds in parts:
        assert isinstance(ds, Dataset)
        _check_columns(Path(name), ds.column_names, p)
        if len(ds) == 0:
            _empty(Path(name), p, counts)
            continue
        table = ds.select_columns(_columns(p)).data.table
        yield from _table(Path(name), table, p, counts, blocks)


def _table(where: Path, table: Any, p: TableColumns, counts: Counter, blocks: Any) -> Iterator:
    def col(name: str | None) -> list | None:
        return table.column(name).to_pylist() if name is not None else None

    yield from table_sections(
        where,
        col(p.parquet_text_column) or [],
        col(p.parquet_doc_column),
        col(p.parquet_section_column),
        p,
        counts,
        blocks,
    )


@dataclass
class Section:
    doc_key: str
    section_key: str
    paragraphs: list[str]


def expand_paths(paths: list[str]) -> list[Path]:
    """The corpus files that ``paths`` (shard.paths) name, in order: each glob pattern (``~`` and
    ``**`` allowed) sorted, a folder standing for every file below it. A pattern that matches
    nothing, or paths that hold no file, raise CorpusInputError."""
    files: list[Path] = []
    for pattern in paths:
        pattern = os.path.expanduser(pattern)
        matched = sorted(glob.glob(pattern, recursive=True))
        if not matched:
            raise CorpusInputError(f"corpus path {pattern!r} matches no file")
        for m in map(Path, matched):  # a folder stands for every file below it
            files.extend(files_under(m) if m.is_dir() else [m])
    if not files:
        raise CorpusInputError(f"corpus paths {paths} contain no files")
    return files


def detect_format(path: Path, fmt: str) -> str:
    """The reader for a file: ``fmt`` unless it is ``auto``, else by the file name."""
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


def _open_bytes(path: Path) -> AbstractContextManager[BinaryIO]:
    """A truncated or non-gzip ``.gz`` raises CorruptInputError naming the file (no retry)."""
    return open_input(path)


def text_blocks(text: str) -> list[str]:
    """Blank-line separated blocks, lines stripped (their newlines kept: an over-long block is
    split at them, see split_paragraph; the sentence splitter collapses whitespace anyway)."""
    out, cur = [], []
    for line in text.splitlines():
        if line.strip():
            cur.append(line.strip())
        elif cur:
            out.append("\n".join(cur))
            cur = []
    if cur:
        out.append("\n".join(cur))
    return out


def iter_sections(p: CorpusSettings, counts: Counter) -> Iterator[Section]:
    """All sections of the corpus in a deterministic order."""
    hf_seen: set[Path] = set()
    for path in expand_paths(p.paths):
        fmt = detect_format(path, p.format)
        hf = hf_dataset_root(path) if fmt in ("auto", "hf", "text") else None
        if fmt == "hf" and hf is None:
            raise CorpusInputError(f"{path}: not in a folder written by save_to_disk (format hf)")
        if hf is not None:  # a save_to_disk folder: read once, as a dataset, in its order
            if hf not in hf_seen:
                hf_seen.add(hf)
                yield from (Section(*x) for x in hf_sections(hf, p, counts, text_blocks))
            continue
        if path.stat().st_size == 0:
            if p.empty_files == "error":
                raise CorpusInputError(f"{path}: empty file")
            counts["empty_files"] += 1
            continue
        if fmt == "jsonl":
            yield from _jsonl_sections(path, p, counts)
        elif fmt == "parquet":
            yield from (Section(*x) for x in parquet_sections(path, p, counts, text_blocks))
        else:
            with _open_bytes(path) as f:
                text = _decode(f.read(), path, 0, p.encoding_errors)
            blocks = text_blocks(text)
            if not blocks:
                counts["empty_documents"] += 1
                continue
            if p.text_mode == "file":
                yield Section(str(path), f"{path}#0", blocks)
            elif p.text_mode == "lines":  # each line a paragraph, a blank line ends a document
                for i, block in enumerate(blocks):
                    key = str(path) if len(blocks) == 1 else f"{path}:{i}"
                    yield Section(key, f"{key}#0", block.split("\n"))
            else:
                for i, block in enumerate(blocks):
                    yield Section(f"{path}:{i}", f"{path}:{i}#0", [block])


def _jsonl_sections(path: Path, p: CorpusSettings, counts: Counter) -> Iterator[Section]:
    offset = 0
    with _open_bytes(path) as f:
        for lineno, raw in enumerate(f, start=1):
            start, offset = offset, offset + len(raw)
            line = _decode(raw, path, start, p.encoding_errors, lineno).strip()
            if lineno == 1:  # a UTF-8 byte order mark (spreadsheet programs write one)
                line = line.removeprefix("\ufeff").strip()
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
                paras = text_blocks(rec[p.text_field])
            else:
                raise CorpusInputError(
                    f"{path}:{lineno}: record has neither "
                    f"{p.paragraphs_field!r} nor {p.text_field!r}"
                )
            leads = []
            for field in p.lead_fields:
                value = rec.get(field)
                if value is None:
                    continue
                if not isinstance(value, str):
                    raise CorpusInputError(
                        f"{path}:{lineno}: lead field {field!r} must be a string"
                    )
                if value.strip():
                    leads.append(value.strip())
            if leads and paras:
                paras = leads + paras
            if not paras:
                counts["empty_documents"] += 1
                continue
            doc = rec.get(p.doc_field) if p.doc_field else None
            sec = rec.get(p.section_field) if p.section_field else None
            doc_key = f"{path}:{doc}" if doc is not None else f"{path}:{lineno}"
            sec_key = f"{doc_key}#{sec}" if sec is not None else f"{doc_key}#{lineno}"
            yield Section(doc_key, sec_key, paras)


def lead_fields_problem(
    paths: list[str], fmt: str, lead_fields: list[str], files: int = 8, records: int = 200
) -> str | None:
    """Why ``shard.lead_fields`` cannot be what the user meant, or None: a lead field that none
    of the first ``records`` records of the first ``files`` JSON Lines / Parquet files has (it
    was ignored without a word, and ``queries.lead_share`` then asked for lead texts that do not
    exist), or lead fields on a corpus of plain text, which has no fields. A sample, so the
    check costs milliseconds before any work; the message says it was one."""
    if not lead_fields:
        return None
    seen: set[str] = set()
    sampled: list[Path] = []
    for path in expand_paths(paths)[:files]:
        kind = detect_format(path, fmt)
        if kind in ("auto", "hf", "text") and hf_dataset_root(path) is not None:
            return None  # a save_to_disk dataset: its columns are checked when it is read
        if kind == "jsonl":
            seen |= _jsonl_fields(path, records)
        elif kind == "parquet":
            import pyarrow.parquet as pq

            try:
                seen |= set(pq.read_schema(path).names)
            except Exception:  # unreadable: the shard stage names it
                continue
        else:
            continue
        sampled.append(path)
    if not sampled:
        return (
            f"shard.lead_fields {lead_fields}: the corpus is plain text, which has no fields; "
            "remove shard.lead_fields"
        )
    missing = [f for f in lead_fields if f not in seen]
    if not missing:
        return None
    where = str(sampled[0]) + (f" and {len(sampled) - 1} more files" if len(sampled) > 1 else "")
    return (
        f"shard.lead_fields: no record of {where} (first {records} records each) has "
        f"{', '.join(map(repr, missing))}; its records have {', '.join(sorted(seen)) or 'no field'}"
        ": name one of those or remove it"
    )


def _jsonl_fields(path: Path, records: int) -> set[str]:
    """Field names of the first ``records`` JSON objects of a JSON Lines file (bad lines are
    the shard stage's to report, naming their line)."""
    seen: set[str] = set()
    with _open_bytes(path) as f:
        for n, raw in enumerate(f):
            if n >= records:
                break
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict):
                seen |= set(rec)
    return seen
