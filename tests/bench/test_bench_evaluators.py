"""The benches' domain figures come from the evaluators of readers/evaluators: bench.common
scores, summarises and compares arms set by set through each format's class."""

from __future__ import annotations

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


def test_bench_rows_and_intervals_are_the_evaluators_figures(tmp_path):
    from bench import common as B
    from ctxsim.tasks.evaluate.domain import TfidfSimilarity

    sets = B.eval_sets([PAIRS], [QA], [STS])
    assert [(e.format, e.primary_metric) for e in sets] == [
        ("pairs", "ap"),
        ("qa", "ndcg_at_10"),
        ("sts", "spearman"),
    ]
    scores = B.arm_similarities("tfidf", [PAIRS], [QA], [STS], tmp_path, 64)
    row = B.summarise(scores, [PAIRS], [QA], [STS])
    pairs, qa, sts = sets
    assert row["med.pairs AP"] == round(pairs(TfidfSimilarity())["ap"], 2)
    assert row["med_qa ndcg_at_10"] == round(qa(TfidfSimilarity())["ndcg_at_10"], 2)
    assert row["STSb.dev spearman"] == pytest.approx(
        sts.scores(scores["sts/STSb.dev"])["spearman"], abs=0.005
    )
    same = B.intervals(scores, scores, [PAIRS], [QA], [STS], 20, 0)
    assert same == dict.fromkeys(
        ["med.pairs AP", "med_qa nDCG@10", "STSb.dev"], "+0.00 [+0.00, +0.00]"
    )
