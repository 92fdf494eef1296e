"""The label stage's diagnostics (product/diagnostics.py): agreement with a reference encoder,
yields, histograms, the warnings of labels crowded at one, and the report as a Prefect
artifact."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from tests.tasks.test_label import _fake_world, _publish, _run_label


def test_label_diagnostics_reference_yields_and_histograms(tmp_path):
    store, arts, _ = _fake_world(tmp_path, given=False)
    art = _run_label(store, arts, reference_encoder="tfidf")
    st = art.stats
    assert st["diag_near_one_share"] < 0.5 and st["diag_warnings"] == []
    assert st["diag_reference_spearman"] is not None and st["yield_select_per_query"] == 4
    diag = json.loads((art.files_dir / "diagnostics.json").read_text())
    assert diag["by_mode"]["random"]["n"] == 28
    assert sum(diag["by_mode"]["random"]["counts"]) == 28
    assert (art.files_dir / "label_vs_reference.png").stat().st_size > 1000
    assert (art.files_dir / "label_by_mode.png").stat().st_size > 1000
    assert "# Label diagnostics" in (art.files_dir / "report.md").read_text()


def test_reference_encoder_can_be_a_sentence_transformers_model(tmp_path):
    """A model directory (here a tiny random BERT, mean-pooled by sentence-transformers) as
    the reference: its cosine is what the agreement is computed against."""
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.product.diagnostics import reference_similarity
    from ctxsim.tasks.train import TrainParams

    store, arts, _ = _fake_world(tmp_path / "w", given=False)
    texts = arts["queries"].read_table().column("text").to_pylist()
    model = build_tiny_backbone(texts, tmp_path / "bb", TrainParams(tiny_vocab_size=200), 0)
    art = _run_label(store, arts, reference_encoder=str(model))
    t = art.read_table()
    ref = reference_similarity(str(model), t.column("s1").to_pylist(), t.column("s2").to_pylist())
    assert np.all(np.abs(ref) <= 1.0 + 1e-6) and np.ptp(ref) > 0
    from scipy.stats import spearmanr

    want = round(100 * spearmanr(t.column("label").to_numpy(), ref).statistic, 2)
    assert art.stats["diag_reference_spearman"] == pytest.approx(want, abs=0.01)


def test_labels_crowded_at_one_warn(tmp_path, caplog):
    """Eq. 3 with a shared offset per context (the quickstart's old labels): every label is
    within 1e-4 of 1.0, which the stage says, twice."""
    store, arts, _ = _fake_world(tmp_path, given=False)
    score = arts["score"].read_table()
    n = score.num_rows
    rng = np.random.default_rng(0)
    s = -50.0 - 3 * (score.column("context_id").to_numpy() % 5) + rng.normal(0, 1e-4, n)
    score = score.set_column(score.schema.get_field_index("S"), "S", pa.array(s))
    arts["score"] = _publish(store, "score", score)
    with caplog.at_level("WARNING"):
        art = _run_label(store, arts, lm={"ablations": False})
    assert art.stats["diag_near_one_share"] > 0.5
    assert len(art.stats["diag_warnings"]) == 2
    assert "within 0.0001 of 1.0" in caplog.text and "warn_band_width" in caplog.text


def test_a_stage_report_becomes_a_prefect_markdown_artifact(tmp_path, monkeypatch):
    from ctxsim.flows import pipeline
    from ctxsim.store.artefacts import ArtefactStore

    store = ArtefactStore(tmp_path)
    calls: list[dict] = []
    monkeypatch.setattr(pipeline, "create_table_artifact", lambda **kw: calls.append(kw))
    monkeypatch.setattr(pipeline, "create_markdown_artifact", lambda **kw: calls.append(kw))
    with_report = _publish(store, "label", pa.table({"x": [1]}))
    (with_report.files_dir).mkdir(exist_ok=True)
    (with_report.files_dir / "report.md").write_text("# Label diagnostics\n")
    pipeline._stats_artifact("label", with_report, reused=False)
    assert calls[-1]["key"] == "ctxsim-label-report"
    assert calls[-1]["markdown"] == "# Label diagnostics\n"
    calls.clear()
    pipeline._stats_artifact("pairs", _publish(store, "pairs", pa.table({"x": [1]})), False)
    assert len(calls) == 1 and "markdown" not in calls[0]
