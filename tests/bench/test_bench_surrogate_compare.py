"""The comparison report's tables (bench/archive/bench_surrogate_compare.py): every arm is
compared with each reference present, per set and on the average, and the average's interval is the
stratified one of models.metrics."""

from __future__ import annotations

from argparse import Namespace

import numpy as np


def test_tables_compare_each_arm_with_every_reference_on_sets_and_average():
    from bench.archive.bench_surrogate_compare import _tables
    from ctxsim.models.evaluation import metrics as M

    rng = np.random.default_rng(0)
    gold = {k: rng.normal(size=80) for k in ("STS12", "STS13", "STSb.dev")}
    noise = {"none": 3.0, "simcse": 1.0, "ctxsim-CoSENT": 0.3}
    preds = {
        arm: {k: (g + rng.normal(scale=s, size=len(g)), g) for k, g in gold.items()}
        for arm, s in noise.items()
    }
    metrics = {"steps": 4, "best_dev_spearman": 50.0, "train_cpu_seconds": 1.0}
    metrics |= {"label_run": "x", "n_train_pairs": 8}
    trained = {arm: {"metrics": metrics, "record": {"stages": {}}} for arm in preds}
    args = Namespace(backbone="tiny", resamples=200, seed=0, config="c", sets=[], arm_set=[])
    rows, ci_rows, meta = _tables(args, trained, preds, {}, M.bootstrap_diff_ci, ("STS12", "STS13"))

    assert meta["avg_of"] == ["STS12", "STS13"]
    by_arm = {r["arm"]: r for r in rows}
    assert by_arm["ctxsim-CoSENT"]["avg"] > by_arm["simcse"]["avg"] > by_arm["none"]["avg"]
    pairs = {(r["arm"], r["vs"]) for r in ci_rows}
    assert pairs == {
        ("none", "simcse"),
        ("simcse", "none"),
        ("ctxsim-CoSENT", "simcse"),
        ("ctxsim-CoSENT", "none"),
    }
    avg = {(r["arm"], r["vs"]): r for r in ci_rows if r["set"] == "avg"}
    assert len(avg) == 4  # one average row per pair; STSb.dev is a column, not in the average
    gain = avg[("ctxsim-CoSENT", "none")]
    want = by_arm["ctxsim-CoSENT"]["avg"] - by_arm["none"]["avg"]
    assert abs(gain["delta"] - want) < 0.02 and gain["significant"] and gain["ci_low"] > 0
