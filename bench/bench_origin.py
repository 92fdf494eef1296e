"""Origin similarity (Eq. 4) of a finished `ctxsim origin` run, re-read at every |Cs| <= the
run's, per Eq. 3 view, under several vector similarities: the |Cs| curve (Table 7) and the
ablations (Table 9) from one scoring pass.

Selection is greedy in rank order, so the first k contexts of a set of size K are exactly the set
of size k: one run at |Cs| = K gives the whole curve k = 1..K without rescoring. Similarities:

models/contextual/origin.py ``SIMILARITIES`` (cosine is the paper's Eq. 4; pearson, neg_rmse and
cross_fit
remove the context's own likelihood or the sentence's fluency, see ``similarity_by_group``).

Tune on STSb dev only. Usage::

    .venv/bin/python -m bench.bench_origin --run books-origin-cs12 --ks 1,2,4,8,12
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import load_run
from bench.harness import pivot_by_k, write_results
from ctxsim.models.contextual.origin import (
    SIMILARITIES,
    ContextSets,
    ScoreLookup,
    origin_labels,
    report_name,
    required_scores,
    spearman_conventions,
)
from ctxsim.scores.views import ablation_views


def curve(
    root: Path, run_id: str, ks: list[int], lambdas: list[tuple[float, ...]] = ()
) -> list[dict[str, Any]]:
    arts = load_run(root, run_id)
    sel = arts["select"].read_table(["query_id", "context_id", "position"])
    table = arts["score"].read_table()
    names, values, _ = ablation_views(table, True)
    # terms the run took as PMI (score.pmi) also as plain Eq. 3 terms: term + null_<term>
    for i, term in enumerate(("fwd", "left", "right")):
        null = f"null_{term}"
        if null in table.column_names:
            base = table.column(null).to_numpy(zero_copy_only=False).astype(np.float64)
            if not np.all(np.isnan(base)):
                names.append(f"{term}_raw")
                values = np.column_stack([values, values[:, 2 + i] + base])
    # other Eq. 3 weightings from the same term columns (names[1:5] are disc, fwd, left, right)
    for lam in lambdas:
        used = [(w, values[:, 1 + i]) for i, w in enumerate(lam) if w != 0.0]
        names.append("lambda(" + ",".join(f"{w:g}" for w in lam) + ")")
        values = np.column_stack([values, sum(w * col for w, col in used)])
    score = arts["score"].read_table(["query_id", "context_id"])
    lookup = ScoreLookup(
        score.column("query_id").to_numpy(), score.column("context_id").to_numpy(), values
    )
    lab = arts["label"].read_table().to_pandas()
    sets = np.asarray(
        [report_name(d, s) for d, s in zip(lab["dataset"], lab["subset"], strict=True)], object
    )
    subs = lab["subset"].to_numpy(object)
    gold = lab["gold"].to_numpy(np.float64)
    pos = sel.column("position").to_numpy()
    rows = []
    for k in ks:
        keep = pos < k
        cs = ContextSets.from_rows(
            sel.column("query_id").to_numpy()[keep],
            sel.column("context_id").to_numpy()[keep],
            pos[keep],
        )
        s1 = lab["s1_id"].to_numpy(np.int64)
        s2 = lab["s2_id"].to_numpy(np.int64)
        sims = {h: origin_labels(cs, s1, s2, lookup, similarity=h) for h in SIMILARITIES}
        n_scores = len(required_scores(cs, s1, s2)[0])
        for name in sorted(set(sets)):
            m = sets == name
            for h in SIMILARITIES:
                for j, view in enumerate(names):
                    if np.all(np.isnan(sims[h][m, j])):
                        continue
                    s_all, s_mean = spearman_conventions(sims[h][m, j], gold[m], subs[m])
                    rows.append(
                        {
                            "run": run_id,
                            "set": name,
                            "k": k,
                            "similarity": h,
                            "view": view,
                            "spearman_all": round(s_all, 2),
                            "spearman_mean": round(s_mean, 2),
                            "n_pairs": int(m.sum()),
                            "sc_scores": n_scores,
                        }
                    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path("data/artefacts"))
    ap.add_argument("--run", required=True)
    ap.add_argument("--ks", default="1,2,4,8")
    ap.add_argument("--name", default="origin_curve")
    ap.add_argument(
        "--lambdas", default="", help="Eq. 3 weightings disc,fwd,left,right separated by ';'"
    )
    args = ap.parse_args()
    lambdas = [tuple(float(x) for x in g.split(",")) for g in args.lambdas.split(";") if g]
    if any(len(lam) != 4 for lam in lambdas):
        ap.error("--lambdas: four numbers (disc,fwd,left,right) per weighting")
    rows = curve(args.root, args.run, [int(k) for k in args.ks.split(",")], lambdas)
    origin = json.loads(
        (load_run(args.root, args.run)["label"].files_dir / "origin.json").read_text()
    )
    baselines = [
        {"set": s, "view": v, "spearman_all": r["spearman_all"]}
        for s, d in origin["datasets"].items()
        for v, r in d["views"].items()
        if v in ("tfidf_cosine", "backbone_cosine")
    ]
    write_results(
        args.name,
        pivot_by_k(rows, ("set", "similarity", "view"), "spearman_all"),
        {
            "command": f"python -m bench.bench_origin --run {args.run} --ks {args.ks}"
            + (f" --lambdas '{args.lambdas}'" if args.lambdas else ""),
            "what": "Spearman x100 ('all' convention) of Eq. 4 at |Cs| = k (prefix of the "
            "run's sets), per Eq. 3 view and vector similarity; cosine is the paper's",
            "lambdas": origin.get("lambdas"),
        },
        tables={
            "scores_needed": [
                {"k": k, "sc_scores": n}
                for k, n in sorted({(r["k"], r["sc_scores"]) for r in rows})
            ],
            "baselines_same_pairs": baselines,
        },
    )


if __name__ == "__main__":
    main()
