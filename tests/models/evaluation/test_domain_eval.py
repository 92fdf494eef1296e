"""Domain evaluators: pair classification and QA retrieval files are found in a folder,
malformed ones are refused naming file and line, the metrics follow MTEB's conventions on cases
worked by hand, and `evaluate_model` reports them with paired intervals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ctxsim.models.evaluation import domain_metrics as D
from ctxsim.readers.domain import DomainFormatError, discover_domain, read_pairs, read_qa

PAIRS_HEADER = "sentence1\tsentence2\tlabel\n"


def _pairs(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PAIRS_HEADER + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows))
    return path


def _qa(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


QA_ROWS = [
    {
        "qid": "1",
        "question": "what causes gout ?",
        "answer": "gout is caused by uric acid crystals",
    },
    {
        "qid": "2",
        "question": "how is asthma treated ?",
        "answer": "asthma is treated with inhalers",
    },
    {"qid": "3", "question": "what is anemia ?", "answer": "anemia is a lack of red blood cells"},
]


def test_discover_finds_pair_and_qa_files_at_any_depth_and_skips_sts_files(tmp_path):
    _pairs(tmp_path / "rqe" / "RQE.dev.pairs.tsv", [("a b", "a c", "1"), ("a b", "d e", "0")])
    _qa(tmp_path / "medquad" / "dev_qa.jsonl", QA_ROWS)
    (tmp_path / "STSb.dev.tsv").write_text("sentence1\tsentence2\tscore\na\tb\t1.0\n")
    pairs, qa = discover_domain(tmp_path)
    assert [p.name for p in pairs] == ["rqe/RQE.dev"] and pairs[0].labels == [1, 0]
    assert [q.name for q in qa] == ["medquad/dev_qa"]
    assert qa[0].relevant == [0, 1, 2] and len(qa[0].answers) == 3
    from ctxsim.readers.sts import discover

    assert [s.name for s in discover(tmp_path)] == ["STSb.dev"]  # the pairs file is not STS


@pytest.mark.parametrize(
    ("body", "where", "what"),
    [
        ("a\tb\t1\nc\td\t2\n", 3, "label '2' is not 0 or 1"),
        ("a\tb\t1\nc\td\n", 3, "expected 3 tab-separated fields"),
        ("a\tb\t1\n\td\t0\n", 3, "empty sentence"),
    ],
)
def test_a_malformed_pairs_file_names_file_and_line(tmp_path, body, where, what):
    path = tmp_path / "x.pairs.tsv"
    path.write_text(PAIRS_HEADER + body)
    with pytest.raises(DomainFormatError, match=f"{path}:{where}: {what}"):
        read_pairs(path)
    path.write_text("s1\ts2\tscore\na\tb\t1\n")
    with pytest.raises(DomainFormatError, match=f"{path}:1: header"):
        read_pairs(path)


def test_a_malformed_qa_file_names_file_and_line(tmp_path):
    path = tmp_path / "dev_qa.jsonl"
    _qa(path, [QA_ROWS[0], {"qid": "2", "question": "why ?"}])
    with pytest.raises(DomainFormatError, match=f"{path}:2: field 'answer' is missing"):
        read_qa(path)
    _qa(path, [QA_ROWS[0], QA_ROWS[1], {**QA_ROWS[2], "qid": "1"}])
    with pytest.raises(DomainFormatError, match=f"{path}:3: duplicate question id '1'"):
        read_qa(path)
    # MedQuAD numbers questions per source document: the same qid in two documents is two ids
    _qa(path, [{**QA_ROWS[0], "doc": "a"}, {**QA_ROWS[1], "qid": "1", "doc": "b"}])
    assert read_qa(path).qids == ["a/1", "b/1"]
    path.write_text('{"question": "x", "answer": "y"}\nnot json\n')
    with pytest.raises(DomainFormatError, match=f"{path}:2: invalid JSON"):
        read_qa(path)


def test_pair_classification_metrics_on_a_hand_worked_case():
    """Scores 0.9 (1), 0.8 (0), 0.7 (1), 0.1 (0): AP = (1/1 + 2/3) / 2; the best accuracy is 3/4
    (threshold between 0.7 and 0.1); the best F1 is 0.8 (both positives, one false positive)."""
    v = D.pair_classification_scores([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0])
    assert v["ap"] == pytest.approx((1 + 2 / 3) / 2 * 100)
    assert v["accuracy"] == pytest.approx(75.0)
    assert v["f1"] == pytest.approx(80.0)
    assert v["n_pairs"] == 4 and v["n_positive"] == 2


def test_retrieval_metrics_on_a_hand_worked_case():
    """Query 0 ranks its answer first, query 1 second, query 2 twelfth (of 120 documents)."""
    n_docs = 120
    sim = np.tile(-np.arange(n_docs, dtype=float), (3, 1))  # document d has score -d
    relevant = [0, 1, 11]
    per = D.retrieval_per_query(sim, relevant)
    assert per["ndcg_at_10"] == pytest.approx([100.0, 100 / math.log2(3), 0.0])
    assert per["mrr_at_10"] == pytest.approx([100.0, 50.0, 0.0])
    assert per["recall_at_100"] == pytest.approx([100.0, 100.0, 100.0])
    sim[2, 11] = 10.0  # now first
    assert D.retrieval_per_query(sim, relevant)["mrr_at_10"][2] == pytest.approx(100.0)
    assert D.retrieval_scores(per)["n_queries"] == 3


def test_paired_intervals_see_a_better_system_and_none_between_equals():
    rng = np.random.default_rng(0)
    labels = np.repeat([1, 0], 100)
    good = labels + rng.normal(0, 0.5, 200)
    bad = labels + rng.normal(0, 3.0, 200)
    ci = D.ap_diff_ci(labels, good, bad, 300, 0.95, 0)
    assert ci["delta"] > 0 and ci["ci_low"] > 0 and ci["significant"]
    assert D.ap_diff_ci(labels, good, good, 300)["delta"] == 0.0
    a = rng.normal(1.0, 1.0, 300)
    ci = D.mean_diff_ci(a, a - 0.5, 300)
    assert ci["delta"] == pytest.approx(0.5) and ci["ci_low"] == pytest.approx(0.5)
    ci = D.mean_diff_ci(a, rng.permutation(a), 300)
    assert ci["ci_low"] < 0 < ci["ci_high"] and not ci["significant"]


def test_evaluate_model_reports_the_domain_tasks_with_intervals(tmp_path):
    """A tiny model and TF-IDF on a folder holding an STS set, a pairs file and a QA file:
    every figure reaches results.json, the report has a section per task, CIs are paired."""
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.evaluate import evaluate_model
    from ctxsim.tasks.train import TrainParams

    texts = [r["question"] for r in QA_ROWS] + [r["answer"] for r in QA_ROWS]
    model = build_tiny_backbone(
        texts + ["a man plays", "a dog runs"],
        tmp_path / "tiny",
        TrainParams(tiny_vocab_size=80, max_seq_length=16),
        0,
    )
    data = tmp_path / "eval"
    _pairs(
        data / "x.pairs.tsv",
        [("a man plays", "a man plays", "1"), ("a man plays", "a dog runs", "0")] * 3,
    )
    _qa(data / "d_qa.jsonl", QA_ROWS)
    (data / "STSb.dev.tsv").write_text(
        "sentence1\tsentence2\tscore\n"
        + "".join(f"a man plays\t{b}\t{s}\n" for b, s in [("a man plays", 5), ("a dog runs", 1)])
        + "a dog runs\ta dog runs\t4.5\n"
    )
    out = tmp_path / "out"
    res = evaluate_model(
        model,
        data,
        baselines={"tfidf": None},
        similarities=["cosine"],
        max_seq_length=16,
        bootstrap_resamples=50,
        out_dir=out,
    )
    dom = res["domain"]
    assert set(dom["pairs"]["x"]) == {"surrogate", "tfidf"}
    assert dom["pairs"]["x"]["tfidf"]["ap"] == pytest.approx(100.0)  # identical pairs are 1
    assert set(dom["retrieval"]["d_qa"]["surrogate"]) >= {"ndcg_at_10", "mrr_at_10"}
    assert "pairs.x.ap.surrogate-vs-tfidf" in dom["bootstrap"]
    assert "retrieval.d_qa.ndcg_at_10.surrogate-vs-tfidf" in dom["bootstrap"]
    assert res["n_sets"] == 1 and res["n_domain_sets"] == 2
    saved = json.loads((out / "results.json").read_text())
    assert saved["domain"]["pairs"]["x"]["surrogate"]["ap"] == dom["pairs"]["x"]["surrogate"]["ap"]
    report = (out / "report.md").read_text()
    assert "## Pair classification" in report and "## Retrieval" in report


def test_the_report_names_plots_only_when_it_drew_them(tmp_path):
    """Plots are drawn from STS sets: a folder of domain tasks alone gets a report that names
    none (it once listed scatter.png and heatmaps.png that were never written)."""
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.evaluate import evaluate_model
    from ctxsim.tasks.train import TrainParams

    texts = [r["question"] for r in QA_ROWS] + [r["answer"] for r in QA_ROWS]
    model = build_tiny_backbone(
        texts, tmp_path / "tiny", TrainParams(tiny_vocab_size=80, max_seq_length=16), 0
    )
    _qa(tmp_path / "eval" / "d_qa.jsonl", QA_ROWS)
    kw = {"similarities": ["cosine"], "max_seq_length": 16, "bootstrap_resamples": 0}
    evaluate_model(model, tmp_path / "eval", out_dir=tmp_path / "domain", **kw)
    report = (tmp_path / "domain" / "report.md").read_text()
    assert "## Retrieval" in report and "Plots:" not in report
    assert not list((tmp_path / "domain").glob("*.png"))
    (tmp_path / "eval" / "STSb.dev.tsv").write_text(
        "sentence1\tsentence2\tscore\n"
        + "".join(f"{r['question']}\t{r['answer']}\t{i}\n" for i, r in enumerate(QA_ROWS))
    )
    evaluate_model(model, tmp_path / "eval", out_dir=tmp_path / "sts", **kw)
    assert "Plots: `scatter.png`" in (tmp_path / "sts" / "report.md").read_text()
    assert (tmp_path / "sts" / "scatter.png").is_file()


def test_pair_files_are_gold_sets_for_origin(tmp_path):
    """`ctxsim origin --sts-dir` on a folder of *.pairs.tsv: each file is a set NAME.SPLIT with
    gold 0/1, so Origin (Eq. 4) can be read on a domain's labelled pairs."""
    from ctxsim.readers.domain import pair_sets_as_sts

    _pairs(tmp_path / "RQE.dev.pairs.tsv", [("a b", "a c", "1"), ("a b", "d e", "0")])
    (sts,) = pair_sets_as_sts(str(tmp_path))
    assert (sts.dataset, sts.subset, sts.gold) == ("RQE", "dev", [1.0, 0.0])
    assert sts.s1 == ["a b", "a b"] and sts.s2 == ["a c", "d e"]


