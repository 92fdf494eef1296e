"""How close `ctxsim plan` comes to a measured run of the same config.

Runs the plan's seeded pilot, then (unless ``--reference`` names a recorded run) the full config
in this same process on a temporary root, and compares per stage the predicted rows and CPU
seconds with the measured ones (time.process_time; both under the same machine load, since
they run back to back in one process). ``--reference bench/results/pipeline_books.json``
compares with a recorded `bench_pipeline` run instead (its CPU seconds were measured then, under
that day's load and thread count: say so when reading the ratio). Usage::

    .venv/bin/python -m bench.bench_plan --config configs/quickstart.yaml --until label \\
        --set queries.n_corpus=60 --sample-fraction 0.3 --pilot-queries 6 --name plan_quickstart

``--own-cost`` measures instead what `ctxsim plan` itself costs against the run it predicts
(the aim: at most 5%): the command run as a child process, twice on a fresh unit-cost
cache (cold: it calibrates; then cached), its CPU seconds (user + system of the child, startup
included), wall seconds and peak RSS, beside the predicted run's CPU seconds and peak RSS::

    .venv/bin/python -m bench.bench_plan --config configs/quickstart.yaml --own-cost \\
        --name plan_own_cost_quickstart
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import manifest_stages, write_results


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


def run_record_stages(path: Path) -> dict[str, dict[str, float]]:
    """A finished run's stages as measured: rows and CPU seconds from each artefact's manifest
    (a reused artefact reports what computing it cost)."""
    stages = manifest_stages(json.loads(path.read_text()))
    return {k: m for k, m in stages.items() if m["cpu_s"] is not None}


def own_cost(config: str, sets: list[str], runs: int = 2) -> list[dict[str, Any]]:
    """`ctxsim plan --json` as a child process ``runs`` times on one fresh unit-cost cache."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="ctxsim-plan-cache-") as cache:
        env = {**os.environ, "CTXSIM_PLAN_CACHE": cache}
        cmd = [sys.executable, "-m", "ctxsim.flows.cli", "plan", "--config", config, "--json"]
        cmd += ["--no-progress", *(a for s in sets for a in ("--set", s))]
        for i in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            plan = json.loads(out.stdout)
            me, total = plan["plan_itself"], plan["total"]
            rows.append(
                {
                    "plan": "cold (calibrates)" if i == 0 else "cached unit costs",
                    "plan_cpu_s": round(cpu, 1),
                    "plan_wall_s": round(wall, 1),
                    "predicted_run_cpu_s": total["cpu_s"],
                    "plan_share_of_run": f"{cpu / max(total['cpu_s'], 1e-9):.1%}",
                    "in_process_cpu_s": me["cpu_s"],
                    "plan_peak_rss_mb": me["peak_rss_mb"],
                    "predicted_run_peak_rss_mb": total["peak_rss_mb"],
                    "stage_runs_piloted": len(plan["pilot"]["piloted"]),
                    "stage_runs_from_cache": len(plan["pilot"]["from_cache"]),
                }
            )
    return rows


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
        "--reference-runs",
        type=Path,
        nargs="+",
        help="run records (ROOT/runs/ID.json) to compare with, each stage from its manifest",
    )
    ap.add_argument(
        "--pilot-json", type=Path, help="a saved `ctxsim plan --save-pilot` (re-predict, no pilot)"
    )
    ap.add_argument("--name", default="plan_quickstart")
    ap.add_argument(
        "--own-cost", action="store_true", help="what the plan itself costs, cold and cached"
    )
    a = ap.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")
    if a.own_cost:
        rows = own_cost(a.config, a.sets)
        write_results(
            a.name,
            rows,
            meta={
                "command": "python -m bench.bench_plan " + " ".join(argv or sys.argv[1:]),
                "goal": "a plan costs at most 5% of the CPU of the run it predicts; the "
                "cold plan calibrates this machine once, later plans reuse it",
                "measured": "`ctxsim plan --json --no-progress` as a child process, twice on "
                "one fresh unit-cost cache; plan_cpu_s is the child's user + system CPU "
                "(interpreter start and imports included), in_process_cpu_s the plan's own "
                "figure (from the command's start)",
                "note": "the machine is shared (2 cores, other work running): CPU seconds of "
                "the pilot and so the predicted run are inflated alike",
            },
        )
        for r in rows:
            print(r)
        return
    c0 = time.process_time()
    if a.pilot_json:
        from ctxsim.flows.plan import pilot_from_json

        cfg = load_config(a.config, a.sets)
        plan = predict(cfg, pilot_from_json(json.loads(a.pilot_json.read_text())))
    else:
        cfg, pilot = run_pilot(a.config, a.sets, a.sample_fraction, a.pilot_queries, until=a.until)
        plan = predict(cfg, pilot)
    pilot_cpu = time.process_time() - c0
    if a.reference_runs:
        rows = []
        for path in a.reference_runs:
            rows += [{"run": path.stem, **r} for r in compare(plan, run_record_stages(path))]
        command = "python -m bench.bench_plan " + " ".join(argv or sys.argv[1:])
        for path in a.reference_runs:
            command = command.replace(str(path.parent.parent), "ROOT")
        write_results(
            a.name,
            rows,
            meta={
                "command": command,
                "measured": "the recorded runs' manifests (each stage's CPU seconds when it was "
                "computed); stages a run does not have are left out of its TOTAL",
                "pilot_cpu_s": round(time.process_time() - c0, 1),
                "plan_total": plan["total"],
            },
        )
        for r in rows:
            print(r)
        return
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
