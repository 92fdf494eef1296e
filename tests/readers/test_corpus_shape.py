"""readers/corpus_shape.py: each corpus shape `ctxsim adapt` reads with no field flags is
recognised from a small fixture of that shape, and its settings read it as meant."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from ctxsim.readers.corpus import CorpusInputError, iter_sections
from ctxsim.readers.corpus_shape import detect_shape
from ctxsim.tasks.shard import ShardParams

WORDS = "the market price of a good rises when demand grows faster than supply".split()


def _sentence(i: int, n: int = 12) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n)).capitalize() + "."


def _paragraph(i: int) -> str:
    return " ".join(_sentence(i + k) for k in range(4))


def _sections(patterns: list[str], settings: dict) -> list:
    p = ShardParams(paths=patterns, **{k: v for k, v in settings.items()})
    return list(iter_sections(p, Counter()))


def test_question_answer_records(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for i in range(60):
            rec = {
                "doc": f"d{i // 3}",
                "section": f"s{i}",
                "title": f"Topic {i // 3}",
                "question": f"What is topic {i} about?",
                "paragraphs": [_paragraph(i), _paragraph(i + 1)],
            }
            f.write(json.dumps(rec) + "\n")
    shape = detect_shape([str(path)])
    assert shape.kind == "records with a lead text"
    assert shape.settings == {
        "paragraphs_field": "paragraphs",
        "doc_field": "doc",
        "section_field": "section",
        "lead_fields": ["question"],
    }
    secs = _sections([str(path)], shape.settings)
    assert len(secs) == 60 and secs[0].paragraphs[0] == "What is topic 0 about?"
    assert 60 * 105 * 0.8 < shape.words_estimate < 60 * 105 * 1.25  # 5 + 2 x 48 words each


def test_textbook_records_name_the_heading_but_do_not_lead_with_it(tmp_path: Path) -> None:
    path = tmp_path / "book.jsonl"
    with open(path, "w") as f:
        for i in range(40):
            rec = {
                "doc": f"m{i // 8}",
                "section": f"m{i // 8}#{i % 8}",
                "title": f"Chapter {i // 8}",
                "heading": f"How prices move, part {i}",
                "paragraphs": [_paragraph(i)],
            }
            f.write(json.dumps(rec) + "\n")
    shape = detect_shape([str(path)])
    assert shape.kind == "records" and shape.settings["lead_fields"] == []
    # the varying heading is found (not the shared title), named, and left for --lead-field
    assert len(shape.notes) == 1 and "'heading'" in shape.notes[0]
    assert "--lead-field heading" in shape.notes[0]


def test_records_with_one_text_and_no_ids(tmp_path: Path) -> None:
    path = tmp_path / "tickets.jsonl"
    path.write_text("".join(json.dumps({"id": i, "body": _paragraph(i)}) + "\n" for i in range(30)))
    shape = detect_shape([str(path)])
    assert shape.kind == "records"
    assert shape.settings == {"text_field": "body", "lead_fields": []}
    assert len(_sections([str(path)], shape.settings)) == 30


def test_plain_documents_without_sections(tmp_path: Path) -> None:
    for d in range(3):
        (tmp_path / f"doc{d}.txt").write_text("\n\n".join(_paragraph(d + k) for k in range(5)))
    shape = detect_shape([str(tmp_path / "*.txt")])
    assert shape.kind == "plain documents"
    assert shape.settings == {"text_mode": "file"} and shape.format == "text"
    secs = _sections([str(tmp_path / "*.txt")], shape.settings)
    assert len(secs) == 3 and all(len(s.paragraphs) == 5 for s in secs)


def test_one_sentence_per_line(tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_text("\n".join(_sentence(i) for i in range(200)) + "\n")
    shape = detect_shape([str(path)])
    assert shape.kind == "one sentence per line"
    assert shape.settings == {"text_mode": "lines"}
    secs = _sections([str(path)], shape.settings)
    assert len(secs) == 1 and len(secs[0].paragraphs) == 200  # each line a paragraph
    assert 200 * 12 * 0.9 < shape.words_estimate < 200 * 12 * 1.1
    # read as plain documents instead, the whole file would be one paragraph
    whole = _sections([str(path)], {"format": "text", "text_mode": "file"})
    assert len(whole[0].paragraphs) == 1


def test_parquet_records(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"doc_id": f"d{i // 4}", "content": _paragraph(i), "n": i} for i in range(20)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    shape = detect_shape([str(tmp_path / "c.parquet")])
    assert shape.settings == {
        "parquet_text_column": "content",
        "parquet_doc_column": "doc_id",
        "parquet_section_column": "doc_id",  # a document's rows flow into each other
    }
    secs = _sections([str(tmp_path / "c.parquet")], shape.settings)
    assert len(secs) == 5 and all(len(s.paragraphs) == 4 for s in secs)


@pytest.mark.parametrize(
    ("files", "pattern", "message"),
    [
        ({}, "nothing/*.jsonl", "matches no file"),
        ({"a.jsonl": '{"x": 1}\n', "b.txt": "text"}, "*", "several formats"),
        ({"a.jsonl": '{"n": 1}\n{"n": 2}\n'}, "a.jsonl", "no record of the first 2 has a text"),
        ({"a.jsonl": '{"text": "ok"}\n{oops\n'}, "a.jsonl", "a.jsonl:2: invalid JSON"),
    ],
)
def test_bad_corpora_are_named_in_one_line(tmp_path, files, pattern, message) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(CorpusInputError, match=message) as e:
        detect_shape([str(tmp_path / pattern)])
    assert "\n" not in str(e.value)
