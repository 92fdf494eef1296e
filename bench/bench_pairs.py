"""The pairs stage's mining encoder (tasks/pairs.py, encoder tfidf): TF-IDF uni+bigrams fitted on
a corpus sample, reduced by a truncated SVD (LSA), nearest neighbours by faiss. The SVD's dense
steps on (features x dim) matrices are most of the stage's CPU; compared in one run:

* ``ctxsim float32``: ``models.corpus.pairs.tfidf_embed`` as shipped (float32 TF-IDF,
  ``lsa_project``: the randomized SVD normalised on the sentence side only);
* ``scikit-learn float32``: TruncatedSVD on the float32 TF-IDF (what the stage ran before
  ``lsa_project``: the same random start, so its neighbours should be the same);
* ``scikit-learn float64`` (the naive way: TfidfVectorizer's default dtype, TruncatedSVD);
* ``scikit-learn float64 arpack``: the exact truncated SVD instead of the randomized one;
* ``minilm`` (the library a user would pick: sentence-transformers on the queries, no fit).

Each variant runs in a fresh process (its own peak RSS); the nearest neighbours of every query
are compared with float64's and scikit-learn float32's (overlap of the 10-NN sets, what decides
the mined pairs). Growth: every variant at several corpus sample sizes. Usage::

    .venv/bin/python -m bench.bench_pairs --root ROOT --samples 5000 20000 50000 --name pairs_lsa

``ROOT`` holds a finished run's ``shard`` and ``queries`` artefacts (the books_generated run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import run_isolated, write_results

KNN = 10


def corpus_and_queries(root: Path, n_sample: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n_sample`` corpus sentences drawn as the stage draws its IDF sample, and the queries."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = sorted((root / "shard").glob("*/part-*.parquet"))
    queries = sorted((root / "queries").glob("*/part-*.parquet"))
    if not shards or not queries:
        raise SystemExit(f"{root}: no shard or queries artefact (run the config to pairs first)")
    corpus = pa.concat_tables([pq.read_table(f, columns=["text"]) for f in shards]).column("text")
    q = pa.concat_tables([pq.read_table(f, columns=["text"]) for f in queries])
    rng = np.random.default_rng(seed)
    take = rng.choice(len(corpus), size=min(n_sample, len(corpus)), replace=False)
    return corpus.take(pa.array(np.sort(take))).to_pylist(), q.column("text").to_pylist()


def neighbours(emb: np.ndarray, k: int = KNN) -> np.ndarray:
    import faiss

    x = np.ascontiguousarray(emb, np.float32)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    _, idx = index.search(x, k + 1)
    return idx[:, 1:]


def embed(variant: str, root: str, n_sample: int, dim: int) -> dict[str, Any]:
    """One variant's vectors of the queries (in a fresh process): CPU-s and 10-NN lists."""
    import torch

    torch.set_num_threads(1)
    fit, queries = corpus_and_queries(Path(root), n_sample)
    t0 = time.process_time()
    if variant == "ctxsim float32":
        from ctxsim.models.corpus.pairs import tfidf_embed

        emb = tfidf_embed(queries, dim, fit_texts=fit)
    elif variant.startswith("scikit-learn"):
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.preprocessing import normalize

        algo = "arpack" if variant.endswith("arpack") else "randomized"
        dtype = np.float32 if "float32" in variant else np.float64
        vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1, dtype=dtype)
        xf = vec.fit_transform(fit + queries)
        svd = TruncatedSVD(n_components=dim, random_state=0, algorithm=algo).fit(xf)
        emb = normalize(svd.transform(vec.transform(queries))).astype(np.float32)
    elif variant == "minilm":
        from ctxsim.models.encoders import load_encoder

        model = load_encoder("minilm", None, "cpu")
        emb = model.encode(queries, batch_size=128, normalize_embeddings=True)
    else:
        raise ValueError(f"unknown variant {variant!r}")
    cpu = time.process_time() - t0
    return {"cpu_s": cpu, "nbr": neighbours(np.asarray(emb, np.float32)), "queries": len(queries)}


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Mean share of a query's k nearest neighbours found by both."""
    return float(np.mean([len(set(x) & set(y)) / a.shape[1] for x, y in zip(a, b, strict=True)]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--samples", type=int, nargs="+", default=[5000, 20000, 50000])
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--no-arpack", action="store_true", help="skip the (slow) exact SVD")
    ap.add_argument("--name", default="pairs_lsa")
    ap.add_argument("--out-dir", default=None, help="default bench/results")
    args = ap.parse_args(argv)
    top = max(args.samples)
    runs: list[tuple[str, int]] = [("ctxsim float32", n) for n in args.samples]
    runs += [("scikit-learn float32", n) for n in args.samples]
    runs += [("scikit-learn float64", n) for n in args.samples]
    if not args.no_arpack:
        runs.append(("scikit-learn float64 arpack", top))
    runs.append(("minilm", 0))
    got: dict[tuple[str, int], dict[str, Any]] = {}
    for variant, n in runs:
        res, peak, base = run_isolated(embed, variant, str(args.root), n, args.dim)
        got[(variant, n)] = {**res, "peak_rss_mb": peak - base}
        print(f"{variant} sample {n}: {res['cpu_s']:.1f} CPU-s", flush=True)
    rows = []
    for variant, n in runs:
        r = got[(variant, n)]
        ref = got[("scikit-learn float64", n if n else top)]
        f32 = got[("scikit-learn float32", n if n else top)]
        rows.append(
            {
                "variant": variant,
                "idf_sample": n,
                "queries": r["queries"],
                "cpu_s": round(r["cpu_s"], 1),
                "x_float64": round(ref["cpu_s"] / r["cpu_s"], 2),
                "knn10_overlap_with_float64": round(overlap(r["nbr"], ref["nbr"]), 3),
                "same_neighbours_in_order": f"{int((r['nbr'] == ref['nbr']).all(1).sum())}"
                f"/{r['queries']}",
                "same_in_order_as_sklearn_float32": f"{int((r['nbr'] == f32['nbr']).all(1).sum())}"
                f"/{r['queries']}",
                "peak_rss_growth_mb": round(r["peak_rss_mb"], 1),
            }
        )
    meta = {
        "command": "python -m bench.bench_pairs "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "workload": f"the run's queries embedded after a fit on idf_sample corpus sentences, "
        f"LSA dimension {args.dim}, {KNN} nearest neighbours (faiss IndexFlatIP), one thread",
        "reference": "scikit-learn float64 at the same idf_sample (minilm: at the largest)",
        "cpu_s": "time.process_time of the embedding (fit, SVD, transform), not the file reads",
    }
    write_results(args.name, rows, meta, out_dir=args.out_dir)


if __name__ == "__main__":
    main()
