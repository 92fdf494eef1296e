"""bench/bench_evaluate_cache.py: every arm evaluates the same model, the cached arms write and
then read the baseline's encodings, every result is the uncached one, and the table is written."""

from __future__ import annotations

import json

from tests.models.evaluation.test_domain_eval import QA_ROWS, _qa


def test_every_arm_reports_the_uncached_result_and_the_table_is_written(tmp_path):
    from bench.bench_evaluate_cache import ARMS, main
    from tests.tasks.tiny_encoder import build_tiny_encoder

    texts = [r["question"] for r in QA_ROWS] + [r["answer"] for r in QA_ROWS]
    build_tiny_encoder(texts, tmp_path / "adapted")
    build_tiny_encoder(texts[::-1], tmp_path / "download", seed=1)
    _qa(tmp_path / "eval" / "d_qa.jsonl", QA_ROWS)
    main(
        [
            "--model",
            str(tmp_path / "adapted"),
            "--eval-dir",
            str(tmp_path / "eval"),
            "--backbone",
            str(tmp_path / "download"),
            "--max-seq-length",
            "16",
            "--out-dir",
            str(tmp_path / "out"),
        ]
    )
    rows = json.loads((tmp_path / "out" / "evaluate_cache.json").read_text())["rows"]
    assert [r["arm"] for r in rows] == [arm for arm, _ in ARMS]
    assert all(r["result identical to the uncached one"] for r in rows)
    # the download's questions and answers: two files once written, none for the adapted model
    assert [r["cache files after"] for r in rows] == ["-", 2, 2, "-", 2]
    assert (tmp_path / "out" / "evaluate_cache.md").exists()
