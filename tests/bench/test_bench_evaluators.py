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
    from ctxsim.readers.evaluators import PairsEvaluator, QaEvaluator, StsEvaluator
    from ctxsim.tasks.evaluate.domain import TfidfSimilarity

    sets = [PairsEvaluator(PAIRS), QaEvaluator(QA), StsEvaluator(STS)]
    scores = B.arm_similarities("tfidf", sets, tmp_path, 64)
    row = B.summarise(scores, sets)
    pairs, qa, sts = sets
    assert row["med.pairs AP"] == round(pairs(TfidfSimilarity())["ap"], 2)
    assert row["med_qa ndcg_at_10"] == round(qa(TfidfSimilarity())["ndcg_at_10"], 2)
    assert row["STSb.dev spearman"] == pytest.approx(
        sts.scores(scores["sts/STSb.dev"])["spearman"], abs=0.005
    )
    assert B.primary(scores, qa) == pytest.approx(qa(TfidfSimilarity())["ndcg_at_10"])
    same = B.intervals(scores, scores, sets, 20, 0)
    assert same == dict.fromkeys(
        ["med.pairs AP", "med_qa nDCG@10", "STSb.dev"], "+0.00 [+0.00, +0.00]"
    )


def test_eval_sets_finds_every_format_of_a_folder_and_only_the_named_sts(tmp_path):
    """A bench's sets come from the folder through the eval-dir formats: a new format's files
    reach the benches with no bench changed; STS sets only when named."""
    import json

    from bench.common import eval_sets

    dom = tmp_path / "domain" / "med"
    dom.mkdir(parents=True)
    (dom / "x.pairs.tsv").write_text(
        "sentence1\tsentence2\tlabel\n"
        + "".join(
            f"{a}\t{b}\t{y}\n" for a, b, y in zip(PAIRS.s1, PAIRS.s2, PAIRS.labels, strict=True)
        )
    )
    (dom / "y_qa.jsonl").write_text(
        "".join(
            json.dumps({"qid": f"q{i}", "question": q, "answer": a}) + "\n"
            for i, (q, a) in enumerate(zip(QA.questions, QA.answers[:2], strict=True))
        )
    )
    sts = tmp_path / "sts" / "STSb"
    sts.mkdir(parents=True)
    for split in ("dev", "test"):
        (sts / f"STSb.{split}.tsv").write_text(
            "sentence1\tsentence2\tscore\n"
            + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in zip(STS.s1, STS.s2, STS.gold, strict=True))
        )
    got = eval_sets(tmp_path, ["STSb.dev"])
    assert [(e.format, e.primary_metric) for e in got] == [
        ("pairs", "ap"),
        ("qa", "ndcg_at_10"),
        ("sts", "spearman"),
    ]
    assert got[-1].name == "STSb.dev"
    assert [e.format for e in eval_sets(tmp_path)] == ["pairs", "qa"]


def test_a_seed_averaged_interval_is_the_mean_of_each_seeds_figure():
    """--vs A1,A2=B1,B2: QA compares the seeds' mean per-question metric, pairs the mean of the
    seeds' APs; one seed a side is the plain paired interval."""
    import numpy as np

    from bench import common as B
    from ctxsim.models.evaluation import domain_metrics as D
    from ctxsim.readers.evaluators import PairsEvaluator, QaEvaluator

    pairs, qa = PairsEvaluator(PAIRS), QaEvaluator(QA)
    sets = [pairs, qa]

    def arm(pair_scores: list[float], ndcg: list[float]) -> dict:
        return {
            "pairs/med.pairs": np.array(pair_scores),
            "qa/med_qa/ndcg_at_10": np.array(ndcg),
            "qa/med_qa/mrr_at_10": np.array(ndcg),
        }

    a1, a2 = arm([0.9, 0.8, 0.7, 0.1], [100.0, 50.0]), arm([0.9, 0.1, 0.2, 0.3], [100.0, 0.0])
    b1, b2 = arm([0.5, 0.6, 0.4, 0.3], [50.0, 0.0]), arm([0.2, 0.6, 0.9, 0.3], [0.0, 0.0])
    ap = [pairs.scores(s["pairs/med.pairs"])["ap"] for s in (a1, a2, b1, b2)]
    both = B.intervals([a1, a2], [b1, b2], sets, 50, 0)
    want_ap = (ap[0] + ap[1]) / 2 - (ap[2] + ap[3]) / 2
    assert both["med.pairs AP"].startswith(f"{want_ap:+.2f} [")
    # per question, the seeds' mean: A [100, 25], B [25, 0]: 50 on average
    assert both["med_qa nDCG@10"].startswith("+50.00 [")
    assert B.intervals([a1], [b1], sets, 50, 0) == B.intervals(a1, b1, sets, 50, 0)
    stacked = D.ap_diff_ci(
        PAIRS.labels, np.stack([a1["pairs/med.pairs"]] * 2), b1["pairs/med.pairs"], 50
    )
    assert stacked == D.ap_diff_ci(PAIRS.labels, a1["pairs/med.pairs"], b1["pairs/med.pairs"], 50)
    # the seeds drawn again in each resample: the same seed means, their spread in the interval
    drawn = B.intervals([a1, a2], [b1, b2], sets, 50, 0, resample_seeds=True)
    assert drawn["med.pairs AP"].startswith(f"{want_ap:+.2f} [")
    assert drawn["med_qa nDCG@10"].startswith("+50.00 [")
    with pytest.raises(ValueError, match="seeds resampled in pairs: 2 against 1"):
        B.intervals([a1, a2], [b1], sets, 50, 0, resample_seeds=True)
