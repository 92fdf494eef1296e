"""The evaluation task formats (readers/evaluators): one class per format in a registry, each
reading its files, scoring a similarity, naming its primary metric and computing paired
intervals; a new format is one class that the discovery picks up."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ctxsim.models.evaluation import domain_metrics as D
from ctxsim.models.evaluation import metrics as M
from ctxsim.readers.domain import discover_domain
from ctxsim.readers.evaluators import (
    EVALUATORS,
    Evaluator,
    IstsEvaluator,
    PairsEvaluator,
    QaEvaluator,
    StsEvaluator,
    discover_eval_dir,
    register,
)
from ctxsim.readers.evaluators.base import set_name


class Overlap:
    """A similarity with no model: the Jaccard overlap of the two texts' words."""

    @staticmethod
    def _j(a: str, b: str) -> float:
        x, y = set(a.split()), set(b.split())
        return len(x & y) / max(1, len(x | y))

    def paired(self, s1, s2):
        return np.array([self._j(a, b) for a, b in zip(s1, s2, strict=True)])

    def matrix(self, queries, docs):
        return np.array([[self._j(q, d) for d in docs] for q in queries])


class Length(Overlap):
    """A worse similarity: closeness of the two texts' lengths."""

    @staticmethod
    def _j(a: str, b: str) -> float:
        return -abs(len(a) - len(b))


