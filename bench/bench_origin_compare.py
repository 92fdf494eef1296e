"""Origin runs on the same STS pairs, side by side: Spearman x100, a paired BCa bootstrap CI of
each run's difference to the first, and what each run paid for its labels.

For ablations that need other contexts (``select.order_by``, ``--random-contexts``,
``--no-diversity``) and so cannot be re-read from one run's scores as ``bench_origin`` does. The
runs must label the same pairs (same ``--sets`` and ``--max-pairs``); the script checks it.
Usage::

    .venv/bin/python -m bench.bench_origin_compare --runs origin-order-screen-cs4 \
        origin-order-score-cs4 --name origin_order_cs4
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness import write_results
from ctxsim.models.evaluation.metrics import bootstrap_diff_ci, spearman
from ctxsim.store.artefacts import ArtefactStore


def load(root: Path, run_id: str) -> tuple[pa.Table, dict[str, Any], dict[str, Any]]:
    """The run's label table (sorted by pair), its config and per-stage manifest stats."""
    rec = json.loads((root / "runs" / f"{run_id}.json").read_text())
    store = ArtefactStore(root)
    stats = {
        name: store.require(name, st["fingerprint"]).stats for name, st in rec["stages"].items()
    }
    label = store.require("label", rec["stages"]["label"]["fingerprint"]).read_table()
    return label.sort_by("pair_id"), rec["config"], stats


def compare(root: Path, runs: list[str], n_resamples: int) -> list[dict[str, Any]]:
    base_table = None
    rows = []
    for run_id in runs:
        table, cfg, stats = load(root, run_id)
        gold = table.column("gold").to_numpy()
        pred = table.column("label").to_numpy()
        key = [table.column(c).to_pylist() for c in ("s1", "s2", "gold")]
        first = base_table is None
        if first:
            base_table, base_key, base_pred = table, key, pred
        elif key != base_key:
            raise ValueError(f"{run_id} labels other pairs than {runs[0]}: compare like with like")
        ci = bootstrap_diff_ci(gold, pred, base_pred, n_resamples=n_resamples)
        sel, score = stats.get("select", {}), stats.get("score", {})
        rows.append(
            {
                "run": run_id,
                "order_by": cfg["select"].get("order_by", "screen"),
                "strategy": cfg["select"]["strategy"],
                "cs_max": cfg["select"]["max_size"],
                "mean_cs": sel.get("mean_cs"),
                "n_pairs": len(gold),
                "spearman": round(spearman(pred, gold), 2) if np.isfinite(pred).all() else None,
                "delta_vs_first": "ref" if first else round(ci["delta"], 2),
                "ci95": "" if first else f"[{ci['ci_low']:.1f}, {ci['ci_high']:.1f}]",
                "select_cpu_s": round(sel.get("cpu_seconds", 0.0), 1),
                "reranked": sel.get("reranked", 0),
                "score_cpu_s": round(score.get("cpu_seconds", 0.0), 1),
                "scored": score.get("pairs", 0) * len(score.get("directions", "").split(","))
                - score.get("cache_hits", 0),
                "cache_hits": score.get("cache_hits"),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path("data/artefacts"))
    ap.add_argument("--runs", nargs="+", required=True, help="first = reference")
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--name", default="origin_compare")
    args = ap.parse_args()
    rows = compare(args.root, args.runs, args.resamples)
    write_results(
        args.name,
        rows,
        {
            "command": "python -m bench.bench_origin_compare --runs "
            + " ".join(args.runs)
            + f" --name {args.name}",
            "what": "Origin (Eq. 4, cosine) Spearman x100 on the same pairs; delta and paired "
            "BCa 95% CI against the first run; select/score CPU seconds of each run (scored = "
            "generator passes computed, i.e. pairs x terms minus score-cache hits)",
        },
    )


if __name__ == "__main__":
    main()
