"""bench_flops_limit's books_generated arithmetic: the scorer's FLOPs per window from the
measured engine row, and the labelled pairs per CPU-hour if every product ran at a given rate."""

from __future__ import annotations

import pytest

from bench.bench_flops_limit import LAYER_SHAPES, LAYERS, VOCAB, D, books_generated


def test_one_rate_for_every_product_gives_flops_over_rate() -> None:
    rate = 500e9
    rows, meta = books_generated(dict.fromkeys([*LAYER_SHAPES, "head"], rate))
    measured, stage, floor = rows
    assert floor["gflop_per_cpu_s"] == pytest.approx(rate / 1e9, rel=1e-3)
    assert floor["cpu_ms_per_window"] == pytest.approx(
        1e3 * floor["gflop_per_window"] * 1e9 / rate, rel=1e-2
    )
    # the FLOPs per window: layers on every token run, the head on target tokens only
    per_tok = sum(2 * i * o * n for i, o, n in LAYER_SHAPES.values()) * LAYERS
    assert per_tok == pytest.approx(2 * 106.2e6, rel=0.01)  # SmolLM2's non-embedding weights
    assert 2 * D * VOCAB < per_tok
    # all-in = 3600 / (score CPU-s + the other stages' CPU-s) per pair, for both rows
    for r in rows:
        got = 3600 / (r["score_cpu_s_per_pair"] + r["other_cpu_s_per_pair"])
        assert r["pairs_per_cpu_hour_all_in"] == pytest.approx(got, rel=1e-2)
    assert measured["cpu_ms_per_window"] > floor["cpu_ms_per_window"]
    assert meta["score_cpu_s_per_pair_for_20000"] == pytest.approx(
        3600 / 20_000 - measured["other_cpu_s_per_pair"], abs=1e-3
    )


def test_other_stages_come_from_the_named_pipeline_run() -> None:
    """--pipeline RESULT:RUN charges that run's stages but score per pair (sampler included)."""
    import json

    from bench.harness import RESULTS_DIR

    name, run_id = "pipeline_books_generated_blocks", "bg-q500-bf16-b256-blocks"
    pipe = json.loads((RESULTS_DIR / f"{name}.json").read_text())
    run = next(r for r in pipe["rows"] if r["run"] == run_id)
    score = next(
        s for s in pipe["tables"]["stages"] if s["run"] == run_id and s["stage"] == "score"
    )
    want = (run["cpu_s_to_label"] - score["cpu_s"]) / run["labelled_pairs"]
    rates = dict.fromkeys([*LAYER_SHAPES, "head"], 500e9)
    rows, meta = books_generated(rates, f"{name}:{run_id}")
    assert rows[0]["other_cpu_s_per_pair"] == pytest.approx(want, abs=1e-4)
    # the run's own score stage: its CPU-s over its rows (windows) per window
    assert rows[1]["cpu_ms_per_window"] == pytest.approx(1e3 * score["cpu_s"] / score["rows"], 0.01)
    got = 3600 * run["labelled_pairs"] / run["cpu_s_to_label"]
    assert rows[1]["pairs_per_cpu_hour_all_in"] == pytest.approx(got, rel=0.01)
    assert meta["other_stages_from"] == f"{name}:{run_id}"
    default, _ = books_generated(rates)
    assert default[0]["other_cpu_s_per_pair"] != rows[0]["other_cpu_s_per_pair"]
