"""Are the labels right on the domain's own labelled pairs? Origin (Eq. 4) on a pair-classification
dev file against TF-IDF and the downloaded encoder's cosine, before any training.

Reads one finished ``ctxsim origin`` run over a ``*.pairs.tsv`` folder (queries.source sts reads
those files with gold 0/1) and reports, on exactly the pairs it labelled, the average precision of
Origin's labels, of TF-IDF 1-2 gram cosine (fit on the evaluated texts) and of the encoder's
cosine, with paired percentile bootstrap CIs of Origin minus each (models/domain_metrics.py).

Usage::

    ctxsim origin --config configs/medquad.yaml --sts-dir ../shared/data/domain/mediqa_rqe \\
        --max-pairs 100 --run-id rqe-origin --set run.root=/tmp/mq
    .venv/bin/python -m bench.bench_origin_domain --root /tmp/mq --run rqe-origin \\
        --name origin_medquad_rqe_dev_p100
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from bench.harness import RESULTS_DIR, run_artefacts, write_results


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
    args = ap.parse_args(argv)

    from ctxsim.models import domain_metrics as D
    from ctxsim.models.registry import resolve_model
    from ctxsim.readers.domain import PairSet
    from ctxsim.tasks.evaluate import load_st
    from ctxsim.tasks.evaluate.domain import pair_scores

    rec, arts = run_artefacts(args.root, args.run)
    table = arts["label"].read_table(["s1", "s2", "label", "gold", "dataset"])
    lab = table.column("label").to_numpy(zero_copy_only=False).astype(float)
    gold = table.column("gold").to_numpy(zero_copy_only=False).astype(int)
    ok = np.isfinite(lab)
    s1 = [x for x, k in zip(table.column("s1").to_pylist(), ok, strict=True) if k]
    s2 = [x for x, k in zip(table.column("s2").to_pylist(), ok, strict=True) if k]
    gold, lab = gold[ok], lab[ok]
    ps = PairSet("dev", s1, s2, gold.tolist())
    systems = {
        "origin (Eq. 4)": lab,
        "tfidf 1-2 grams": pair_scores(None, ps, 64),
        args.encoder: pair_scores(
            load_st(str(resolve_model(args.encoder)), "cpu", args.max_seq_length), ps, 64
        ),
    }
    rows, cis = [], []
    for name, pred in systems.items():
        v = D.pair_classification_scores(pred, gold)
        rows.append({"system": name, **{k: round(v[k], 2) for k in ("ap", "accuracy", "f1")}})
    for name, pred in systems.items():
        if name == "origin (Eq. 4)":
            continue
        ci = D.ap_diff_ci(gold, lab, pred, args.resamples, 0.95, args.seed)
        cis.append(
            {
                "comparison": f"origin - {name}",
                "AP delta": round(ci["delta"], 2),
                "95% CI": f"[{ci['ci_low']:+.2f}, {ci['ci_high']:+.2f}]",
            }
        )
    stats = {s: arts[s].stats.get("cpu_seconds") for s in ("gencontexts", "score", "label")}
    meta = {
        "command": "python -m bench.bench_origin_domain "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "run": args.run,
        "pairs": int(len(gold)),
        "positives": int(gold.sum()),
        "datasets": sorted(set(table.column("dataset").to_pylist())),
        "label_cpu_seconds": stats,
        "config": rec.get("config_source"),
        "queries": rec.get("config", {}).get("queries"),
    }
    write_results(args.name, rows, meta, args.out_dir, tables={"paired AP bootstrap": cis})


if __name__ == "__main__":
    main()
