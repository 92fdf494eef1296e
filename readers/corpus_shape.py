"""What a corpus looks like, read from a sample before any work: its format, which fields hold
the text, the documents, the sections and the lead texts (a question put before its text), and
about how many words it has. `ctxsim adapt` turns the answer into `shard` settings,
so a user names no field when the shape can be recognised.

Shapes recognised (each with a fixture in tests/readers/test_corpus_shape.py):

- **records with a lead text**: JSON Lines / Parquet records whose text (``paragraphs`` or
  ``text``) follows a short field named like a question (``LEAD_NAMES``): the lead is put before
  its text, so its right context is its own text (a heading field, ``HEADING_NAMES``, is named in
  a note but not put before the text unless asked);
- **records**: JSON Lines / Parquet records with a text and perhaps document and section ids;
- **plain documents**: text files, paragraphs separated by blank lines, one document per file;
- **one sentence per line**: text files without blank lines between short lines: each line a
  paragraph (``shard.text_mode: lines``), so a context is a few lines, not the whole file.

A sample (the first ``SAMPLE_RECORDS`` records or ``SAMPLE_BYTES`` bytes of the first
``SAMPLE_FILES`` files) decides; the word count is the sample's words per byte times the
corpus's bytes (compressed files: times the sample's compression ratio), an estimate that the
shard stage's counts replace.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxsim.readers.corpus import CorpusInputError, detect_format, expand_paths, text_blocks

SAMPLE_FILES = 8
SAMPLE_RECORDS = 200
SAMPLE_BYTES = 1 << 20
#: field names read as a lead text, by preference (the first one present that varies per
#: record): a question the record's text answers, put before it
LEAD_NAMES = ("question", "query")
#: field names read as a heading: found and named, not put before the text (a heading as the lead
#: measured below no lead on economics' dev task: docs/adapt-measured.md); --lead-field puts it
HEADING_NAMES = ("heading", "header", "subject", "title")
#: field names read as the document id, then as the section id, by preference
DOC_NAMES = ("doc", "doc_id", "document", "document_id", "url", "source_id", "book")
SECTION_NAMES = ("section", "section_id", "chapter", "part")
#: a text file whose lines have at most this many words (median) and no blank lines between
#: most of them is one sentence (or short paragraph) per line
LINE_WORDS = 40
_WORD = re.compile(r"\S+")


@dataclass
class CorpusShape:
    """The answer: the shape's name, the file format (found from the names, as `shard` finds
    it: not a setting), the `shard` settings that read it, the files and words."""

    kind: str
    format: str
    settings: dict[str, Any]
    files: int
    bytes: int
    words_estimate: int
    fields: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        keys = ", ".join(f"{k}={v}" for k, v in self.settings.items()) or "defaults"
        return (
            f"{self.kind} ({self.format}): {self.files} file(s), {self.bytes / 1e6:.1f} MB, about "
            f"{self.words_estimate:,} words; read with {keys}"
        )


def _open_text(path: Path):  # noqa: ANN202 - a text stream
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _sample_records(path: Path, limit: int) -> tuple[list[dict], int]:
    """The first ``limit`` JSON objects of a JSON Lines file and the uncompressed bytes read."""
    out: list[dict] = []
    read = 0
    with _open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            read += len(line.encode("utf-8"))
            if not line.strip():
                continue
            try:
                rec = json.loads(line.removeprefix("\ufeff"))
            except json.JSONDecodeError as e:
                raise CorpusInputError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            if isinstance(rec, dict):
                out.append(rec)
            if len(out) >= limit:
                break
    return out, read


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(_WORD.findall(value))
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    return 0


def _text_field(records: list[dict]) -> tuple[str, str] | None:
    """("paragraphs_field" | "text_field", name): the list-of-strings field or the string field
    with the most words per record."""
    counts: Counter = Counter()
    kinds: dict[str, str] = {}
    for rec in records:
        for key, value in rec.items():
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                kinds[key] = "paragraphs_field"
                counts[key] += _words(value)
            elif isinstance(value, str):
                kinds.setdefault(key, "text_field")
                counts[key] += _words(value)
    if not counts:
        return None
    name, _ = counts.most_common(1)[0]
    return kinds[name], name


def _id_field(records: list[dict], names: tuple[str, ...], skip: set[str]) -> str | None:
    """The first of ``names`` that every sampled record has (consecutive records with one value
    form one document or section)."""
    return next((n for n in names if n not in skip and all(n in r for r in records)), None)


def _lead_field(
    records: list[dict], text_words: float, skip: set[str], names: tuple[str, ...] = LEAD_NAMES
) -> str | None:
    """The first of ``names`` that most records have as a short string (fewer words than a
    fifth of the text) and that varies between records of one document."""
    for name in names:
        if name in skip:
            continue
        values = [r.get(name) for r in records]
        strings = [v for v in values if isinstance(v, str) and v.strip()]
        if len(strings) < 0.8 * len(records) or not strings:
            continue
        mean_words = statistics.fmean(_words(v) for v in strings)
        if mean_words > max(3.0, text_words / 5) or mean_words > 40:
            continue
        if len(set(strings)) < 0.5 * len(strings):  # a title shared by many records
            continue
        return name
    return None


def _records_shape(
    records: list[dict], where: Path
) -> tuple[str, dict[str, Any], list[str], list[str]]:
    text = _text_field(records)
    if text is None:
        raise CorpusInputError(
            f"{where}: no record of the first {len(records)} has a text field (a string or a "
            "list of strings); name it with --text-field"
        )
    kind, name = text
    settings: dict[str, Any] = {kind: name}
    used = {name}
    doc = _id_field(records, DOC_NAMES, used)
    if doc:
        settings["doc_field"] = doc
        used.add(doc)
    # no section id: a document's consecutive records are one section (contexts flow across)
    section = _id_field(records, SECTION_NAMES, used) or doc
    if section:
        settings["section_field"] = section
        used.add(section)
    text_words = statistics.fmean(_words(r.get(name)) for r in records)
    lead = _lead_field(records, text_words, used)
    settings["lead_fields"] = [lead] if lead else []
    fields = sorted({k for r in records for k in r})
    notes = []
    heading = None if lead else _lead_field(records, text_words, used, HEADING_NAMES)
    if heading:
        notes.append(
            f"field {heading!r} reads as a heading: not put before the text (no gain measured "
            f"from a heading lead); --lead-field {heading} puts it"
        )
    return ("records with a lead text" if lead else "records"), settings, fields, notes


def _text_shape(paths: list[Path]) -> tuple[str, dict[str, Any], int, int]:
    """(kind, settings, sample bytes, sample words) of plain-text files."""
    blocks_lines: list[int] = []
    line_words: list[int] = []
    read = words = 0
    for path in paths:
        with _open_text(path) as f:
            text = f.read(SAMPLE_BYTES)
        read += len(text.encode("utf-8"))
        words += _words(text)
        for block in text_blocks(text):
            lines = block.split("\n")
            blocks_lines.append(len(lines))
            line_words += [_words(x) for x in lines]
    if not line_words:
        return "plain documents", {"text_mode": "file"}, read, words
    many_lines = statistics.median(blocks_lines) >= 5
    if many_lines and statistics.median(line_words) <= LINE_WORDS:
        return "one sentence per line", {"text_mode": "lines"}, read, words
    return "plain documents", {"text_mode": "file"}, read, words


def _stored_bytes(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


def _text_bytes(paths: list[Path]) -> int:
    """The corpus's bytes once decompressed: a gzip file's own record of its size (ISIZE, the
    last 4 bytes: exact below 4 GiB; a wrapped one counts as 4x its stored size)."""
    total = 0
    for path in paths:
        size = path.stat().st_size
        if path.name.endswith(".gz") and size >= 18:
            with open(path, "rb") as f:
                f.seek(-4, 2)
                isize = int.from_bytes(f.read(4), "little")
            total += isize if isize >= size else 4 * size
        else:
            total += size
    return total


def detect_shape(patterns: list[str]) -> CorpusShape:
    """The shape of the corpus the globs ``patterns`` name; a pattern that matches nothing, a
    corpus of several formats or a sample with no text is a CorpusInputError naming it."""
    for pattern in patterns:
        if not expand_paths([pattern]):
            raise CorpusInputError(f"corpus: {pattern!r} matches no file")
    paths = expand_paths(patterns)
    formats = {detect_format(p, "auto") for p in paths}
    if len(formats) > 1:
        raise CorpusInputError(
            f"corpus: files of several formats ({', '.join(sorted(formats))}); give one kind"
        )
    fmt = formats.pop()
    total = _stored_bytes(paths)
    sample = paths[:SAMPLE_FILES]
    if fmt == "jsonl":
        records: list[dict] = []
        read = 0
        for path in sample:
            got, n = _sample_records(path, SAMPLE_RECORDS)
            records += got
            read += n
        if not records:
            raise CorpusInputError(f"corpus: no JSON object in {sample[0]}")
        kind, settings, fields, notes = _records_shape(records, sample[0])
        words = sum(_words(r.get(k)) for r in records for k in _text_keys(settings))
        estimate = int(words / max(read, 1) * _text_bytes(paths))  # words per byte read
        return CorpusShape(kind, "jsonl", settings, len(paths), total, estimate, fields, notes)
    if fmt == "parquet":
        return _parquet_shape(paths, total)
    kind, settings, read, words = _text_shape(sample)
    estimate = int(words / max(read, 1) * _text_bytes(paths))
    return CorpusShape(kind, "text", settings, len(paths), total, estimate)


def _text_keys(settings: dict[str, Any]) -> list[str]:
    keys = [settings.get("paragraphs_field"), settings.get("text_field")]
    return [k for k in keys if k] + list(settings.get("lead_fields", []))


def _parquet_shape(paths: list[Path], total: int) -> CorpusShape:
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(paths[0]).read_row_group(0)
    except Exception as e:  # noqa: BLE001 - pyarrow's own errors for a damaged file
        raise CorpusInputError(f"{paths[0]}: not a readable Parquet file ({e})") from None
    records = table.slice(0, SAMPLE_RECORDS).to_pylist()
    strings = [c for c in table.column_names if all(isinstance(r.get(c), str) for r in records)]
    if not records or not strings:
        raise CorpusInputError(f"{paths[0]}: no string column to read as the text")
    text = max(strings, key=lambda c: sum(_words(r[c]) for r in records))
    settings: dict[str, Any] = {"parquet_text_column": text}
    doc = _id_field(records, DOC_NAMES, {text})
    if doc:
        settings["parquet_doc_column"] = doc
    section = _id_field(records, SECTION_NAMES, {text, doc or ""}) or doc
    if section:
        settings["parquet_section_column"] = section
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
    per_row = statistics.fmean(_words(r[text]) for r in records)
    return CorpusShape(
        "records",
        "parquet",
        settings,
        len(paths),
        total,
        int(per_row * rows),
        list(table.column_names),
    )
