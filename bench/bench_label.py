"""Benchmark for the `label` step (Eq. 4): labelled pairs per CPU-second.

Compares, on synthetic context sets and scores (the label step reads scores; it never runs a
model), the vectorised block labelling of ``models.origin.origin_labels`` (all five score views
at once: S and each Eq. 3 term) against the naive way: a Python loop per pair that builds the
two vectors from a dict of scores and takes their cosine (one view). Also reports the number of
unique (s, c) scores the pairs need against the naive count 2·|C| per pair (what scoring every
pair separately would cost the generators), and peak traced memory.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_label [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from bench.harness import median, traced_peak, write_results
from ctxsim.models.contextual.origin import (
    ContextSets,
    ScoreLookup,
    origin_labels,
    origin_labels_naive,
    required_scores,
)


def world(n_queries: int, cs_size: int, n_pairs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n_ctx = n_queries * cs_size // 4  # contexts are shared between queries' sets
    q = np.repeat(np.arange(n_queries), cs_size)
    c = np.concatenate([rng.choice(n_ctx, size=cs_size, replace=False) for _ in range(n_queries)])
    p = np.tile(np.arange(cs_size), n_queries)
    cs = ContextSets.from_rows(q, c, p)
    pairs = rng.integers(0, n_queries, size=(n_pairs, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    rq, rc = required_scores(cs, pairs[:, 0], pairs[:, 1])
    vals = -rng.random((len(rq), 5)) * 5
    return cs, pairs, rq, rc, vals


def cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    settings = [(8, 20000), (100, 4000), (500, 800)]
    if args.quick:
        settings = [(8, 5000), (100, 1000), (500, 200)]
    repeat = 1 if args.quick else 3
    rows = []
    for cs_size, n_pairs in settings:
        cs, pairs, rq, rc, vals = world(2000, cs_size, n_pairs)
        lookup = ScoreLookup(rq, rc, vals)
        t_vec = median(
            [
                cpu(
                    lambda cs=cs, pairs=pairs, lookup=lookup: origin_labels(
                        cs, pairs[:, 0], pairs[:, 1], lookup
                    )
                )
                for _ in range(repeat)
            ]
        )
        with traced_peak() as tp:
            fast = origin_labels(cs, pairs[:, 0], pairs[:, 1], lookup)
        # naive: per-pair Python loop over a dict (its own data structures, built untimed)
        m = min(len(pairs), 2000)
        qq = cs.qids
        lists = {
            int(k): cs.context_ids[cs.offsets[i] : cs.offsets[i + 1]].tolist()
            for i, k in enumerate(qq)
        }
        score = dict(
            zip(zip(rq.tolist(), rc.tolist(), strict=True), vals[:, 0].tolist(), strict=True)
        )
        plist = [tuple(map(int, x)) for x in pairs[:m]]
        t_naive = median(
            [
                cpu(
                    lambda lists=lists, plist=plist, score=score: origin_labels_naive(
                        lists, plist, score
                    )
                )
                for _ in range(repeat)
            ]
        )
        naive = origin_labels_naive(lists, plist, score)
        assert np.allclose(naive, fast[:m, 0], atol=1e-9)
        rows.append(
            {
                "cs_size": cs_size,
                "pairs": len(pairs),
                "vectorised_pairs_per_cpu_s": round(len(pairs) / t_vec),
                "vectorised_views": 5,
                "naive_pairs_per_cpu_s": round(m / t_naive),
                "naive_views": 1,
                "speedup_1_view": round((len(pairs) / t_vec) / (m / t_naive), 1),
                "unique_scores_needed": len(rq),
                "naive_scores_needed": int(2 * 2 * cs_size * len(pairs)),
                "peak_traced_mb": round(tp.peak_mb, 1),
            }
        )
        print(rows[-1], file=sys.stderr)
    meta = {
        "command": "OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_label"
        + (" --quick" if args.quick else ""),
        "queries": 2000,
        "note": "vectorised computes S + 4 term views per pair; naive computes S only; "
        "speedup_1_view compares pair rates as measured (so it understates the vectorised "
        "advantage per view by up to 5x). CPU seconds via time.process_time.",
    }
    print(write_results("label", rows, meta)[0])


if __name__ == "__main__":
    main()
