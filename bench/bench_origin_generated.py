"""Origin (Eq. 4) with generated contexts (tasks/gencontexts.py), re-read from one finished
`ctxsim origin` run: per side (continuations only, preceding sentences only, both) and |Cs| = k
(the first k of that side in sample order), with a paired BCa bootstrap CI of the difference to
TF-IDF cosine of the same pairs, and what the run paid per pair.

Samples are independent draws in a fixed order, so the first k samples of a run with K are the
samples of a run with k: one run gives the whole |Cs| curve. Only the S column is read: for a
one-sided generated slot S is its one term (the absent side's term is 0). Tune on STSb dev only.
Usage::

    .venv/bin/python -m bench.bench_origin_generated --root /tmp/root --run gen-p100 \
        --ks 1,2,4,8 --name origin_generated_p100
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from bench.harness import pivot_by_k, write_results
from ctxsim.models.contextual.origin import (
    SIMILARITIES,
    ContextSets,
    ScoreLookup,
    origin_labels,
    spearman_x100,
)
from ctxsim.models.evaluation.metrics import bootstrap_diff_ci
from ctxsim.models.training.objectives import tfidf_cosine
from ctxsim.store.artefacts import ArtefactStore

SIDES = {"right": ("right",), "left": ("left",), "both": ("right", "left")}


def _term_views(score: Any, params: dict[str, Any]) -> dict[str, np.ndarray]:
    """S as the run scored it, and, where ``score.pmi`` took terms as PMI, S with the null terms
    added back (the raw log-probabilities): one PMI run gives both, paired on the same samples."""
    S = score.column("S").to_numpy().astype(np.float64)
    pmi = list(params.get("pmi", []))
    if not pmi:
        return {"S": S}
    raw = S.copy()
    for d in pmi:
        lam = float(params.get(f"lambda_{d}", 1.0))
        raw += lam * np.nan_to_num(score.column(f"null_{d}").to_numpy().astype(np.float64))
    return {"S_pmi": S, "S_raw": raw}


def curve(
    root: Path, run_id: str, ks: list[int], n_resamples: int, skip: int = 0
) -> dict[str, Any]:
    """Spearman rows per side, |Cs| and term, the cosine predictions, and what the run cost;
    ``n_resamples`` 0 skips the bootstrap CIs. ``skip``: Cs is the k samples after a sentence's
    first ``skip`` (another draw of the same sampler: with ``--against`` the same run, the
    spread between two draws, which is what a change of sampler must be read against)."""
    rec = json.loads((root / "runs" / f"{run_id}.json").read_text())
    store = ArtefactStore(root)
    art = {n: store.require(n, rec["stages"][n]["fingerprint"]) for n in rec["stages"]}
    gen = art["gencontexts"].read_table(["context_id", "query_id", "side", "sample", "text"])
    gen = gen.filter(pc.not_equal(gen["text"], ""))
    score = art["score"].read_table()
    terms = _term_views(score, rec["config"].get("score", {}))
    lookup = ScoreLookup(
        score.column("query_id").to_numpy(),
        score.column("context_id").to_numpy(),
        np.column_stack(list(terms.values())),
    )
    sel = art["select"].read_table(["query_id", "context_id", "position"])
    chosen = set(zip(sel["query_id"].to_pylist(), sel["context_id"].to_pylist(), strict=True))
    lab = art["label"].read_table().sort_by("pair_id")
    s1, s2 = lab["s1_id"].to_numpy(), lab["s2_id"].to_numpy()
    gold = lab["gold"].to_numpy().astype(np.float64)
    tfidf = tfidf_cosine(lab["s1"].to_pylist(), lab["s2"].to_pylist())
    side = np.asarray(gen["side"].to_pylist(), object)
    q, c = gen["query_id"].to_numpy(), gen["context_id"].to_numpy()
    j = gen["sample"].to_numpy()
    # only what select kept (the diversity rule), in sample order
    kept = np.asarray([(a, b) in chosen for a, b in zip(q, c, strict=True)], bool)
    rows = []
    preds_cos: dict[tuple[str, int, str], np.ndarray] = {}
    for name, sides in SIDES.items():
        m = kept & np.isin(side, sides)
        if not all((m & (side == x)).any() for x in sides):
            continue
        # the order select used: sample j, right before left
        rank = j[m] * 2 + (side[m] == "left")
        order = np.lexsort((rank, q[m]))
        qm, cm = q[m][order], c[m][order]
        pos = np.zeros(len(qm), np.int64)
        starts = np.flatnonzero(np.r_[True, qm[1:] != qm[:-1]])
        for a, b in zip(starts, np.r_[starts[1:], len(qm)], strict=True):
            pos[a:b] = np.arange(b - a)
        for k in ks:
            if skip + k > pos.max() + 1:
                continue
            keep = (pos >= skip) & (pos < skip + k)
            cs = ContextSets.from_rows(qm[keep], cm[keep], pos[keep] - skip)
            for how in SIMILARITIES:
                preds = origin_labels(cs, s1, s2, lookup, similarity=how)
                for t, term in enumerate(terms):
                    pred = preds[:, t]
                    row = {"contexts": name, "k": k, "similarity": how, "term": term}
                    row["spearman"] = round(spearman_x100(pred, gold), 2)
                    if how == "cosine":
                        preds_cos[(name, k, term)] = pred
                    if how == "cosine" and n_resamples > 0:
                        ci = bootstrap_diff_ci(gold, pred, tfidf, n_resamples=n_resamples)
                        row["minus_tfidf"] = round(ci["delta"], 2)
                        row["ci_low"] = round(ci["ci_low"], 2)
                        row["ci_high"] = round(ci["ci_high"], 2)
                        if t > 0:  # the raw term against the run's S (PMI), paired
                            ci = bootstrap_diff_ci(gold, preds[:, 0], pred, n_resamples=n_resamples)
                            row["S_minus_this"] = round(ci["delta"], 2)
                            row["S_minus_this_ci"] = [
                                round(ci["ci_low"], 2),
                                round(ci["ci_high"], 2),
                            ]
                    rows.append(row)
    stages = ("gencontexts", "score")
    wall = {n: rec["stages"][n]["seconds"] for n in stages}
    cpu = {n: float(art[n].stats.get("cpu_seconds", float("nan"))) for n in stages}
    threads = rec["config"]["run"].get("torch_threads", 0)
    return {
        "rows": rows,
        "preds": preds_cos,
        "gold": gold,
        "baseline": {"tfidf_cosine": round(spearman_x100(tfidf, gold), 2), "n_pairs": len(gold)},
        "cost": {
            **{f"{n}_wall_s": round(v, 1) for n, v in wall.items()},
            **{f"{n}_cpu_s": round(v, 1) for n, v in cpu.items()},
            "cpu_s_per_pair": round(sum(cpu.values()) / max(len(gold), 1), 2),
            "torch_threads": threads,
            "gencontexts_stats": art["gencontexts"].stats,
            "score_stats": {
                k: v for k, v in art["score"].stats.items() if k in ("pairs", "forward_calls")
            },
        },
        "config": rec["config"].get("gencontexts"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path("data/artefacts"))
    ap.add_argument("--run", required=True)
    ap.add_argument("--ks", default="1,2,4,8")
    ap.add_argument("--name", default="origin_generated")
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--note", default="", help="free text recorded with the result")
    ap.add_argument(
        "--skip",
        type=int,
        default=0,
        help="Cs from the samples after each sentence's first SKIP (this run only; --against "
        "takes its first k): with --against the same run, two draws of one sampler compared",
    )
    ap.add_argument(
        "--against",
        default=None,
        help="another run on the same root and pairs: paired BCa CI of this run minus it "
        "(cosine, per side, k and term)",
    )
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    res = curve(args.root, args.run, ks, args.resamples, args.skip)
    tables: dict[str, list[dict[str, Any]]] = {}
    if args.against:
        other = curve(args.root, args.against, ks, 0)  # its predictions only, no CIs
        if not np.array_equal(other["gold"], res["gold"]):
            raise SystemExit(f"--against {args.against}: not the same pairs as {args.run}")
        diff = []
        for key, pred in res["preds"].items():
            # the other run's same side and k; its S when the terms differ (PMI vs plain runs)
            ref = other["preds"].get(key)
            if ref is None:
                ref = next(
                    (v for (a, b, _), v in other["preds"].items() if (a, b) == key[:2]), None
                )
            if ref is None:
                continue
            ci = bootstrap_diff_ci(res["gold"], pred, ref, n_resamples=args.resamples)
            diff.append(
                {
                    "contexts": key[0],
                    "k": key[1],
                    "term": key[2],
                    "this": round(spearman_x100(pred, res["gold"]), 2),
                    args.against: round(spearman_x100(ref, res["gold"]), 2),
                    "delta": round(ci["delta"], 2),
                    "ci_low": round(ci["ci_low"], 2),
                    "ci_high": round(ci["ci_high"], 2),
                }
            )
        tables[f"minus_{args.against}_paired_bca"] = diff
    res.pop("preds")
    res.pop("gold")
    write_results(
        args.name,
        pivot_by_k(res["rows"], ("contexts", "similarity", "term"), "spearman"),
        {
            "command": f"python -m bench.bench_origin_generated --root {args.root} "
            f"--run {args.run} --ks {args.ks} --name {args.name}"
            + (f" --skip {args.skip}" if args.skip else "")
            + (f" --against {args.against}" if args.against else ""),
            "what": "Spearman x100 of Eq. 4 (S of each generated slot) at |Cs| = k, per side; "
            "cosine is the paper's",
            "note": args.note,
            "baseline_same_pairs": res["baseline"],
            "cost": res["cost"],
            "gencontexts": res["config"],
        },
        tables={
            **tables,
            "cosine_vs_tfidf_paired_bca": [
                {
                    k: r[k]
                    for k in (
                        "contexts",
                        "term",
                        "k",
                        "spearman",
                        "minus_tfidf",
                        "ci_low",
                        "ci_high",
                        "S_minus_this",
                        "S_minus_this_ci",
                    )
                    if k in r
                }
                for r in res["rows"]
                if r["similarity"] == "cosine"
            ],
        },
    )
    print(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
