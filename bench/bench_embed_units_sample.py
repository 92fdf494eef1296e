"""Labels from a sample of the context units: how far they move from all units' labels.

The closed form needs only M, the d x d scatter of the units' embeddings (an average), so a
seeded sample of units (`embed.max_units`, store/chunks.py ``sampled_units``) estimates it, and
the corpus pass stops growing with the corpus. On a finished run with the closed form (its
`embed` over every unit and its `label`), per sample size and seed: the labels' Spearman and
largest absolute difference against the labels from all units (recomputed the label stage's way,
checked against the stored ones), and the share of embed's units, so of its CPU, the sample takes.

Usage: ``python -m bench.bench_embed_units_sample --root ROOT --run RUN [--sizes 2000 8000]
[--seeds 0 1]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.harness import write_results


def main(argv: list[str] | None = None) -> None:
    from scipy.stats import spearmanr

    from ctxsim.models.contextual.encoder_origin import ScatterStats, closed_form_similarity
    from ctxsim.models.encoders import bf16_available, encode, load_encoder
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.chunks import sampled_units
    from ctxsim.tasks.embed import EmbedParams, read_embeddings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--run", required=True, help="a run whose embed encoded every unit")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 8000, 16000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--name", default="embed_units_sample")
    ap.add_argument("--out-dir", type=Path, default=None)
    args = ap.parse_args(argv)

    rec = json.loads((args.root / "runs" / f"{args.run}.json").read_text())
    store = ArtefactStore(args.root)
    embed, label = (store.require(s, rec["stages"][s]["fingerprint"]) for s in ("embed", "label"))
    ep = EmbedParams(**embed.manifest["params"])  # the label stage's reading of them
    if ep.max_units:
        raise SystemExit(f"{embed.path}: embed.max_units={ep.max_units}; a run of all units")
    table = label.read_table(["s1_id", "s2_id", "s1", "s2", "label"])
    stored = table.column("label").to_numpy().astype(np.float64)
    ids = np.r_[table.column("s1_id").to_numpy(), table.column("s2_id").to_numpy()]
    texts = table.column("s1").to_pylist() + table.column("s2").to_pylist()
    qids, first = np.unique(ids, return_index=True)
    t0 = time.process_time()
    model = load_encoder(ep.model, ep.max_seq_length, "cpu")
    bf16 = ep.bf16 and bf16_available("cpu")  # as the label stage encodes them
    emb = encode(model, [texts[i] for i in first], ep.batch_size, bf16=bf16)
    encode_cpu = time.process_time() - t0
    n = table.num_rows
    e1 = emb[np.searchsorted(qids, ids[:n])]
    e2 = emb[np.searchsorted(qids, ids[n:])]
    units = read_embeddings(embed).astype(np.float64)
    full = closed_form_similarity(e1, e2, ScatterStats.of(units).matrix())
    rows = [
        {
            "units": len(units),
            "seed": "-",
            "share of units": 1.0,
            "Spearman vs all units": round(float(spearmanr(full, stored).statistic), 6),
            "max |label difference|": round(float(np.abs(full - stored).max()), 4),
            "against": "the stored labels (recomputed here)",
        }
    ]
    for k in sorted(s for s in args.sizes if s < len(units)):
        for seed in args.seeds:
            sel = sampled_units(len(units), k, seed)
            lab = closed_form_similarity(e1, e2, ScatterStats.of(units[sel]).matrix())
            rows.append(
                {
                    "units": k,
                    "seed": seed,
                    "share of units": round(k / len(units), 3),
                    "Spearman vs all units": round(float(spearmanr(full, lab).statistic), 6),
                    "max |label difference|": round(float(np.abs(full - lab).max()), 4),
                    "against": "all units",
                }
            )
    meta = {
        "run": f"{args.root}:{args.run}",
        "embed": {"fingerprint": embed.fingerprint, "units": len(units), **embed.stats},
        "labelled pairs": n,
        "sentences encoded (CPU-s)": round(encode_cpu, 1),
        "note": "seed 0 is the sample embed.max_units draws (store/chunks.py sampled_units)",
        "command": "python -m bench.bench_embed_units_sample " + " ".join(sys.argv[1:]),
    }
    md, js = write_results(args.name, rows, meta=meta, out_dir=args.out_dir)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    main()
