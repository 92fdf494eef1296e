"""bench_plan's comparison with recorded runs: stages read from manifests, ratios per stage."""

from __future__ import annotations

import json
from pathlib import Path

from bench.bench_plan import compare, run_record_stages


def test_a_recorded_run_is_compared_stage_by_stage(tmp_path: Path) -> None:
    stages = {}
    for name, cpu, rows in (("embed", 800.0, 30_000), ("train", 2000.0, 1), ("evaluate", None, 0)):
        d = tmp_path / name
        d.mkdir()
        stats = {} if cpu is None else {"cpu_seconds": cpu}
        (d / "_MANIFEST.json").write_text(json.dumps({"num_rows": rows, "stats": stats}))
        stages[name] = {"path": str(d)}
    rec = tmp_path / "run.json"
    rec.write_text(json.dumps({"run_id": "r", "stages": stages}))
    measured = run_record_stages(rec)
    assert measured == {
        "embed": {"rows": 30_000, "cpu_s": 800.0},
        "train": {"rows": 1, "cpu_s": 2000.0},
    }
    plan = {
        "stages": [
            {"stage": "embed", "basis": "corpus bytes", "rows": 30_000, "cpu_s": 880.0},
            {"stage": "train", "basis": "optimizer steps", "rows": 1, "cpu_s": 2600.0},
            {"stage": "evaluate", "basis": "constant", "rows": 0, "cpu_s": 250.0},
        ]
    }
    rows = compare(plan, measured)
    assert [r["stage"] for r in rows] == ["embed", "train", "TOTAL"]  # no measure, no row
    assert rows[0]["cpu_ratio"] == 1.1 and rows[1]["cpu_ratio"] == 1.3
    assert rows[-1]["cpu_s_pred"] == 3480.0 and rows[-1]["cpu_s_meas"] == 2800.0
