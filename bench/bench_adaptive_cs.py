"""Adaptive |Cs| (models/adaptive_cs.py) on a finished `ctxsim origin` run: passes saved and
the Origin change, per tolerance, against the fixed |Cs| of the run.

Read offline from the run's select/score/label artefacts (selection is greedy, so round k's set
is the first k contexts of the run's): no model runs, so no timing and no load caveat. Passes
= distinct (query, context) windows per generative term, plus one null pass per distinct
context for each term the run took as PMI. Usage::

    .venv/bin/python -m bench.bench_adaptive_cs --root ROOT --run RUN --rounds 1,2,4,8 \\
        --tols 0,0.01,0.02,0.05,0.1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_origin import load_run
from bench.harness import write_results
from ctxsim.models.adaptive_cs import adaptive_origin
from ctxsim.models.origin import ContextSets, ScoreLookup, spearman_conventions
from ctxsim.tasks.label import ablation_views, report_name


def evaluate(root: Path, run_id: str, rounds: list[int], tols: list[float]) -> list[dict]:
    arts = load_run(root, run_id)
    sel = arts["select"].read_table(["query_id", "context_id", "position"])
    table = arts["score"].read_table()
    names, values, _ = ablation_views(table, True)
    lookup = ScoreLookup(
        table.column("query_id").to_numpy(), table.column("context_id").to_numpy(), values
    )
    n_pmi = sum(
        1
        for d in ("fwd", "left", "right")
        if f"null_{d}" in table.column_names
        and not np.all(np.isnan(table.column(f"null_{d}").to_numpy(zero_copy_only=False)))
    )
    n_terms = sum(
        1
        for d in ("fwd", "left", "right")
        if not np.all(np.isnan(table.column(f"gen_{d}").to_numpy(zero_copy_only=False)))
    )
    cs = ContextSets.from_rows(
        sel.column("query_id").to_numpy(),
        sel.column("context_id").to_numpy(),
        sel.column("position").to_numpy(),
    )
    lab = arts["label"].read_table().to_pandas()
    sets = np.asarray(
        [report_name(d, s) for d, s in zip(lab["dataset"], lab["subset"], strict=True)], object
    )
    s1, s2 = lab["s1_id"].to_numpy(np.int64), lab["s2_id"].to_numpy(np.int64)
    gold, subs = lab["gold"].to_numpy(np.float64), lab["subset"].to_numpy(object)
    view = names.index("S")
    rows: list[dict[str, Any]] = []
    fixed = None
    for tol in [0.0, *[t for t in tols if t > 0]]:
        res = adaptive_origin(cs, s1, s2, lookup, rounds, tol, view=view)
        passes = res.windows * n_terms + res.contexts * n_pmi
        if fixed is None:
            fixed = passes
        for name in sorted(set(sets)):
            m = sets == name
            s_all, s_mean = spearman_conventions(res.labels[m, view], gold[m], subs[m])
            rows.append(
                {
                    "set": name,
                    "tol": tol,
                    "rounds": ",".join(map(str, rounds)),
                    "n_pairs": int(m.sum()),
                    "mean_k": round(float(res.k_used[m].mean()), 2),
                    "windows": res.windows,
                    "null_passes": res.contexts * n_pmi,
                    "passes": passes,
                    "passes_saved": round(1 - passes / fixed, 3),
                    "origin_all": round(s_all, 2),
                    "origin_mean": round(s_mean, 2),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--rounds", default="1,2,4,8")
    ap.add_argument("--tols", default="0.01,0.02,0.05,0.1")
    ap.add_argument("--name", default="adaptive_cs")
    ap.add_argument("--note", default="")
    a = ap.parse_args(argv)
    rounds = [int(x) for x in a.rounds.split(",")]
    rows = evaluate(a.root, a.run, rounds, [float(x) for x in a.tols.split(",")])
    for r in rows:
        print(r)
    write_results(
        a.name,
        rows,
        meta={
            "command": "python -m bench.bench_adaptive_cs " + " ".join(argv or sys.argv[1:]),
            "what": "tol 0 = the run's fixed |Cs|; Origin = Spearman x100 of Eq. 4 (cosine, "
            "view S) at each pair's stopping |Cs|; passes = windows x generative terms + "
            "null passes (one per distinct context per PMI term)",
            "note": a.note,
        },
    )


if __name__ == "__main__":
    main()
