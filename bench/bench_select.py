"""Benchmark for the `select` stage: diverse context selection (Sec. 3.3).

One run compares, on the (i-1)-th sentences of real book paragraphs as candidates (rank order =
a seeded shuffle; chunk = paragraph):

- ``exact``  the naive way: every candidate against every chosen set (pairwise Jaccard);
- ``lsh``    what a user would pick: datasketch MinHashLSH (signatures computed in one vectorised
             pass) + exact verification of hits, at two operating thresholds;
- ``prefix`` prefix-filter index (exact by construction), the default of ``select.method``.

For |Cs| = 100 and 500 from 2000 / 5000 candidates it reports median seconds per query, the
speed-up over ``exact``, whether the selection is identical to ``exact`` (and how many queries
differ), and peak traced memory; plus scaling with the number of candidates.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_select [--quick]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np

from bench.common import CORPUS
from bench.harness import median, timeit, traced_peak, write_results
from ctxsim.models.corpus.selection import lsh_miss_probability, select, token_ranks, word_set

_SPLIT = re.compile(r"(?<=[.!?”])\s+(?=[A-Z“])")


def load_candidates(corpus: Path, n_books: int) -> tuple[list[str], list[int]]:
    """Sentences of the first ``n_books`` books with a paragraph id each."""
    sents: list[str] = []
    para: list[int] = []
    pid = 0
    for path in sorted(corpus.glob("*.jsonl.gz"))[:n_books]:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                for p in json.loads(line)["paragraphs"]:
                    for s in _SPLIT.split(p):
                        sents.append(s)
                        para.append(pid)
                    pid += 1
    return sents, para


METHODS = {
    "exact": {"method": "exact"},
    "prefix": {"method": "prefix"},  # ranks filled in main()
    "prefix (length order)": {"method": "prefix"},
    "lsh@0.3": {"method": "lsh", "lsh_threshold": 0.3, "num_perm": 128},
    "lsh@0.5": {"method": "lsh", "lsh_threshold": 0.5, "num_perm": 128},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer queries and repeats")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    args = ap.parse_args()
    n_queries = 3 if args.quick else 8
    repeat = 1 if args.quick else 3
    sents, para = load_candidates(args.corpus, 4)
    sets_all = [word_set(s) for s in sents]
    # the stage computes one token order per shard from all candidates; here from the sample
    METHODS["prefix"] = {"method": "prefix", "ranks": token_ranks(sets_all)}
    para_arr = np.asarray(para)

    def query_sets(n_cand: int, q: int) -> tuple[list, list]:
        # candidates come from retrieved chunks: whole paragraphs, in a shuffled rank order
        r = np.random.default_rng(q)
        idx = r.choice(len(sents), size=n_cand, replace=False)
        r.shuffle(idx)
        return [sets_all[i] for i in idx], para_arr[idx].tolist()

    rows = []
    for n_cand, k in [(2000, 100), (2000, 500), (5000, 100), (5000, 500)]:
        queries = [query_sets(n_cand, q) for q in range(n_queries)]
        ref = [select(s, c, k, 0.5, method="exact") for s, c in queries]
        for name, kw in METHODS.items():
            secs = []
            same = 0
            for (s, c), want in zip(queries, ref, strict=True):
                got = select(s, c, k, 0.5, **kw)
                same += got == want
                secs.append(
                    median(
                        timeit(lambda s=s, c=c, k=k, kw=kw: select(s, c, k, 0.5, **kw), repeat, 0)
                    )
                )
            with traced_peak() as tp:
                select(queries[0][0], queries[0][1], k, 0.5, **kw)
            rows.append(
                {
                    "candidates": n_cand,
                    "cs_size": k,
                    "method": name,
                    "median_s_per_query": round(median(secs), 5),
                    "identical_queries": f"{same}/{len(queries)}",
                    "mean_selected": round(float(np.mean([len(r) for r in ref])), 1),
                    "peak_traced_mb": round(tp.peak_mb, 2),
                }
            )
            print(rows[-1], file=sys.stderr)
        base = next(
            r
            for r in rows
            if r["candidates"] == n_cand and r["cs_size"] == k and r["method"] == "exact"
        )["median_s_per_query"]
        for r in rows:
            if r["candidates"] == n_cand and r["cs_size"] == k:
                r["speedup_vs_exact"] = round(base / r["median_s_per_query"], 2)

    scaling = []
    for n_cand in [1000, 4000, 16000] if not args.quick else [1000, 4000]:
        s, c = query_sets(n_cand, 99)
        for name in ("exact", "prefix"):
            kw = METHODS[name]
            t = median(timeit(lambda s=s, c=c, kw=kw: select(s, c, 500, 0.5, **kw), repeat, 0))
            scaling.append(
                {"candidates": n_cand, "cs_size": 500, "method": name, "median_s": round(t, 5)}
            )
    meta = {
        "command": "OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_select"
        + (" --quick" if args.quick else ""),
        "corpus": f"first 4 books of {args.corpus.name} ({len(sents)} sentences), word sets",
        "queries_per_setting": n_queries,
        "repeats": repeat,
        "lsh_miss_prob_at_J0.5": {
            "lsh@0.3": round(lsh_miss_probability(0.5, 0.3, 128), 5),
            "lsh@0.5": round(lsh_miss_probability(0.5, 0.5, 128), 5),
        },
    }
    jpath, _ = write_results("select", rows, meta, tables={"scaling": scaling})
    print(jpath)


if __name__ == "__main__":
    main()
