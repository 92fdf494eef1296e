"""The `evaluate` stage runs every task format of readers/evaluators: a format registered in one
class (the toy of tests/readers/test_evaluators.py, no other file changed) is found in the
evaluation folder, scored for every system with paired intervals, and reaches results.json,
report.md, the stage's stats and the model card."""

from __future__ import annotations

import json

import pytest

from tests.readers.test_evaluators import TOY_ROWS, toy_format  # noqa: F401 - the fixture


def test_a_registered_format_reaches_the_result_the_report_the_stats_and_the_card(
    toy_format,  # noqa: F811 - the fixture
    tmp_path,
):
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.evaluate import evaluate_model
    from ctxsim.tasks.evaluate.stage import _flat_stats, model_card_section
    from ctxsim.tasks.train import TrainParams

    texts = [t for q, d, _ in TOY_ROWS for t in (q, d)]
    model = build_tiny_backbone(
        texts, tmp_path / "tiny", TrainParams(tiny_vocab_size=60, max_seq_length=16), 0
    )
    out = tmp_path / "out"
    res = evaluate_model(
        model,
        toy_format,
        baselines={"tfidf": None},
        similarities=["cosine"],
        max_seq_length=16,
        bootstrap_resamples=20,
        out_dir=out,
    )
    assert "warnings" not in res and res["n_domain_sets"] == 1
    toy = res["domain"]["toy"]["web"]
    assert set(toy) == {"surrogate", "tfidf"} and toy["tfidf"]["n_rows"] == 4
    assert "toy.web.accuracy.surrogate-vs-tfidf" in res["domain"]["bootstrap"]
    assert json.loads((out / "results.json").read_text())["domain"]["toy"] == res["domain"]["toy"]
    report = (out / "report.md").read_text()
    assert "## Toy relevance (accuracy x100)" in report and "| web | tfidf |" in report
    assert _flat_stats(res, 0)["toy.web.accuracy"] == pytest.approx(toy["surrogate"]["accuracy"])
    assert "### Toy relevance" in model_card_section(res)


def test_eval_dir_is_the_key_and_sts_dir_its_quiet_alias(tmp_path):
    """`evaluate.eval_dir` names the folder of every format; `sts_dir`, its old name, is read too
    without a warning, hashes the same (no artefact moved) and is in no config any more."""
    import warnings

    import yaml
    from pydantic import ValidationError

    from ctxsim.store.stage import fingerprint_params
    from ctxsim.tasks.evaluate import EvaluateParams, EvaluateStage
    from tests.conftest import REPO

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = EvaluateParams.model_validate({"eval_dir": str(tmp_path)})
        old = EvaluateParams.model_validate({"sts_dir": str(tmp_path)})
    assert new == old and old.eval_dir == str(tmp_path) == old.sts_dir
    assert EvaluateParams(sts_dir="x").eval_dir == "x"  # keyword construction: both names
    hashed = fingerprint_params(new)
    assert hashed == fingerprint_params(old) and hashed["sts_dir"] == str(tmp_path)
    assert "eval_dir" not in hashed  # the key as it was hashed before the rename
    (tmp_path / "STSb.dev.tsv").write_text("sentence1\tsentence2\tscore\na\tb\t1.0\n")
    assert set(EvaluateStage().fingerprint_extra(new)) == {"sts_dir"}
    with pytest.raises(ValidationError, match="sts_dir"):
        EvaluateParams.model_validate({"eval_dir": "a", "sts_dir": "b"})
    for path in sorted((REPO / "configs").glob("*.yaml")):
        section = (yaml.safe_load(path.read_text()) or {}).get("evaluate") or {}
        assert "sts_dir" not in section, path.name
    from ctxsim.flows.config import load_config

    quickstart = REPO / "configs" / "quickstart.yaml"  # says eval_dir: an override of either name
    for key in ("sts_dir", "eval_dir"):
        cfg = load_config(quickstart, [f"evaluate.{key}={tmp_path}"], stages=["evaluate"])
        assert cfg.stages["evaluate"].eval_dir == str(tmp_path)


def test_a_run_reads_every_format_of_eval_dir_before_anything_runs(toy_format):  # noqa: F811
    """The run's preflight reads evaluate.eval_dir through the registry: the toy format's .tsv
    is not taken for an STS set, and a malformed pairs file is named with its line before any
    stage runs (it used to surface only in the evaluate stage, after training)."""
    from ctxsim.flows.config import load_config
    from ctxsim.flows.preflight import check_sts
    from ctxsim.readers.domain import DomainFormatError
    from tests.conftest import REPO

    config = REPO / "configs" / "quickstart.yaml"
    cfg = load_config(config, [f"evaluate.eval_dir={toy_format}", "train.sts_dir=null"])
    check_sts(cfg)  # the toy file alone: nothing to refuse
    bad = toy_format / "rqe.pairs.tsv"
    bad.write_text("sentence1\tsentence2\tlabel\na\tb\t1\nc\td\t2\n")
    with pytest.raises(DomainFormatError, match=f"{bad}:3: label '2' is not 0 or 1"):
        check_sts(cfg)
