"""Readers for corpora users bring, beside the plain-text and JSON Lines readers of the shard
stage (tasks/shard.py): tables with a named text column and optional document / section id
columns, as Parquet files or as a Hugging Face dataset saved with ``Dataset.save_to_disk``.

Why one table reader for both: a row is a piece of text (paragraphs split on blank lines);
consecutive rows with the same document id form one document (a document spans shards never),
and with a section column, consecutive rows with the same section id form one section, so a
context window may cross rows of a section but never a section boundary. Without a section
column every row is a section of its own (the shard stage's behaviour for Parquet so far).

Bad input raises ``CorpusInputError`` naming the file (or dataset folder) and the column or row.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from ctxsim.store.errors import InputError

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
    return [
        c
        for c in (p.parquet_text_column, p.parquet_doc_column, p.parquet_section_column)
        if c is not None
    ]


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
    text into paragraphs (tasks/shard.py ``_blocks``)."""
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
