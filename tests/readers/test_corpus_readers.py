"""Corpora users bring (readers/corpus.py through the shard stage): a folder of text files,
JSON Lines and Parquet with named columns, a Hugging Face dataset saved to disk; bad input names
its file and its line or column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
from ctxsim.tasks.shard import CorpusInputError, ShardParams, ShardStage

P1 = "The kettle boiled at seven. Anna poured the tea into two cups."
P2 = "Her brother was still asleep. She left his cup on the desk."
P3 = "The train left the station late. Nobody on the platform seemed to mind."
SENTS = [s for p in (P1, P2, P3) for s in (p.split(". ")[0] + ".", p.split(". ")[1])]


def shard(tmp_path: Path, **params):
    store = ArtefactStore(tmp_path / "root")
    plan = resolve_stage(ShardStage(), ShardParams(n_shards=1, **params), RunParams(), store, {})
    art, _ = run_stage_locally(plan)
    return art.read_table().sort_by("sent_id")


def _by_section(t: pa.Table) -> list[list[str]]:
    out: dict[int, list[str]] = {}
    for sec, text in zip(
        t.column("section_id").to_pylist(), t.column("text").to_pylist(), strict=True
    ):
        out.setdefault(sec, []).append(text)
    return list(out.values())


def _rows():
    # two rows of one section of book a, then one row of another section, then book b
    return {
        "body": [P1, P2, P3, P1],
        "book": ["a", "a", "a", "b"],
        "chapter": [1, 1, 2, 1],
    }


def test_text_folder_paragraphs_split_on_blank_lines(tmp_path: Path) -> None:
    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text(f"{P1}\n\n{P2}\n")
    (d / "sub" / "b.txt").write_text(f"{P3}\n")
    t = shard(tmp_path, paths=[str(d)])
    assert t.column("text").to_pylist() == SENTS
    assert t.column("para_idx").to_pylist() == [0, 0, 1, 1, 0, 0]
    assert len(set(t.column("doc_id").to_pylist())) == 2


def test_jsonl_named_text_doc_and_section_fields(tmp_path: Path) -> None:
    rows = _rows()
    p = tmp_path / "c.jsonl"
    p.write_text(
        "".join(
            json.dumps({"body": b, "book": k, "chapter": c}) + "\n"
            for b, k, c in zip(rows["body"], rows["book"], rows["chapter"], strict=True)
        )
    )
    t = shard(
        tmp_path, paths=[str(p)], text_field="body", doc_field="book", section_field="chapter"
    )
    assert t.column("text").to_pylist() == SENTS + SENTS[:2]
    assert len(set(t.column("doc_id").to_pylist())) == 2


def test_parquet_doc_and_section_columns_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "c.parquet"
    pq.write_table(pa.table(_rows()), p)
    cols = dict(parquet_text_column="body", parquet_doc_column="book")
    t = shard(tmp_path, paths=[str(p)], parquet_section_column="chapter", **cols)
    assert t.column("text").to_pylist() == SENTS + SENTS[:2]
    # rows of one section form one section (a context may cross them), others do not
    assert _by_section(t) == [SENTS[:4], SENTS[4:], SENTS[:2]]
    assert len(set(t.column("doc_id").to_pylist())) == 2
    # without a section column every row is a section of its own
    t2 = shard(tmp_path / "x", paths=[str(p)], **cols)
    assert _by_section(t2) == [SENTS[:2], SENTS[2:4], SENTS[4:], SENTS[:2]]


def test_hf_dataset_saved_to_disk_round_trip(tmp_path: Path) -> None:
    from datasets import Dataset, DatasetDict

    d = tmp_path / "ds"
    Dataset.from_dict(_rows()).save_to_disk(str(d))
    cols = dict(parquet_text_column="body", parquet_doc_column="book")
    t = shard(tmp_path, paths=[str(d)], parquet_section_column="chapter", **cols)
    assert t.column("text").to_pylist() == SENTS + SENTS[:2]
    assert _by_section(t) == [SENTS[:4], SENTS[4:], SENTS[:2]]
    # named explicitly, and a DatasetDict (splits in name order)
    t2 = shard(tmp_path / "x", paths=[str(d)], format="hf", **cols)
    assert t2.column("text").to_pylist() == t.column("text").to_pylist()
    dd = tmp_path / "dd"
    DatasetDict({"b": Dataset.from_dict({"body": [P3]}), "a": Dataset.from_dict({"body": [P1]})})
    DatasetDict(
        {"b": Dataset.from_dict({"body": [P3]}), "a": Dataset.from_dict({"body": [P1]})}
    ).save_to_disk(str(dd))
    t3 = shard(tmp_path / "y", paths=[str(dd)], parquet_text_column="body")
    assert t3.column("text").to_pylist() == SENTS[:2] + SENTS[4:]


def test_bad_input_names_the_file(tmp_path: Path) -> None:
    # undecodable bytes: file, byte offset and line
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Fine words here today.\n\nBroken \xff byte in this line.")
    with pytest.raises(CorpusInputError, match=r"bad\.txt: invalid UTF-8 .* \(line 3\)"):
        shard(tmp_path, paths=[str(bad)])
    badj = tmp_path / "bad.jsonl"
    badj.write_bytes(b'{"text": "A fine sentence is here."}\n{"text": "Broken \xff"}\n')
    with pytest.raises(CorpusInputError, match=r"bad\.jsonl: invalid UTF-8 .* \(line 2\)"):
        shard(tmp_path, paths=[str(badj)])
    # a missing column: file and column (and the setting that names it)
    p = tmp_path / "c.parquet"
    pq.write_table(pa.table(_rows()), p)
    with pytest.raises(CorpusInputError, match=r"c\.parquet: no column 'text'"):
        shard(tmp_path, paths=[str(p)])
    with pytest.raises(CorpusInputError, match=r"c\.parquet: no column 'sec'.*section_column"):
        shard(tmp_path, paths=[str(p)], parquet_text_column="body", parquet_section_column="sec")
    from datasets import Dataset

    d = tmp_path / "ds"
    Dataset.from_dict(_rows()).save_to_disk(str(d))
    with pytest.raises(CorpusInputError, match=r"ds: no column 'text'"):
        shard(tmp_path, paths=[str(d)])
    # a text column that is not text: file, row and column
    q = tmp_path / "n.parquet"
    pq.write_table(
        pa.table({"text": [P1, None], "n": [1, 2]}).select(["n"]).rename_columns(["text"]), q
    )
    with pytest.raises(CorpusInputError, match=r"n\.parquet: row 0 of column 'text' is int"):
        shard(tmp_path, paths=[str(q)])
    # empty files: an error when asked for, else skipped and counted
    (tmp_path / "e").mkdir()
    empty = tmp_path / "e" / "empty.txt"
    empty.write_text("")
    (tmp_path / "e" / "ok.txt").write_text(P1)
    with pytest.raises(CorpusInputError, match=r"empty\.txt: empty file"):
        shard(tmp_path, paths=[str(tmp_path / "e")], empty_files="error")
    e2 = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), e2)
    with pytest.raises(CorpusInputError, match=r"empty\.parquet: empty file"):
        shard(tmp_path, paths=[str(e2)], empty_files="error")
    with pytest.raises(CorpusInputError, match="no non-empty document"):
        shard(tmp_path, paths=[str(e2)])
