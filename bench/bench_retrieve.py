"""Benchmark `retrieve`: blocked sparse top-K (ours) vs the naive way, sparse_dot_topn and bm25s.

Corpus: the Standard Ebooks books (paragraphs = chunks), 10% and 100% of the paragraphs; queries
are corpus sentences (blingfire). Reports queries/s (median of repeats), peak traced memory of
one call, and the overlap of each method's top-K set with ours.

    .venv/bin/python -m bench.bench_retrieve [--quick]
"""

# ruff: noqa: B023  (closures are timed inside the loop iteration that defines them)
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.sparse as sp

from bench.common import load_paragraphs
from bench.harness import median, timeit, traced_peak, write_results
from ctxsim.models.corpus.retrieval import fit_index, topk_blocked


def sample_queries(paras: list[str], n: int, seed: int) -> list[str]:
    import blingfire

    rng = np.random.default_rng(seed)
    out: list[str] = []
    for i in rng.permutation(len(paras)):
        sents = [
            s for s in blingfire.text_to_sentences(paras[i]).split("\n") if len(s.split()) >= 4
        ]
        if sents:
            out.append(sents[rng.integers(len(sents))])
        if len(out) == n:
            break
    return out


def naive_sparse_fullsort(q: sp.csr_matrix, c: sp.csr_matrix, k: int) -> list[np.ndarray]:
    """What one writes first: all scores as a dense (n_q, n_chunks) array, then a full sort."""
    scores = (q @ c.T).toarray()
    return [np.argsort(-row, kind="stable")[:k] for row in scores]


def naive_dense(qd: np.ndarray, cd: np.ndarray, k: int) -> list[np.ndarray]:
    """Dense TF-IDF vectors, cosine by matrix product, full sort."""
    scores = qd @ cd.T
    return [np.argsort(-row, kind="stable")[:k] for row in scores]


def overlap(a: list[set[int]], b: list[set[int]]) -> float:
    """Mean Jaccard of two lists of sets (two empty sets agree: 1.0)."""
    return float(
        np.mean([len(x & y) / len(x | y) if x | y else 1.0 for x, y in zip(a, b, strict=True)])
    )


def ours_sets(hits) -> list[set[int]]:
    return [
        set(hits.index[hits.offsets[i] : hits.offsets[i + 1]].tolist())
        for i in range(len(hits.offsets) - 1)
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="3 books, 50 queries, K=2000")
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--queries", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    k = args.k or (2000 if args.quick else 20000)
    nq = args.queries or (50 if args.quick else 200)
    paras_all = load_paragraphs(3 if args.quick else None)
    queries = sample_queries(paras_all, nq, 0)
    rows, tables = [], {"dense_subset": []}
    for frac in (0.1, 1.0):
        paras = paras_all[:: int(round(1 / frac))]
        t0 = time.perf_counter()
        vec, mat = fit_index(paras)
        fit_s = time.perf_counter() - t0
        q = vec.transform(queries).astype(np.float32)
        base = {
            "fraction": frac,
            "chunks": len(paras),
            "vocab": mat.shape[1],
            "K": k,
            "queries": nq,
        }
        res = {}
        hits = None
        ct = sp.csr_matrix(mat.T)
        for backend, th in (("scipy", 1), ("sparse_dot_topn", 1), ("sparse_dot_topn", 2)):

            def ours(backend=backend, th=th) -> None:
                nonlocal hits
                hits = topk_blocked(q, mat, k, 256, backend=backend, threads=th, chunks_t=ct)

            t_ours = median(timeit(ours, args.repeat, 1))
            with traced_peak() as pk:
                ours()
            if backend == "scipy":
                ref = ours_sets(hits)
            res[f"ours (blocked, exact ties; {backend}, {th} thr)"] = (
                t_ours,
                pk.peak_mb,
                overlap(ref, ours_sets(hits)),
                fit_s,
            )

        t_naive = median(timeit(lambda: naive_sparse_fullsort(q, mat, k), args.repeat, 0))
        with traced_peak() as pk:
            naive_sparse_fullsort(q, mat, k)
        # the naive top-K includes zero-score chunks; compare on positive scores only
        res["naive (dense scores + full sort)"] = (t_naive, pk.peak_mb, None, fit_s)

        try:
            from sparse_dot_topn import sp_matmul_topn

            for th in (1, 2):
                fn = lambda th=th: sp_matmul_topn(q, ct, top_n=k, sort=True, n_threads=th)  # noqa: E731
                t = median(timeit(fn, args.repeat, 1))
                with traced_peak() as pk:
                    r = fn()
                sets = [set(r.indices[r.indptr[i] : r.indptr[i + 1]].tolist()) for i in range(nq)]
                res[f"sparse_dot_topn raw ({th} thr)"] = (
                    t,
                    pk.peak_mb,
                    overlap(ref, sets),
                    fit_s,
                )
        except ImportError:
            pass
        try:
            import bm25s

            t0 = time.perf_counter()
            retr = bm25s.BM25()
            retr.index(bm25s.tokenize(paras, show_progress=False), show_progress=False)
            bm_fit = time.perf_counter() - t0
            qt = bm25s.tokenize(queries, show_progress=False)
            kk = min(k, len(paras))
            fn = lambda: retr.retrieve(qt, k=kk, show_progress=False, n_threads=1)  # noqa: E731
            t = median(timeit(fn, args.repeat, 1))
            with traced_peak() as pk:
                docs, scores = fn()
            sets = [set(d[s > 0].tolist()) for d, s in zip(docs, scores, strict=True)]
            res["bm25s (unigram BM25, 1 thread)"] = (t, pk.peak_mb, overlap(ref, sets), bm_fit)
        except ImportError:
            pass
        for name, (t, mem, ov, fit) in res.items():
            rows.append(
                {
                    **base,
                    "method": name,
                    "fit_s": round(fit, 2),
                    "seconds": round(t, 4),
                    "queries_per_s": round(nq / t, 2),
                    "speedup_vs_naive": round(t_naive / t, 2),
                    "peak_traced_mb": round(mem, 1),
                    "overlap_with_ours": ov,
                }
            )
        print(json.dumps(rows[-len(res) :], indent=1), flush=True)
    # Truly dense TF-IDF vectors fit only on a small subset: compare there.
    sub = paras_all[:: max(1, len(paras_all) // 3000)][:3000]
    vec, mat = fit_index(sub)
    q = vec.transform(queries)
    if mat.shape[0] * mat.shape[1] * 4 < 2.5e9:
        cd, qd = mat.toarray(), q.toarray()
        kk = min(k, mat.shape[0])
        t_d = median(timeit(lambda: naive_dense(qd, cd, kk), args.repeat, 0))
        t_o = median(timeit(lambda: topk_blocked(q, mat, kk, 256), args.repeat, 1))
        tables["dense_subset"].append(
            {
                "chunks": mat.shape[0],
                "vocab": mat.shape[1],
                "K": kk,
                "dense_cosine_s": round(t_d, 4),
                "ours_s": round(t_o, 4),
                "speedup": round(t_d / t_o, 1),
                "dense_matrix_mb": round(cd.nbytes / 2**20, 1),
            }
        )
        print(tables["dense_subset"], flush=True)
    write_results(
        "retrieve" + ("_quick" if args.quick else ""),
        rows,
        {
            "command": "python -m bench.bench_retrieve" + (" --quick" if args.quick else ""),
            "queries": nq,
            "K": k,
            "repeat": args.repeat,
        },
        tables=tables,
    )


if __name__ == "__main__":
    main()
