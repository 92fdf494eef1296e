"""The end of `ctxsim run` (and so of `make run`): what was made, and the next three commands."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import ctxsim.flows.pipeline
from ctxsim.flows.cli import app
from ctxsim.flows.run_summary import SHOWCASE_CONFIG, summary_lines


def _record(root: Path, *, beats: bool | None, backbone: str = "tiny-random") -> dict:
    label = root / "label" / "fpl"
    label.mkdir(parents=True)
    pq.write_table(
        pa.table({"s1": ["The cat's mat.", "b"], "s2": ["A dog sat.", "c"], "label": [0.5, 0.1]}),
        label / "part-00000.parquet",
    )
    train = root / "train" / "fpt"
    (train / "files" / "model").mkdir(parents=True)
    metrics = {
        "backbone": backbone,
        "beats_backbone": beats,
        "best_dev_spearman": 12.0,
        "backbone_dev_spearman": 15.5,
        "dev_set": "STSb.dev",
        "steps": 30,
        "n_train_pairs": 588,
    }
    (train / "files" / "metrics.json").write_text(json.dumps(metrics))
    evaluate = root / "evaluate" / "fpe"
    (evaluate / "files").mkdir(parents=True)
    (evaluate / "files" / "report.md").write_text("# report\n")
    stage = {"status": "completed", "shards": 1, "shards_computed": 1, "seconds": 1.0}
    return {
        "run_id": "run-1",
        "status": "completed",
        "stages": {
            # an LM-route run: its select stage is what `ctxsim explain` reruns
            "select": {**stage, "fingerprint": "fps", "rows": 8, "path": str(root / "select")},
            "label": {**stage, "fingerprint": "fpl", "rows": 1234, "path": str(label)},
            "train": {**stage, "fingerprint": "fpt", "rows": 3, "path": str(train)},
            "evaluate": {**stage, "fingerprint": "fpe", "rows": 9, "path": str(evaluate)},
        },
    }


def test_summary_says_what_was_made_and_the_next_three_commands(tmp_path: Path) -> None:
    record = _record(tmp_path, beats=True)
    text = "\n".join(summary_lines(record, Path("configs/quickstart.yaml")))
    assert "1,234 labelled pairs" in text
    assert str(tmp_path / "label" / "fpl") in text
    assert str(tmp_path / "train" / "fpt" / "files" / "model") in text
    assert str(tmp_path / "evaluate" / "fpe" / "files" / "report.md") in text
    assert "ctxsim inspect label --run run-1 --limit 5" in text
    assert "ctxsim export run-1 --out exports/run-1" in text
    # a real pair of the run, quoted for the shell
    assert "ctxsim explain 'The cat'\"'\"'s mat.' 'A dog sat.' --run run-1" in text
    assert "--config" not in text  # the default config needs no flag
    assert "below its backbone" not in text


def test_commands_carry_a_non_default_config_and_root(tmp_path: Path) -> None:
    record = _record(tmp_path, beats=None)
    lines = summary_lines(record, Path("configs/books.yaml"), "/data/r")
    for cmd in ("inspect", "export", "explain"):
        line = next(x for x in lines if f"ctxsim {cmd}" in x)
        assert "--config configs/books.yaml --root /data/r" in line


def test_tiny_backbone_below_itself_is_explained_in_one_line(tmp_path: Path) -> None:
    lines = summary_lines(_record(tmp_path, beats=False), None)
    notes = [x for x in lines if "below its backbone" in x]
    assert len(notes) == 1
    assert "(12.0 vs 15.5 on STSb.dev)" in notes[0]
    assert "tiny" in notes[0] and "30 steps on 588 pairs" in notes[0]
    assert SHOWCASE_CONFIG in notes[0] and Path(SHOWCASE_CONFIG).exists()


def test_a_real_backbone_below_itself_points_at_the_learning_rate(tmp_path: Path) -> None:
    lines = summary_lines(_record(tmp_path, beats=False, backbone="minilm"), None)
    (note,) = [x for x in lines if "below its backbone" in x]
    assert "learning rate" in note and SHOWCASE_CONFIG not in note


def test_no_summary_without_labels_or_for_a_failed_run(tmp_path: Path) -> None:
    record = _record(tmp_path, beats=True)
    assert summary_lines({**record, "status": "failed"}) == []
    assert summary_lines({**record, "stages": {"shard": record["stages"]["label"]}}) == []


def test_ctxsim_run_ends_with_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _record(tmp_path / "arts", beats=False)
    monkeypatch.setattr(ctxsim.flows.pipeline, "run_pipeline", lambda *a, **k: record)
    res = CliRunner().invoke(app, ["run", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = res.stdout.splitlines()
    assert out[0] == "run run-1: completed"
    assert any("1,234 labelled pairs" in x for x in out)
    assert out[-1].startswith("Note: the model ends below its backbone")
    assert [x.split()[1] for x in out if x.startswith("  ctxsim ")] == [
        "inspect",
        "export",
        "explain",
    ]
