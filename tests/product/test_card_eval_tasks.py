"""The dataset card lists the surrogate on every task set of the evaluate stage beside STS, on
each format's primary metric (readers/evaluators), and nothing when there is none."""

from __future__ import annotations

import json

from tests.product.test_label_trust import _evaluate_rows
from tests.tasks.test_label import _fake_world, _publish, _run_label

DOMAIN = {
    "pairs": {"rqe/RQE.dev": {"surrogate": {"ap": 80.5, "f1": 1.0}, "backbone": {"ap": 70.25}}},
    "retrieval": {"med_qa": {"surrogate": {"ndcg_at_10": 60.0, "mrr_at_10": 1.0}}},
    "bootstrap": {},
}


def _card(tmp_path, domain: dict | None) -> str:
    from ctxsim.product.export import export_run, parse_card

    store, arts, _ = _fake_world(tmp_path / "w", given=False)
    arts["label"] = _run_label(store, arts)
    arts["evaluate"] = _publish(store, "evaluate", _evaluate_rows(), {})
    result = {"datasets": {}} | ({"domain": domain} if domain else {})
    (arts["evaluate"].files_dir / "results.json").write_text(json.dumps(result))
    stages = {k: {"fingerprint": a.fingerprint} for k, a in arts.items()}
    store.write_run("r", {"run_id": "r", "config": {}, "stages": stages})
    export_run(store, "r", tmp_path / "out", "parquet")
    return parse_card((tmp_path / "out" / "README.md").read_text())[1]


def test_the_card_lists_each_task_set_on_its_primary_metric(tmp_path):
    body = _card(tmp_path, DOMAIN)
    section = body.split("## The surrogate on the evaluation tasks (x100)")[1].split("\n## ")[0]
    assert "| task | set | metric | trained | untrained backbone |" in section
    assert "| pairs | rqe/RQE.dev | AP | 80.5 | 70.25 |" in section
    assert "| qa | med_qa | nDCG@10 | 60.0 | - |" in section
    assert "## A surrogate trained on these labels" in body  # the STS table stays


def test_a_run_without_task_sets_has_no_such_section(tmp_path):
    assert "evaluation tasks" not in _card(tmp_path, None)
