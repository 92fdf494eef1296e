"""bench_route_cost's arithmetic: every stage's recorded CPU-seconds, labelled pairs per hour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_route_cost import run_cost


def _stage(tmp: Path, name: str, cpu: float | None, rows: int | None = None) -> dict[str, str]:
    d = tmp / name
    d.mkdir()
    stats = {} if cpu is None else {"cpu_seconds": cpu}
    (d / "_MANIFEST.json").write_text(json.dumps({"num_rows": rows, "stats": stats}))
    return {"path": str(d)}


def test_all_in_cost_charges_every_stage_and_counts_the_labels(tmp_path: Path) -> None:
    rec = {
        "run_id": "r",
        "stages": {
            "embed": _stage(tmp_path, "embed", 700.0),
            "pairs": _stage(tmp_path, "pairs", 50.0),
            "label": _stage(tmp_path, "label", 50.0, rows=200_000),
        },
    }
    got = run_cost(rec)
    assert got["labelled_pairs"] == 200_000
    assert got["all-in CPU-s"] == 800.0
    assert got["pairs per CPU-hour"] == round(200_000 / 800 * 3600)
    assert got["without the corpus pass"] == round(200_000 / 100 * 3600)


def test_a_stage_without_cpu_seconds_is_refused(tmp_path: Path) -> None:
    rec = {"run_id": "r", "stages": {"label": _stage(tmp_path, "label", None, rows=5)}}
    with pytest.raises(SystemExit, match="recorded no cpu_seconds"):
        run_cost(rec)
