"""bench/archive/bench_domain_adapt.py: a reused arm is checked before anything is labelled, the
arm-score cache is keyed by everything the figures depend on, arms are scored through the
evaluate stage's evaluate_domain, and every arm's objective is a registered one."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.readers.domain import PairSet, QaSet
from ctxsim.readers.sts import StsSet

PAIRS = PairSet(
    "med.pairs",
    ["a cat sleeps", "a dog barks", "red cars go fast", "the sun is hot"],
    ["the cat sleeps", "a cat sleeps", "blue cars go fast", "the moon is cold"],
    [1, 0, 1, 0],
)
QA = QaSet(
    "med_qa",
    ["q1", "q2"],
    ["what is a cat", "what is a dog"],
    ["a cat is an animal that purrs", "a dog is an animal that barks", "cars are fast"],
    [0, 1],
)
STS = StsSet(
    "STSb", "dev", ["a cat", "a dog", "a car"], ["the cat", "a car", "a bus"], [5.0, 1.0, 3.0]
)


def test_every_arm_trains_a_registered_objective():
    from bench.archive import bench_domain_adapt, bench_surrogate_compare
    from ctxsim.models.training.objectives import OBJECTIVES

    for arms in (bench_domain_adapt.ARMS, bench_surrogate_compare.ARMS):
        assert {a["objective"] for a in arms.values()} <= set(OBJECTIVES)


def test_label_cpu_follows_what_the_objective_labels_with():
    from bench.common import arm_label_cpu

    m = {"label_cpu_seconds": 2.5}
    assert arm_label_cpu("ctxsim", 100.0, m) == arm_label_cpu("joint", 100.0, m) == 100.0
    assert arm_label_cpu("tfidf", 100.0, m) == arm_label_cpu("teacher", 100.0, m) == 2.5
    assert arm_label_cpu("simcse", 100.0, m) == arm_label_cpu("none", 100.0, m) == 0.0


def test_an_unsafe_reuse_fingerprint_is_one_line_before_any_labelling(tmp_path, monkeypatch):
    import ctxsim.flows.pipeline as pipeline
    from bench.archive.bench_domain_adapt import main

    def no_run(*a, **k):
        raise AssertionError("labelled before the --reuse check")

    monkeypatch.setattr(pipeline, "run_pipeline", no_run)
    root = f"run.root={tmp_path / 'root'}"
    for fp, why in (("../label/x", "unsafe train fingerprint"), ("0123abcd", "no published")):
        with pytest.raises(SystemExit) as e:
            main(["--config", "configs/quickstart.yaml", "--set", root, "--arms", "simcse",
                  "--reuse", f"none={fp}", "--eval-dir", str(tmp_path)])  # fmt: skip
        msg = str(e.value)
        assert msg.startswith(f"--reuse none={fp}: ") and why in msg and "\n" not in msg


def test_the_cache_key_follows_the_model_the_sets_and_the_sequence_cap(tmp_path):
    from bench.common import arm_cache_key

    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"one")
    key = arm_cache_key(str(model), [PAIRS], [QA], [STS], 128)
    assert key == arm_cache_key(str(model), [PAIRS], [QA], [STS], 128)
    other_pairs = PairSet(PAIRS.name, PAIRS.s1, PAIRS.s2, [1, 1, 0, 0])
    changed = {
        "max_seq": arm_cache_key(str(model), [PAIRS], [QA], [STS], 256),
        "pair labels": arm_cache_key(str(model), [other_pairs], [QA], [STS], 128),
        "no qa": arm_cache_key(str(model), [PAIRS], [], [STS], 128),
        "sts sets": arm_cache_key(str(model), [PAIRS], [QA], [], 128),
        "tfidf": arm_cache_key("tfidf", [PAIRS], [QA], [STS], 128),
    }
    (model / "weights.bin").write_bytes(b"two")  # retrained in place: the same path
    changed["model bytes"] = arm_cache_key(str(model), [PAIRS], [QA], [STS], 128)
    assert len({key, *changed.values()}) == len(changed) + 1, changed


def test_scores_come_from_evaluate_domain_and_are_cached(tmp_path, monkeypatch):
    from bench import common as B
    from ctxsim.models.evaluation import domain_metrics as D
    from ctxsim.tasks.evaluate.domain import pair_set_similarities, qa_similarity

    got = B.arm_similarities("tfidf", [PAIRS], [QA], [STS], tmp_path, 64)
    assert np.array_equal(got["pairs/med.pairs"], pair_set_similarities(None, PAIRS, 64))
    per = D.retrieval_per_query(qa_similarity(None, QA, 64), QA.relevant)
    for metric, v in per.items():
        assert np.array_equal(got[f"qa/med_qa/{metric}"], v)
    assert got["sts/STSb.dev"].shape == (3,)
    assert len(list(tmp_path.glob("*.npz"))) == 1

    def boom(*a, **k):
        raise AssertionError("recomputed a cached arm")

    monkeypatch.setattr("ctxsim.tasks.evaluate.domain.evaluate_domain", boom)
    again = B.arm_similarities("tfidf", [PAIRS], [QA], [STS], tmp_path, 64)
    assert again.keys() == got.keys()
    assert all(np.array_equal(again[k], got[k]) for k in got)
