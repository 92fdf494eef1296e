"""Labelled pairs per CPU-hour, all in, of finished runs: every stage's CPU-seconds from its
artefact's manifest (a reused artefact reports what computing it cost), the corpus pass included.

Why from manifests rather than a timer: the runs being compared shared their corpus pass
(``embed``) through the artefact cache, and each manifest records what its stage cost when it
was computed, so every run is charged the whole pipeline even where it reused a stage.

    python -m bench.bench_route_cost --root ROOT --runs cost120k cost200k --name NAME
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.harness import manifest_stages, write_results

#: the stage whose row count is the number of labelled pairs
LABEL_STAGE = "label"


def run_cost(record: dict[str, Any]) -> dict[str, Any]:
    """CPU-seconds per stage, the labelled pairs, and pairs per CPU-hour all in, of one run."""
    stages = manifest_stages(record)
    cpu: dict[str, float] = {}
    for name, m in stages.items():
        if m["cpu_s"] is None:
            path = record["stages"][name]["path"]
            raise SystemExit(f"{path}/_MANIFEST.json: stage {name} recorded no cpu_seconds")
        cpu[name] = round(m["cpu_s"], 1)
    pairs = stages.get(LABEL_STAGE, {}).get("rows", 0)
    if not pairs:
        raise SystemExit(f"run {record.get('run_id')}: no {LABEL_STAGE} stage with rows")
    total = sum(cpu.values())
    return {
        "labelled_pairs": pairs,
        **{f"{k} CPU-s": v for k, v in cpu.items()},
        "all-in CPU-s": round(total, 1),
        "pairs per CPU-hour": round(pairs / total * 3600),
        "without the corpus pass": round(pairs / max(total - cpu.get("embed", 0.0), 1e-9) * 3600),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the artefact root holding runs/<id>.json")
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--name", default="encoder_route_medquad_cost")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    rows = []
    for run_id in args.runs:
        path = Path(args.root) / "runs" / f"{run_id}.json"
        if not path.exists():
            raise SystemExit(f"{path}: no such run record")
        rows.append({"run": run_id, **run_cost(json.loads(path.read_text()))})
    cmd = "python -m bench.bench_route_cost " + " ".join(sys.argv[1:] if argv is None else argv)
    write_results(args.name, rows, {"command": cmd.replace(args.root, "ROOT"), "note": args.note})


if __name__ == "__main__":
    main()
