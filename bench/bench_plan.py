"""How close `ctxsim plan` comes to a measured run of the same config.

Runs the plan's seeded pilot, then (unless ``--reference`` names a recorded run) the full config
in this same process on a temporary root, and compares per stage the predicted rows and CPU
seconds with the measured ones (time.process_time; both under the same machine load, since
they run back to back in one process). ``--reference bench/results/pipeline_books.json``
compares with a recorded `bench_pipeline` run instead (its CPU seconds were measured then, under
that day's load and thread count: say so when reading the ratio). Usage::

    .venv/bin/python -m bench.bench_plan --config configs/quickstart.yaml --until label \\
        --set queries.n_corpus=60 --sample-fraction 0.3 --pilot-queries 6 --name plan_quickstart
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import write_results


def compare(plan: dict[str, Any], measured: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One row per stage: predicted vs measured rows and CPU seconds, and their ratios."""
    rows = []
    for st in plan["stages"]:
        m = measured.get(st["stage"])
        if m is None:
            continue
        rows.append(
            {
                "stage": st["stage"],
                "basis": st["basis"],
                "rows_pred": round(st["rows"]),
                "rows_meas": m["rows"],
                "rows_ratio": round(st["rows"] / max(m["rows"], 1), 2),
                "cpu_s_pred": round(st["cpu_s"], 1),
                "cpu_s_meas": round(m["cpu_s"], 1),
                "cpu_ratio": round(st["cpu_s"] / max(m["cpu_s"], 1e-3), 2),
            }
        )
    pred = sum(r["cpu_s_pred"] for r in rows)
    meas = sum(r["cpu_s_meas"] for r in rows)
    rows.append(
        {
            "stage": "TOTAL",
            "basis": "",
            "rows_pred": "",
            "rows_meas": "",
            "rows_ratio": "",
            "cpu_s_pred": round(pred, 1),
            "cpu_s_meas": round(meas, 1),
            "cpu_ratio": round(pred / max(meas, 1e-3), 2),
        }
    )
    return rows


def reference_stages(path: Path) -> dict[str, dict[str, float]]:
    doc = json.loads(path.read_text())
    return {
        r["stage"]: {"rows": r["rows"], "cpu_s": float(r["cpu_s"] or 0.0)}
        for r in doc["tables"]["stages"]
    }


def main(argv: list[str] | None = None) -> None:
    from ctxsim.flows.config import load_config
    from ctxsim.flows.plan import predict, run_measured, run_pilot

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--until", default="label")
    ap.add_argument("--sample-fraction", type=float, default=0.05)
    ap.add_argument("--pilot-queries", type=int, default=8)
    ap.add_argument("--reference", type=Path, help="a bench_pipeline JSON to compare with")
    ap.add_argument(
        "--pilot-json", type=Path, help="a saved `ctxsim plan --save-pilot` (re-predict, no pilot)"
    )
    ap.add_argument("--name", default="plan_quickstart")
    a = ap.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")
    c0 = time.process_time()
    if a.pilot_json:
        from ctxsim.flows.plan import pilot_from_json

        cfg = load_config(a.config, a.sets)
        plan = predict(cfg, pilot_from_json(json.loads(a.pilot_json.read_text())))
    else:
        cfg, pilot = run_pilot(a.config, a.sets, a.sample_fraction, a.pilot_queries, until=a.until)
        plan = predict(cfg, pilot)
    pilot_cpu = time.process_time() - c0
    if a.reference:
        measured = reference_stages(a.reference)
        source = f"recorded run {a.reference}"
    else:
        with tempfile.TemporaryDirectory(prefix="ctxsim-plan-full-") as tmp:
            cfg = load_config(a.config, a.sets, tmp)
            from ctxsim.flows.pipeline import select_stages

            run = run_measured(cfg, select_stages(cfg, a.until))
        measured = {k: {"rows": m.rows, "cpu_s": m.cpu_s} for k, m in run.items()}
        source = "full run of the same config, same process, right after the pilot"
    rows = compare(plan, measured)
    write_results(
        a.name,
        rows,
        meta={
            "command": "python -m bench.bench_plan " + " ".join(argv or sys.argv[1:]),
            "measured": source,
            "pilot_cpu_s": round(pilot_cpu, 1),
            "pilot": plan["pilot"],
            "plan_total": plan["total"],
            "note": "CPU seconds are time.process_time of this process; the machine is shared "
            "(load ~10 on 2 cores), which inflates CPU seconds too (cache contention), for the "
            "pilot and the measured run alike",
        },
    )
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
