"""Adaptive |Cs| (models/contextual/adaptive_cs.py) on a finished `ctxsim origin` run: passes saved
and
the Origin change, per tolerance, against the fixed |Cs| of the run.

Read offline from the run's select/score/label artefacts (selection is greedy, so round k's set
is the first k contexts of the run's): no model runs, so no timing and no load caveat. Passes
= distinct (query, context) windows per generative term, plus one null pass per distinct
context for each term the run took as PMI. Usage::

    .venv/bin/python -m bench.archive.bench_adaptive_cs --root ROOT --run RUN --rounds 1,2,4,8 \\
        --tols 0,0.01,0.02,0.05,0.1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import load_run
from bench.harness import write_results
from ctxsim.models.contextual.adaptive_cs import adaptive_origin
from ctxsim.models.contextual.origin import (
    ContextSets,
    ScoreLookup,
    report_name,
    spearman_conventions,
)
from ctxsim.models.evaluation.metrics import bootstrap_diff_ci
from ctxsim.scores.views import ablation_views


def evaluate(
    root: Path, run_id: str, rounds: list[int], tols: list[float], n_resamples: int = 2000
) -> list[dict]:
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
    # a term counts when something was scored for it: an empty slot's term (a continuation has
    # no left side) reads 0 without a pass
    n_terms = sum(
        1
        for d in ("fwd", "left", "right")
        if np.nanmax(np.abs(table.column(f"gen_{d}").to_numpy(zero_copy_only=False)), initial=0) > 0
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
    fixed_pred: np.ndarray | None = None
    for tol in [0.0, *[t for t in tols if t > 0]]:
        res = adaptive_origin(cs, s1, s2, lookup, rounds, tol, view=view)
        passes = res.windows * n_terms + res.contexts * n_pmi
        if fixed is None:
            fixed, fixed_pred = passes, res.labels[:, view]
        for name in sorted(set(sets)):
            m = sets == name
            s_all, s_mean = spearman_conventions(res.labels[m, view], gold[m], subs[m])
            ci: dict[str, Any] = {}
            if tol > 0 and n_resamples > 0 and fixed_pred is not None:
                d = bootstrap_diff_ci(
                    gold[m], res.labels[m, view], fixed_pred[m], n_resamples=n_resamples
                )
                ci = {
                    "minus_fixed": round(d["delta"], 2),
                    "ci": [round(d["ci_low"], 2), round(d["ci_high"], 2)],
                }
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
                    **ci,
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
    ap.add_argument("--resamples", type=int, default=2000, help="paired BCa CI vs the fixed |Cs|")
    a = ap.parse_args(argv)
    rounds = [int(x) for x in a.rounds.split(",")]
    rows = evaluate(a.root, a.run, rounds, [float(x) for x in a.tols.split(",")], a.resamples)
    for r in rows:
        print(r)
    write_results(
        a.name,
        rows,
        meta={
            "command": "python -m bench.archive.bench_adaptive_cs "
            + " ".join(argv or sys.argv[1:]),
            "what": "tol 0 = the run's fixed |Cs|; Origin = Spearman x100 of Eq. 4 (cosine, "
            "view S) at each pair's stopping |Cs|; passes = windows x generative terms + "
            "null passes (one per distinct context per PMI term); minus_fixed: Origin minus the "
            "fixed |Cs|'s on the same pairs, with its paired BCa 95% CI",
            "note": a.note,
        },
    )


if __name__ == "__main__":
    main()
