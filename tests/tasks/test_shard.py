"""Stage `shard` (and `contexts`, `queries`): readers, ids, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.errors import InputError
from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
from ctxsim.tasks.contexts import ContextsParams, ContextsStage, build_contexts
from ctxsim.tasks.shard import CorpusInputError, ShardParams, ShardStage

DOC = (
    "The kettle boiled at seven. Anna poured the tea into two cups. She carried them upstairs.\n\n"
    "Her brother was still asleep. She left his cup on the desk. The sun came through the window."
)


def run_shard(tmp_path: Path, **params) -> pa.Table:
    store = ArtefactStore(tmp_path / "root")
    plan = resolve_stage(ShardStage(), ShardParams(**params), RunParams(), store, {})
    art, _ = run_stage_locally(plan)
    return art.read_table().sort_by("sent_id"), art


def test_text_files_one_document_per_file(tmp_path: Path):
    (tmp_path / "a.txt").write_text(DOC)
    (tmp_path / "b.txt").write_text(DOC.replace("Anna", "Maria"))
    table, art = run_shard(tmp_path, paths=[str(tmp_path / "*.txt")], n_shards=2)
    assert table.num_rows == 12
    assert sorted(set(table.column("doc_id").to_pylist())) == [0, 1]
    first = table.filter(pa.compute.equal(table.column("doc_id"), 0))
    assert first.column("para_idx").to_pylist() == [0, 0, 0, 1, 1, 1]
    assert first.column("sent_idx").to_pylist() == list(range(6))
    assert first.column("text").to_pylist()[1] == "Anna poured the tea into two cups."
    assert art.stats["documents"] == 2 and art.stats["sentences"] == 12


def test_ids_do_not_depend_on_shard_count(tmp_path: Path):
    for i in range(5):
        (tmp_path / f"d{i}.txt").write_text(DOC.replace("seven", f"{i + 5} o'clock"))
    one, _ = run_shard(tmp_path / "x", paths=[str(tmp_path / "*.txt")], n_shards=1)
    three, _ = run_shard(tmp_path / "y", paths=[str(tmp_path / "*.txt")], n_shards=3)
    cols = ["sent_id", "doc_id", "section_id", "sent_idx", "text"]
    assert one.select(cols).equals(three.select(cols))


def test_jsonl_gz_books_format_sections(tmp_path: Path):
    recs = [
        {
            "book": "b1",
            "section": "ch1",
            "paragraphs": ["One two three four. Five six seven eight."],
        },
        {"book": "b1", "section": "ch2", "paragraphs": ["Nine ten eleven twelve.", ""]},
        {"book": "b2", "section": "ch1", "paragraphs": []},
    ]
    path = tmp_path / "c.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in recs) + "\n")
    table, art = run_shard(tmp_path, paths=[str(path)], n_shards=1)
    assert table.column("section_id").to_pylist() == [0, 0, 1]
    assert table.column("doc_id").to_pylist() == [0, 0, 0]
    assert art.stats["empty_documents"] == 1


def test_parquet_reader(tmp_path: Path):
    pq.write_table(pa.table({"body": [DOC, ""], "name": ["x", "y"]}), tmp_path / "c.parquet")
    table, art = run_shard(
        tmp_path,
        paths=[str(tmp_path / "c.parquet")],
        parquet_text_column="body",
        parquet_doc_column="name",
        n_shards=1,
    )
    assert table.num_rows == 6 and art.stats["empty_documents"] == 1


def test_parquet_null_text_cells_are_counted_warned_and_can_fail(tmp_path: Path, caplog):
    """A null text cell dropped its document with the console saying the file kept 100% of its
    text (only `empty_documents: 1` in the stats): now counted, warned about by file, and with
    shard.null_cells: error an error naming the file and the column."""
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": [DOC, None, DOC.replace("Anna", "Eva")]}), path)
    common = dict(paths=[str(path)], parquet_text_column="body", n_shards=2)
    with caplog.at_level("WARNING"):
        table, art = run_shard(tmp_path, **common)
    assert table.num_rows == 12 and art.stats["null_text_cells"] == 1  # once, not per shard
    assert art.stats[f"null_text_cells:{path}"] == 1
    warned = [r.getMessage() for r in caplog.records if "null" in r.getMessage()]
    assert warned == [
        "shard: dropped 1 rows whose text column 'body' is null (not counted in the kept-text "
        f"shares; shard.null_cells: error fails on them) in: {path} (1)"
    ]
    with pytest.raises(CorpusInputError) as e:
        run_shard(tmp_path / "strict", **common, null_cells="error")
    assert str(e.value) == (
        f"{path} (1): 1 null cell(s) in text column 'body' (shard.null_cells: error; skip drops "
        "their rows and counts them)"
    )
    # a check, not an input of the sentences: the fingerprint stays that of the skip run
    store = ArtefactStore(tmp_path / "root")
    plan = resolve_stage(
        ShardStage(), ShardParams(**common, null_cells="error"), RunParams(), store, {}
    )
    assert plan.fingerprint == art.fingerprint


def test_non_utf8_names_file_and_byte_offset(tmp_path: Path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Fine words here today.\n\nBroken \xff byte in this line.")
    with pytest.raises(CorpusInputError, match=r"bad\.txt: invalid UTF-8 at byte offset 31"):
        run_shard(tmp_path, paths=[str(bad)], n_shards=1)
    table, _ = run_shard(tmp_path, paths=[str(bad)], n_shards=1, encoding_errors="replace")
    assert "\ufffd" in "".join(table.column("text").to_pylist())


def test_jsonl_bad_line_names_line(tmp_path: Path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"text": "A fine sentence is here."}\n{oops\n')
    with pytest.raises(CorpusInputError, match=r"c\.jsonl:2: invalid JSON"):
        run_shard(tmp_path, paths=[str(p)], n_shards=1)


def test_empty_files_and_missing_paths(tmp_path: Path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n\n  \n")
    (tmp_path / "ok.txt").write_text(DOC)
    table, art = run_shard(tmp_path, paths=[str(tmp_path / "*.txt")], n_shards=1)
    assert table.num_rows == 6
    assert art.stats["empty_files"] == 1 and art.stats["empty_documents"] == 1
    with pytest.raises(CorpusInputError, match="matches no file"):
        run_shard(tmp_path, paths=[str(tmp_path / "nothing*.txt")])
    only_empty = tmp_path / "e"
    only_empty.mkdir()
    (only_empty / "e.txt").write_text("")
    with pytest.raises(CorpusInputError, match="no non-empty document"):
        run_shard(tmp_path, paths=[str(only_empty / "*.txt")])


def test_single_10mb_line_is_dropped_with_a_reason(tmp_path: Path):
    p = tmp_path / "huge.txt"
    p.write_text(DOC + "\n\n" + ("word " * 2_100_000) + "\n\n" + DOC)
    # 10 MB without a sentence end is split anyway, and every piece is over max_tokens: the file
    # keeps almost nothing of its text, which fails the run, naming the file and the setting.
    with pytest.raises(CorpusInputError, match=r"min_kept_share=0.25 .*huge.txt kept 0.0%"):
        run_shard(tmp_path, paths=[str(p)], n_shards=1)
    table, art = run_shard(tmp_path, paths=[str(p)], n_shards=1, min_kept_share=0.0)
    assert art.stats["split_paragraphs"] == 1 and art.stats["dropped_too_long"] >= 1
    assert table.num_rows == 12
    # The dropped sentences leave a gap in sent_idx, so no context spans them.
    sent_idx = table.column("sent_idx").to_pylist()
    assert sent_idx[:6] == list(range(6)) and sent_idx[6] > 6
    assert sent_idx[6:] == list(range(sent_idx[6], sent_idx[6] + 6))


def test_plain_text_book_with_single_newlines_gives_its_sentences(tmp_path: Path):
    """A book with one paragraph per line and no blank line is one 250k-character block: it is
    split at its line ends into paragraphs, not dropped; hard-wrapped prose without blank lines
    is split too, but never in the middle of a sentence."""
    from ctxsim.models.corpus.sentences import split_sentences

    lines = [
        f"Chapter {i} began when the kettle boiled at seven. Anna poured {i} cups of tea."
        for i in range(3200)
    ]
    (tmp_path / "book.txt").write_text("\n".join(lines) + "\n")
    table, art = run_shard(tmp_path, paths=[str(tmp_path / "book.txt")], n_shards=1)
    assert table.num_rows == 2 * len(lines)
    assert table.column("para_idx").to_pylist() == [i // 2 for i in range(2 * len(lines))]
    assert table.column("sent_idx").to_pylist() == list(range(2 * len(lines)))
    assert art.stats["split_paragraphs"] == 1 and art.stats["kept_text_share"] == 1.0

    prose = " ".join(lines)
    wrapped, line = [], ""
    for word in prose.split(" "):
        if len(line) + len(word) >= 60:
            wrapped.append(line)
            line = ""
        line = f"{line} {word}".strip()
    wrapped.append(line)
    (tmp_path / "wrapped.txt").write_text("\n".join(wrapped) + "\n")
    table, _ = run_shard(tmp_path / "w", paths=[str(tmp_path / "wrapped.txt")], n_shards=1)
    assert table.column("text").to_pylist() == split_sentences(prose)


def test_files_losing_their_text_warn_and_fail_by_name(tmp_path: Path, caplog):
    """Sentences dropped by the length filters are logged per file; a file that keeps under
    shard.min_kept_share of its text fails the stage with its name. The setting is a check, not
    an input: changing it keeps the fingerprint (nothing is recomputed)."""
    import logging

    long_sentence = "Many " + " ".join(["words"] * 90) + "."
    (tmp_path / "good.txt").write_text("\n\n".join([DOC, long_sentence, DOC, DOC]))
    (tmp_path / "bad.txt").write_text((long_sentence + " ") * 20 + "\n\n" + DOC)
    paths = [str(tmp_path / "*.txt")]
    with pytest.raises(CorpusInputError) as err:
        run_shard(tmp_path, paths=paths, n_shards=2)
    msg = str(err.value)
    assert "shard.min_kept_share=0.25" in msg and "bad.txt kept" in msg and "good.txt" not in msg
    assert "dropped 20 over max_tokens=80" in msg
    store = ArtefactStore(tmp_path / "root")
    fps = {
        resolve_stage(
            ShardStage(), ShardParams(paths=paths, min_kept_share=x), RunParams(), store, {}
        ).fingerprint
        for x in (0.0, 0.25, 0.9)
    }
    assert len(fps) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        table, art = run_shard(tmp_path, paths=paths, n_shards=2, min_kept_share=0.01)
    assert table.num_rows == 24 and art.stats["dropped_too_long"] == 21
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "dropped 21 sentences" in warning and "bad.txt" in warning and "good.txt" in warning


def test_length_bounds_drop_and_count(tmp_path: Path):
    (tmp_path / "a.txt").write_text("Hi. " + DOC)
    table, art = run_shard(tmp_path, paths=[str(tmp_path / "a.txt")], n_shards=1, min_tokens=3)
    assert art.stats["dropped_too_short"] == 1
    assert table.column("sent_idx").to_pylist()[0] == 1


def test_shard_and_contexts_parquet_do_not_depend_on_batching(tmp_path: Path, monkeypatch):
    """shard hands its rows to Arrow every FLUSH_ROWS rows, and contexts builds its id lists
    from arrays: the artefacts' Parquet bytes are those of one batch. The corpus has over 1 MB
    of distinct sentence text, where a text column left in batches moves its page breaks."""
    import ctxsim.tasks.shard as shard_mod

    rng = np.random.default_rng(0)
    vocab = ["".join(rng.choice(list("abcdefghij"), 6)) for _ in range(3000)]
    sentences = [" ".join(rng.choice(vocab, 8)).capitalize() + "." for _ in range(20_000)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(sentences[i : i + 5]) for i in range(0, 20_000, 5)))

    def parts(root: Path) -> tuple[list[bytes], pa.Table]:
        store, run = ArtefactStore(root), RunParams()
        params = ShardParams(paths=[str(corpus)], n_shards=1)
        sh, _ = run_stage_locally(resolve_stage(ShardStage(), params, run, store, {}))
        ctx, _ = run_stage_locally(
            resolve_stage(ContextsStage(), ContextsParams(width=2), run, store, {"shard": sh})
        )
        files = [f for art in (sh, ctx) for f in sorted(art.path.rglob("*.parquet"))]
        assert sh.stats["sentences"] == 20_000 and sh.stats["documents"] == 1
        return [f.read_bytes() for f in files], ctx.read_table()

    one, _ = parts(tmp_path / "one")
    monkeypatch.setattr(shard_mod, "FLUSH_ROWS", 1000)
    many, table = parts(tmp_path / "many")
    assert len(one) >= 3 and many == one
    for side in ("left_sent_ids", "right_sent_ids"):  # width 2: two ids a side
        assert set(pa.compute.list_value_length(table.column(side)).to_pylist()) == {2}


def test_build_contexts_windows_stay_inside_sections_and_skip_gaps():
    sent_id = np.arange(10)
    section = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    para = np.array([0, 0, 1, 1, 0, 0, 0, 1, 1, 1])
    idx = np.array([0, 1, 2, 3, 0, 1, 2, 4, 5, 6])  # a gap between sentences 6 and 7
    ctx, chunks = build_contexts(sent_id, section, section, para, idx, 1, "paragraph", 5)
    assert ctx["centre_sent_id"].tolist() == [1, 2, 5, 8]
    assert ctx["left_sent_ids"].tolist() == [[0], [1], [4], [7]]
    assert ctx["right_sent_ids"].tolist() == [[2], [3], [6], [9]]
    assert chunks["first_sent_id"].tolist() == [0, 2, 4, 7]
    assert ctx["chunk_id"].tolist() == [0, 1, 2, 3]
    wide, _ = build_contexts(sent_id, section, section, para, idx, 2, "window", 3)
    assert wide["centre_sent_id"].tolist() == []  # no 5 consecutive sentences in one section
    five = np.zeros(5, dtype=int)
    wide, chunks = build_contexts(np.arange(5), five, five, five, np.arange(5), 2, "window", 3)
    assert wide["centre_sent_id"].tolist() == [2] and wide["left_sent_ids"].tolist() == [[0, 1]]
    assert chunks["n_sents"].tolist() == [3, 2]


def test_contexts_stage_on_spine(spine):
    ctx = spine["contexts"].read_table()
    sents = spine["shard"].read_table(["sent_id", "section_id"])
    section_of = dict(
        zip(*(sents.column(c).to_pylist() for c in ("sent_id", "section_id")), strict=True)
    )
    for row in ctx.slice(0, 200).to_pylist():
        ids = row["left_sent_ids"] + [row["centre_sent_id"]] + row["right_sent_ids"]
        assert ids == list(range(ids[0], ids[0] + len(ids)))
        assert {section_of[i] for i in ids} == {row["section_id"]}
    assert (spine["contexts"].files_dir / "chunks.parquet").exists()


def test_queries_sample_is_seeded_and_sharded(spine):
    q = spine["queries"].read_table()
    assert q.num_rows == 60
    assert set(q.column("shard").to_pylist()) == {0, 1}
    assert spine["queries"].stats["n_shards"] == 2
    assert q.column("sent_id").null_count == 0


def test_contexts_params_reject_bad_width():
    with pytest.raises(ValueError):
        ContextsParams(width=0)
    assert ContextsStage.inputs == ("shard",)


def test_fingerprint_follows_content_not_mtime(tmp_path: Path, monkeypatch):
    """A corpus re-extracted or re-copied in place (new mtimes, same bytes) keeps its
    fingerprint, so a rerun reuses everything; one changed byte gives a new fingerprint."""
    import os
    import shutil

    monkeypatch.setenv("CTXSIM_DIGEST_CACHE", str(tmp_path / "digests.json"))
    src = tmp_path / "corpus"
    src.mkdir()
    (src / "a.txt").write_text(DOC)
    (src / "b.txt").write_text(DOC.replace("Anna", "Maria"))
    store = ArtefactStore(tmp_path / "root")

    def fp() -> str:
        params = ShardParams(paths=[str(src / "*.txt")])
        return resolve_stage(ShardStage(), params, RunParams(), store, {}).fingerprint

    first = fp()
    shutil.copytree(src, tmp_path / "backup")
    shutil.rmtree(src)
    shutil.copytree(tmp_path / "backup", src)  # copytree keeps mtimes: move them on purpose
    os.utime(src / "a.txt", (1_000_000_000, 1_000_000_000))
    assert fp() == first
    (src / "b.txt").write_text(DOC.replace("Anna", "Marie"))  # same size, new content
    assert fp() != first
    assert json.loads((tmp_path / "digests.json").read_text())  # digests are remembered


def test_lead_fields_put_the_question_before_its_answer_and_queries_mix_them(tmp_path: Path):
    """MedQuAD-style records: with shard.lead_fields the question is the first paragraph of its
    section (so its right context is the answer); queries.lead_share draws that share of the
    queries from first paragraphs. Both keys stay out of the fingerprint at their defaults."""
    from ctxsim.tasks.queries import QueriesParams, QueriesStage

    recs = [
        {
            "doc": f"d{i}",
            "section": f"{i}-1",
            "question": f"What causes disease number {i} in adults ?",
            "paragraphs": [
                f"Disease {i} is caused by a gene change. It affects the liver and the kidneys."
            ],
        }
        for i in range(10)
    ]
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    common = {"paths": [str(path)], "doc_field": "doc", "section_field": "section", "n_shards": 1}
    plain, _ = run_shard(tmp_path / "a", **common)
    assert "What causes disease number 0 in adults ?" not in plain.column("text").to_pylist()
    store = ArtefactStore(tmp_path / "b")
    run = RunParams()
    shard, _ = run_stage_locally(
        resolve_stage(ShardStage(), ShardParams(**common, lead_fields=["question"]), run, store, {})
    )
    table = shard.read_table().sort_by("sent_id")
    first = table.slice(0, 3).to_pylist()
    assert [r["text"] for r in first] == [
        "What causes disease number 0 in adults ?",
        "Disease 0 is caused by a gene change.",
        "It affects the liver and the kidneys.",
    ]
    assert [r["para_idx"] for r in first] == [0, 1, 1]
    assert len({r["section_id"] for r in first}) == 1
    ctx_art, _ = run_stage_locally(
        resolve_stage(ContextsStage(), ContextsParams(), run, store, {"shard": shard})
    )
    ups = {"shard": shard, "contexts": ctx_art}

    def queries(**kw):
        params = QueriesParams(n_corpus=10, only_context_centres=False, min_tokens=3, **kw)
        art, _ = run_stage_locally(resolve_stage(QueriesStage(), params, run, store, ups))
        return art.read_table().column("text").to_pylist()

    mixed = queries(lead_share=0.5)
    assert sum(t.startswith("What causes") for t in mixed) == 5
    assert all(t.startswith("What causes") for t in queries(lead_share=1.0))
    assert not any(t.startswith("What causes") for t in queries(lead_share=0.0))
    # paragraph queries: whole paragraphs of two sentences or more, placed at their last sentence
    params = QueriesParams(
        n_corpus=10, only_context_centres=False, min_tokens=3, paragraph_share=0.3, lead_share=0.5
    )
    art, _ = run_stage_locally(resolve_stage(QueriesStage(), params, run, store, ups))
    q = art.read_table().to_pylist()
    para = [r for r in q if r["origin"] == "corpus-paragraph"]
    assert len(para) == 3 and len(q) == 10
    ids, texts = table.column("sent_id").to_pylist(), table.column("text").to_pylist()
    sent_text = dict(zip(ids, texts, strict=True))
    for r in para:
        assert r["text"].endswith("It affects the liver and the kidneys.")
        assert r["text"].startswith("Disease ") and sent_text[r["sent_id"]] == (
            "It affects the liver and the kidneys."
        )
    assert sum(r["text"].startswith("What causes") for r in q) == 4  # half of the 7 sentences
    too_many = QueriesParams(n_corpus=11, only_context_centres=False, paragraph_share=1.0)
    with pytest.raises(InputError, match="paragraphs of two sentences or more"):
        run_stage_locally(resolve_stage(QueriesStage(), too_many, run, store, ups))
    # defaults leave the dumps (and so every existing fingerprint) as they were
    assert "lead_fields" not in ShardParams().model_dump()
    assert "lead_share" not in QueriesParams().model_dump()
    assert "paragraph_share" not in QueriesParams().model_dump()
    assert "lead_fields" in ShardParams(lead_fields=["question"]).model_dump()