@pytest.mark.parametrize("units", [True, False])
def test_evaluate_in_bf16_runs_every_encoder_pass_in_bf16_where_the_cpu_has_the_units(
    tmp_path, monkeypatch, units
):
    """``bf16_cpu``: every forward of the evaluation (STS, pairs and QA sets) runs in bf16
    autocast on a CPU with the units and in float32 on one without; without it, float32. The
    figures stay near float32's."""
    import torch

    import ctxsim.models.encoders as E
    import ctxsim.models.training.sentence_encoder as SE
    import ctxsim.tasks.evaluate.encoders as EE
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.evaluate import evaluate_model
    from ctxsim.tasks.train import TrainParams

    monkeypatch.setattr(E, "bf16_available", lambda device: units)
    seen: list[bool] = []
    forward = SE.forward

    def spy(model, texts):
        seen.append(
            torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        )
        return forward(model, texts)

    monkeypatch.setattr(SE, "forward", spy)
    monkeypatch.setattr(EE, "forward", spy)
    texts = [r["question"] for r in QA_ROWS] + [r["answer"] for r in QA_ROWS]
    model = build_tiny_backbone(
        texts, tmp_path / "tiny", TrainParams(tiny_vocab_size=80, max_seq_length=16), 0
    )
    _qa(tmp_path / "eval" / "d_qa.jsonl", QA_ROWS)
    (tmp_path / "eval" / "STSb.dev.tsv").write_text(
        "sentence1\tsentence2\tscore\n"
        + "".join(f"{r['question']}\t{r['answer']}\t{i}\n" for i, r in enumerate(QA_ROWS))
    )

    def run(bf16):
        seen.clear()
        kw = {"similarities": ["cosine"], "max_seq_length": 16, "bootstrap_resamples": 0}
        res = evaluate_model(model, tmp_path / "eval", bf16_cpu=bf16, **kw)
        return res, list(seen)

    fast, calls = run(True)
    assert calls and all(c == units for c in calls)
    base, calls = run(False)
    assert calls and not any(calls)
    got = fast["domain"]["retrieval"]["d_qa"]["surrogate"]["mrr_at_10"]
    assert got == pytest.approx(
        base["domain"]["retrieval"]["d_qa"]["surrogate"]["mrr_at_10"], abs=20
    )