def _folder(root: Path) -> Path:
    rows = [("a man plays", "a man plays", 1), ("a man plays", "a dog runs", 0)] * 4
    rows += [("red cat eats", "red cat eats fish", 1), ("big ball", "small street food", 0)] * 4
    (root / "rqe").mkdir(parents=True)
    (root / "rqe" / "RQE.dev.pairs.tsv").write_text(
        "sentence1\tsentence2\tlabel\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows)
    )
    qa = [
        {"qid": str(i), "question": f"what is {w} ?", "answer": f"{w} is a {w} thing"}
        for i, w in enumerate("gout asthma anemia fever cough".split())
    ]
    (root / "med_qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in qa))
    (root / "STSb.dev.tsv").write_text(
        "sentence1\tsentence2\tscore\n"
        + "".join(f"{a}\t{b}\t{5.0 * y}\n" for a, b, y in rows[:4] + rows[8:12])
    )
    return root


def test_the_registry_holds_one_evaluator_per_format_with_its_primary_metric():
    assert {k: v.primary_metric for k, v in EVALUATORS.items()} == {
        "ists": "f1_ali_equi",
        "pairs": "ap",
        "qa": "ndcg_at_10",
        "sts": "spearman",
    }
    assert [c.format for c in EVALUATORS.values() if c.in_eval_dir] == ["pairs", "qa"]
    with pytest.raises(ValueError, match="registered twice"):
        register(type("Again", (PairsEvaluator,), {}))


def test_pairs_and_qa_evaluators_give_the_domain_metrics_and_intervals(tmp_path):
    root = _folder(tmp_path)
    found = discover_eval_dir(root)
    assert [(type(e).__name__, e.name) for e in found] == [
        ("PairsEvaluator", "rqe/RQE.dev"),
        ("QaEvaluator", "med_qa"),
    ]
    pairs, qa = found
    assert isinstance(pairs, PairsEvaluator) and isinstance(qa, QaEvaluator)
    (ps,), (qs,) = discover_domain(root)  # the same files, read as before
    good, bad = Overlap(), Length()
    assert pairs(good) == D.pair_classification_scores(good.paired(ps.s1, ps.s2), ps.labels)
    assert pairs(good)[pairs.primary_metric] == pytest.approx(100.0)
    per = D.retrieval_per_query(good.matrix(qs.questions, qs.answers), qs.relevant)
    assert qa(good) == D.retrieval_scores(per)
    a, b = pairs.predict(good), pairs.predict(bad)
    assert pairs.interval(a, b, "ap", 50, 0.95, 0) == D.ap_diff_ci(ps.labels, a, b, 50, 0.95, 0)
    a, b = qa.predict(good), qa.predict(bad)
    ci = qa.interval(a, b, "mrr_at_10", 50, 0.95, 0)
    assert ci == D.mean_diff_ci(a["mrr_at_10"], b["mrr_at_10"], 50, 0.95, 0)


def test_the_sts_evaluator_reads_sts_sets_only_and_scores_spearman(tmp_path):
    root = _folder(tmp_path)
    (sts,) = StsEvaluator.discover(root)
    assert sts.name == "STSb.dev" and len(sts) == 8
    v = sts(Overlap())
    assert v["spearman"] == pytest.approx(
        M.spearman(Overlap().paired(sts.data.s1, sts.data.s2), sts.data.gold)
    )
    a, b = sts.predict(Overlap()), sts.predict(Length())
    assert sts.interval(a, a, "spearman", 20, 0.95, 0)["delta"] == 0.0
    assert sts.interval(a, b, "spearman", 20, 0.95, 0)["delta"] == pytest.approx(
        v["spearman"] - sts(Length())["spearman"]
    )
    assert StsEvaluator.discover(tmp_path / "none") == []


def test_the_ists_evaluator_scores_alignments_and_their_interval(tmp_path):
    from tests.tasks.test_train_evaluate import _ists_dir

    _ists_dir(tmp_path)
    (dom,) = IstsEvaluator.discover(tmp_path)
    gold = dom.data.gold
    perfect = dom(lambda d: d.gold)
    assert perfect["f1_ali"] == pytest.approx(100.0) and perfect["n_pairs"] == 2
    nothing = dom(lambda d: [type(p)(p.id, p.tokens1, p.tokens2, []) for p in d.gold])
    assert nothing["f1_ali"] == 0.0
    empty = [type(p)(p.id, p.tokens1, p.tokens2, []) for p in gold]
    ci = dom.interval(gold, empty, "f1_ali", 30, 0.9, 0)
    assert ci["delta"] == pytest.approx(100.0) and ci["ci_low"] > 0


class ToyRelevance(Evaluator):
    """A toy format: ``*.rel.tsv`` rows of (query, doc, relevance 0/1), scored by the accuracy
    of "similarity above the median" against the relevance."""

    format = "toy"
    section = "toy"
    pattern = "*.rel.tsv"
    suffix = ".rel.tsv"
    primary_metric = "accuracy"
    title = "Toy relevance (accuracy x100)"
    columns = {"accuracy": "accuracy"}
    count = ("n_rows", "rows")
    interval_metrics = ("accuracy",)

    def __init__(self, name, rows):
        self.name, self.rows = name, rows

    @classmethod
    def read(cls, path, name):
        rows = [line.split("\t") for line in path.read_text().splitlines()[1:] if line]
        return cls(name, [(q, d, int(y)) for q, d, y in rows])

    def __len__(self):
        return len(self.rows)

    def predict(self, system):
        sim = system.paired([r[0] for r in self.rows], [r[1] for r in self.rows])
        hit = (sim > np.median(sim)) == np.array([r[2] for r in self.rows], bool)
        return hit.astype(float) * 100

    def scores(self, pred):
        return {"accuracy": float(np.mean(pred)), "n_rows": len(pred)}

    def interval(self, a, b, metric, n_resamples, confidence, seed):
        return D.mean_diff_ci(a, b, n_resamples, confidence, seed)


TOY_ROWS = [
    ("a man plays", "a man plays guitar", 1),
    ("a man plays", "red food", 0),
    ("dog runs", "a dog runs fast", 1),
    ("dog runs", "big street", 0),
]


@pytest.fixture
def toy_format(tmp_path):
    """ToyRelevance registered for one test, and a folder holding one of its files."""
    register(ToyRelevance)
    path = tmp_path / "eval" / "web.rel.tsv"
    path.parent.mkdir()
    path.write_text("query\tdoc\trelevance\n" + "".join(f"{q}\t{d}\t{y}\n" for q, d, y in TOY_ROWS))
    try:
        yield path.parent
    finally:
        EVALUATORS.pop("toy")


def test_a_new_format_is_one_class_that_the_discovery_picks_up(toy_format):
    found = discover_eval_dir(toy_format)
    assert [(e.format, e.name) for e in found] == [("toy", "web")]
    assert found[0](Overlap()) == {"accuracy": 100.0, "n_rows": 4}
    assert StsEvaluator.discover(toy_format) == []  # its .tsv is not read as an STS set
    assert set_name(toy_format / "a" / "b.rel.tsv", toy_format, ".rel.tsv") == "a/b"
