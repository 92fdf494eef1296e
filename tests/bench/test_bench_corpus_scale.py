"""The corpus-scale and mining benches' own logic: nested corpus prefixes, the per-word ratios,
and a tie-aware recall that the exact searches score 1.0 on."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from bench.bench_corpus_scale import cut_corpus, main, scale_rows
from bench.bench_knn_mining import numpy_exact, recall
from ctxsim.models.corpus.pairs import knn_search


def _corpus(tmp_path: Path) -> str:
    for name, n in (("a", 16), ("b", 5)):
        with gzip.open(tmp_path / f"{name}.jsonl.gz", "wt") as f:
            for i in range(n):
                rec = {"book": name, "section": i, "paragraphs": [f"w{i} " * (i + 1)]}
                f.write(json.dumps(rec) + "\n")
    return str(tmp_path / "*.jsonl.gz")


def test_sizes_are_nested_prefixes_of_every_file(tmp_path: Path) -> None:
    sizes = cut_corpus(_corpus(tmp_path), [1, 4, 16], tmp_path / "cut")
    lines = {
        k: {
            f.name: f.read_text().splitlines()
            for f in sorted((tmp_path / "cut" / f"x{k}").glob("*.jsonl"))
        }
        for k in (1, 4, 16)
    }
    assert [len(lines[k]["a.jsonl"]) for k in (1, 4, 16)] == [1, 4, 16]
    assert [len(lines[k]["b.jsonl"]) for k in (1, 4, 16)] == [1, 2, 5]  # ceil: every file in each
    assert lines[4]["a.jsonl"] == lines[16]["a.jsonl"][:4]
    assert sizes[16]["words"] == sum(range(1, 17)) + sum(range(1, 6))
    assert cut_corpus(_corpus(tmp_path), [1, 4, 16], tmp_path / "cut") == sizes  # kept


def test_cut_only_writes_the_cuts_and_runs_nothing(tmp_path: Path, capsys) -> None:
    main(["--corpus", _corpus(tmp_path), "--root", str(tmp_path / "r"), "--scales", "1", "2",
          "--top", "4", "--cut-only"])  # fmt: skip
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["scale"], r["records"]) for r in printed] == [(1, 4 + 2), (2, 8 + 3)]
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["corpora"]  # no run, no result


def test_rows_give_per_word_cost_for_corpus_stages_only() -> None:
    sizes = {1: {"words": 1_000_000}, 4: {"words": 4_000_000}}

    def row(stage: str, cpu: float, rss: float, disk: float) -> dict:
        return {
            "stage": stage,
            "stage_cpu_s": cpu,
            "peak_rss_mb": rss,
            "disk_mb": disk,
            "process_cpu_s": cpu + 10,
            "wall_s": cpu + 11,
        }

    pairs = row("pairs", 10.0, 900.0, 0.1)  # capped by the recipe: the same at both sizes
    run = {
        1: [row("embed", 50.0, 1000.0, 10.0), pairs],
        4: [row("embed", 220.0, 1100.0, 40.0), pairs],
    }
    rows = {(r["scale"], r["stage"]): r for r in scale_rows(sizes, run)}
    assert rows[("4x", "embed")]["cpu_s_per_mword"] == 55.0
    assert rows[("4x", "embed")]["cpu_per_word_vs_1x"] == 1.1
    assert rows[("4x", "embed")]["rss_vs_1x"] == 1.1
    assert rows[("4x", "pairs")]["cpu_s_per_mword"] is None  # capped by the recipe: not per word
    assert rows[("4x", "pairs")]["cpu_vs_1x"] == 1.0


def test_exact_searches_have_recall_one_and_ties_count() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 16)).astype(np.float32)
    x[200:210] = x[190]  # duplicates: which tied neighbour comes first is arbitrary
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    exact = numpy_exact(x, 5)
    flat = knn_search(x, 5, flat_max=len(x))[0]
    assert recall(x, flat, exact, 5) == 1.0 and recall(x, exact, exact, 3) == 1.0
    shuffled = exact.copy()
    shuffled[:, 0] = (exact[:, 0] + 1) % len(x)  # a wrong first neighbour costs recall
    assert recall(x, shuffled, exact, 5) < 1.0


def test_repeat_adds_the_whole_corpus_again_with_no_unit_text_repeated(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as f:
        for i in range(3):
            paras = [f"One {i} here. Two {i} there! Three {i}?", f"Lone {i}.", f"Four {i}. Five."]
            f.write(json.dumps({"book": "a", "section": f"s{i}", "paragraphs": paras}) + "\n")
    sizes = cut_corpus(str(tmp_path / "*.jsonl.gz"), [1], tmp_path / "cut", top=3, repeat=4)
    assert sorted(sizes) == [1, 12]
    recs = [json.loads(x) for x in (tmp_path / "cut/x12/a.jsonl").read_text().splitlines()]
    assert len(recs) == 12 and sizes[12]["words"] == 4 * sizes[1]["words"] * 3  # 3 records
    assert recs[:3] == [json.loads(x) for x in gzip.open(tmp_path / "a.jsonl.gz", "rt")]
    sections = [r["section"] for r in recs]
    assert len(set(sections)) == 12  # copies are sections of their own
    for r in recs[3:]:  # same sentences, in another order or another paragraph's place
        orig = recs[int(r["section"].split("#")[0][1:])]
        assert sorted(" ".join(orig["paragraphs"]).split()) == sorted(
            " ".join(r["paragraphs"]).split()
        )
    multi = [p for r in recs for p in r["paragraphs"] if p.count(" ") > 2]
    assert len(set(multi)) > len(multi) / 2  # shuffled sentences: most long texts are new
    again = cut_corpus(str(tmp_path / "*.jsonl.gz"), [1], tmp_path / "cut2", top=3, repeat=4)
    assert (tmp_path / "cut2/x12/a.jsonl").read_text() == (tmp_path / "cut/x12/a.jsonl").read_text()
    assert again[12]["words"] == sizes[12]["words"]


def test_first_copy_keeps_each_documents_first_share_of_sections(tmp_path: Path) -> None:
    """A corpus repeated 2 times: every document's first half of its sections (in order) is
    the original; the vectors of its other paragraphs are dropped, in the embed parts' order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.bench_knn_mining import first_copy

    # doc 0: sections 0-3 (0, 1 original), doc 1: sections 4-5 (4 original); one chunk each,
    # two sentences per chunk
    sections = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 4), (1, 5)]
    for d in ("shard/fp", "contexts/fp/files", "embed/fp/files"):
        (tmp_path / d).mkdir(parents=True)
    sents = {"sent_id": [], "doc_id": [], "section_id": []}
    for doc, sec in sections:
        for _ in range(2):
            sents["sent_id"].append(len(sents["sent_id"]))
            sents["doc_id"].append(doc)
            sents["section_id"].append(sec)
    pq.write_table(pa.table(sents), tmp_path / "shard/fp/part-00000.parquet")
    chunks = {"chunk_id": list(range(6)), "first_sent_id": [2 * i for i in range(6)]}
    chunks["n_sents"] = [2] * 6
    pq.write_table(pa.table(chunks), tmp_path / "contexts/fp/files/chunks.parquet")
    for shard, ids in enumerate(([5, 0, 2], [4, 1, 3])):  # embed parts hold chunks in any order
        pq.write_table(
            pa.table({"context_id": ids}), tmp_path / f"embed/fp/part-{shard:05d}.parquet"
        )
    keep = first_copy(tmp_path / "embed/fp/files", 2)
    assert keep.tolist() == [False, True, False, True, True, False]
