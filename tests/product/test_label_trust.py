"""The label stage itself says when its labels should not be trusted (mined
pairs not separated from random ones, near-zero agreement with the reference encoder), in its
stats and its log; the card shows those warnings once, and its surrogate table lists STS test
sets only, with the untrained backbone beside the trained model."""

from __future__ import annotations

import pyarrow as pa

from tests.tasks.test_label import _fake_world, _publish, _run_label


def test_the_label_stage_warns_when_mined_pairs_sit_below_random_ones(tmp_path, caplog):
    store, arts, _ = _fake_world(tmp_path, given=False, mined_across_topics=True)
    with caplog.at_level("WARNING"):
        art = _run_label(store, arts, reference_encoder="tfidf")
    st = art.stats
    sep = st["diag_separation"]
    assert sep["mined_n"] == 16 and sep["random_n"] == 12
    assert sep["difference"] < 0 and sep["ci_low"] <= sep["difference"] <= sep["ci_high"]
    assert sep["cohens_d"] < 0
    (w,) = [x for x in st["diag_warnings"] if x.startswith("mined pairs")]
    assert "95% CI [" in w and "Cohen's d" in w
    assert f"label: {w}" in caplog.text  # the stage's log (a Prefect warning in a flow)
    report = (art.files_dir / "report.md").read_text()
    assert f"> **Warning:** {w}" in report and "Mined (knn/shared) minus random" in report


def test_separated_labels_give_no_trust_warning(tmp_path):
    store, arts, _ = _fake_world(tmp_path, given=False)  # every pair random: nothing to compare
    art = _run_label(store, arts)
    assert art.stats["diag_separation"] == {} and art.stats["diag_warnings"] == []


def _evaluate_rows() -> pa.Table:
    rows = []
    for key, trained, base in [
        ("STSb.train", 80.0, 60.0),
        ("STSb.test", 70.0, 55.5),
        ("SICK-R.train", 75.0, 50.0),
        ("SICK-R.test", 65.0, 52.25),
        ("STS12", 60.0, 40.0),
        ("STSb.dev", 72.0, 54.0),
    ]:
        for system, rho in (("surrogate", trained), ("backbone", base)):
            rows.append(
                {
                    "dataset": key,
                    "subset": "all",
                    "similarity": "cosine",
                    "system": system,
                    "spearman_all": rho,
                    "spearman_mean": rho,
                    "pearson": rho,
                    "n_pairs": 100,
                }
            )
    return pa.Table.from_pylist(rows)


def test_the_card_shows_the_stage_warnings_once_and_test_sets_beside_the_backbone(tmp_path):
    from ctxsim.product.export import export_run, parse_card

    store, arts, _ = _fake_world(tmp_path / "w", given=False, mined_across_topics=True)
    arts["label"] = _run_label(store, arts)
    arts["evaluate"] = _publish(
        store, "evaluate", _evaluate_rows(), {"spearman_all.STSb.train": 80.0}
    )
    stages = {k: {"fingerprint": a.fingerprint} for k, a in arts.items()}
    store.write_run("r", {"run_id": "r", "config": {}, "stages": stages})
    out = tmp_path / "out"
    export_run(store, "r", out, "parquet")
    meta, body = parse_card((out / "README.md").read_text())
    mined = [w for w in meta["ctxsim"]["warnings"] if w.startswith("mined pairs")]
    assert mined == [w for w in arts["label"].stats["diag_warnings"] if w.startswith("mined")]
    section = body.split("## A surrogate trained on these labels")[1].split("\n## ")[0]
    assert "| test set | pairs | trained | untrained backbone |" in section
    assert "| SICK-R.test | 100 | 65.0 | 52.25 |" in section
    assert "| STS12 | 100 | 60.0 | 40.0 |" in section
    assert "| STSb.test | 100 | 70.0 | 55.5 |" in section
    assert ".train" not in section and ".dev" not in section
