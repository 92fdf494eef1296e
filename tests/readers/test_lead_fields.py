"""shard.lead_fields naming a field no record has was ignored without a word (a bad
input): it is refused before any work, naming the key, the file and the fields the records have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxsim.readers.corpus import lead_fields_problem


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    ("records", "lead", "says"),
    [
        ([{"doc": "a", "paragraphs": ["x y z"]}], ["question"], "'question'"),
        ([{"doc": "a", "heading": "H", "paragraphs": ["x"]}], ["heading", "question"], "question"),
        ([{"doc": "a", "question": "Q?", "paragraphs": ["x"]}], ["question"], None),
        ([{"doc": "a", "paragraphs": ["x"]}], [], None),
    ],
)
def test_a_lead_field_no_record_has_is_named(tmp_path, records, lead, says):
    f = _jsonl(tmp_path / "c.jsonl", records)
    problem = lead_fields_problem([str(f)], "auto", lead)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and "shard.lead_fields" in problem and says in problem
        assert str(f) in problem and "doc, " in problem  # the fields the records do have


def test_lead_fields_on_plain_text_are_refused(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("One sentence here.\n\nAnother paragraph.\n")
    assert "plain text" in lead_fields_problem([str(f)], "auto", ["question"])


def test_the_cli_refuses_it_before_any_stage_runs(tmp_path):
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    f = _jsonl(tmp_path / "c.jsonl", [{"doc": "a", "paragraphs": ["Some text here."]}])
    root = tmp_path / "root"
    res = CliRunner().invoke(
        app,
        [
            "run", "--config", "configs/quickstart.yaml", "--root", str(root),
            "--set", f"shard.paths=['{f}']", "--set", "shard.lead_fields=[question]",
        ],
    )  # fmt: skip
    assert res.exit_code != 0
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert lines[-1].startswith("error: shard.lead_fields") and "'question'" in lines[-1]
    assert "Traceback" not in res.output and not (root / "shard").exists()
