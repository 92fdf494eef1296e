"""Are the labels right on the domain's own labelled pairs? Origin (Eq. 4) on a pair-classification
dev file against TF-IDF and the downloaded encoder's cosine, before any training.

Reads one finished ``ctxsim origin`` run over a ``*.pairs.tsv`` folder (queries.source sts reads
those files with gold 0/1) and reports, on exactly the pairs it labelled, the average precision of
Origin's labels, of TF-IDF 1-2 gram cosine (fit on the evaluated texts) and of the encoder's
cosine, with paired percentile bootstrap CIs of Origin minus each
(models/evaluation/domain_metrics.py).

Usage::

    ctxsim origin --config configs/medquad.yaml --sts-dir ../shared/data/domain/mediqa_rqe \\
        --max-pairs 100 --run-id rqe-origin --set run.root=/tmp/mq
    .venv/bin/python -m bench.bench_origin_domain --root /tmp/mq --run rqe-origin \\
        --name origin_medquad_rqe_dev_p100

``--terms`` adds each Eq. 3 term's own Origin (the label artefact's ``label_<term>`` columns) as a
system: a config mixing the encoder's disc term with the LM terms against each part, on the same
pairs and contexts. ``--vs NAME=RUN`` adds another Origin run of the same pairs (other
contexts, say) as a system, compared with this one on the pairs both labelled: how the context
source is chosen by measurement.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from bench.harness import RESULTS_DIR, run_artefacts, write_results

#: Eq. 3's terms, in the label artefact's column order (label_disc ... label_right)
TERMS = ("disc", "fwd", "left", "right")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--encoder", default="minilm", help="registry name or model directory")
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default=str(RESULTS_DIR))
    ap.add_argument("--name", default="origin_medquad_rqe_dev")
    ap.add_argument("--label", default="origin (Eq. 4)", help="this run's name in the tables")
    ap.add_argument("--vs", action="append", default=[], help="NAME=RUN: another Origin run")
    ap.add_argument(
        "--terms",
        action="store_true",
        help="also each Eq. 3 term's own Origin (label_disc, ...): a mix against its parts",
    )
    args = ap.parse_args(argv)

    from ctxsim.models.evaluation import domain_metrics as D
    from ctxsim.models.registry import resolve_model
    from ctxsim.readers.domain import PairSet
    from ctxsim.tasks.evaluate import load_st
    from ctxsim.tasks.evaluate.domain import pair_set_similarities

    def labelled(arts: dict, column: str = "label") -> dict[tuple[str, str], tuple[float, int]]:
        t = arts["label"].read_table(["s1", "s2", column, "gold"]).to_pylist()
        return {(r["s1"], r["s2"]): (float(r[column]), int(r["gold"])) for r in t}

    rec, arts = run_artefacts(args.root, args.run)
    mine = labelled(arts)
    others = {
        n: labelled(run_artefacts(args.root, r)[1]) for n, r in (v.split("=", 1) for v in args.vs)
    }
    if args.terms:
        # a term the run did not weigh is all NaN: it is no system (dropped below)
        for term in TERMS:
            own = labelled(arts, f"label_{term}")
            if any(np.isfinite(v) for v, _ in own.values()):
                others[f"{term} term alone"] = own
    keys = [
        k
        for k, (v, _) in mine.items()
        if np.isfinite(v) and all(k in o and np.isfinite(o[k][0]) for o in others.values())
    ]
    s1, s2 = [k[0] for k in keys], [k[1] for k in keys]
    gold = np.asarray([mine[k][1] for k in keys], dtype=int)
    lab = np.asarray([mine[k][0] for k in keys], dtype=float)
    ps = PairSet("dev", s1, s2, gold.tolist())
    systems = {
        args.label: lab,
        **{n: np.asarray([o[k][0] for k in keys], dtype=float) for n, o in others.items()},
        "tfidf 1-2 grams": pair_set_similarities(None, ps, 64),
        args.encoder: pair_set_similarities(
            load_st(str(resolve_model(args.encoder)), "cpu", args.max_seq_length), ps, 64
        ),
    }
    rows, cis = [], []
    for name, pred in systems.items():
        v = D.pair_classification_scores(pred, gold)
        rows.append({"system": name, **{k: round(v[k], 2) for k in ("ap", "accuracy", "f1")}})
    for name, pred in systems.items():
        if name == args.label:
            continue
        ci = D.ap_diff_ci(gold, lab, pred, args.resamples, 0.95, args.seed)
        cis.append(
            {
                "comparison": f"{args.label} - {name}",
                "AP delta": round(ci["delta"], 2),
                "95% CI": f"[{ci['ci_low']:+.2f}, {ci['ci_high']:+.2f}]",
            }
        )
    stats = {s: a.stats.get("cpu_seconds") for s, a in arts.items() if s not in ("shard",)}
    meta = {
        "command": "python -m bench.bench_origin_domain "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "run": args.run,
        "pairs": int(len(gold)),
        "positives": int(gold.sum()),
        "datasets": sorted(set(arts["label"].read_table(["dataset"]).column(0).to_pylist())),
        "vs": args.vs,
        "label_cpu_seconds": stats,
        "config": rec.get("config_source"),
        "queries": rec.get("config", {}).get("queries"),
    }
    write_results(args.name, rows, meta, args.out_dir, tables={"paired AP bootstrap": cis})


if __name__ == "__main__":
    main()