def test_a_seed_resampled_interval_holds_the_spread_between_trained_models():
    """Three seeds that disagree (+2, -1, +0.5 over B) on quiet items: the items-only interval
    of the seed means excludes 0, the two-stage one (seeds, then items) does not."""
    rng = np.random.default_rng(0)
    b = rng.normal(50.0, 10.0, (3, 400))
    a = b + np.array([[2.0], [-1.0], [0.5]]) + rng.normal(0, 0.5, (3, 400))
    items_only = D.mean_diff_ci(a.mean(0), b.mean(0), 300)
    two_stage = D.seed_mean_diff_ci(a, b, 300)
    assert two_stage["delta"] == pytest.approx(items_only["delta"])
    assert items_only["ci_low"] > 0
    assert two_stage["ci_low"] < 0 < two_stage["ci_high"]
    # seeds that agree: the second stage adds next to nothing
    same = D.seed_mean_diff_ci(np.stack([a[0]] * 3), np.stack([b[0]] * 3), 300)
    alone = D.mean_diff_ci(a[0], b[0], 300)
    width = alone["ci_high"] - alone["ci_low"]
    assert same["ci_high"] - same["ci_low"] == pytest.approx(width, rel=0.3)
    with pytest.raises(ValueError, match="seeds x queries"):
        D.seed_mean_diff_ci(a[0], b[0], 10)


def test_a_seed_resampled_ap_interval_draws_the_rows_in_pairs():
    rng = np.random.default_rng(1)
    labels = np.repeat([1, 0], 100)
    b = np.stack([labels + rng.normal(0, 1.0, 200) for _ in range(3)])
    # seed 0 of A much better than its B, seeds 1 and 2 slightly worse
    a = np.stack([labels + rng.normal(0, s, 200) for s in (0.3, 1.2, 1.2)])
    plain = D.ap_diff_ci(labels, a, b, 300, 0.95, 0)
    drawn = D.ap_diff_ci(labels, a, b, 300, 0.95, 0, resample_rows=True)
    assert drawn["delta"] == plain["delta"]
    assert drawn["ci_high"] - drawn["ci_low"] > plain["ci_high"] - plain["ci_low"]
    with pytest.raises(ValueError, match="3 rows against 2"):
        D.ap_diff_ci(labels, a, b[:2], 10, resample_rows=True)
