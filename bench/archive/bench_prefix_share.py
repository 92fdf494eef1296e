"""How many scored tokens a prefix key/value cache could save on the books config's windows.

A counting measurement, no model runs: the windows the `score` stage of configs/books.yaml
scores (the left term and its PMI null pass, SmolLM2's prompt template and tokenizer) are built
as token sequences, and every sequence is inserted into a prefix trie. Tokens a perfect prefix
cache computes = trie nodes; the share saved = 1 - nodes / tokens. What the engine already
saves is counted the same way: its shared-prompt path (models/contextual/generator/causal.py)
computes
identical prompts once, so it saves (copies - 1) x prompt length per group of identical prompts
(an upper bound: the path is taken only when a batch's distinct prompts are few enough).

The workload: the books run's shape (bench/results/pipeline_books.md: |Cs| = 4 per query, 2
pairs per query, 19.4 scored (query, context) rows per query), on real book sentences and
windows; contexts are drawn at random from the books (their token lengths are what counts).
With ``--time N`` the engine also scores the first N left-term windows (sorted by query, as
the score stage sees them) twice in one process, with the partial-prefix reuse on (the
default: requests ordered by prompt, common prefixes run once) and off (length order, one pass
per distinct prompt), reporting CPU-seconds (time.process_time, one torch thread), forward calls
and the largest difference between the two scores. Usage::

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.archive.bench_prefix_share --queries 200 --time 800
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

import numpy as np

from bench.common import book_windows, make_scorer
from bench.harness import write_results


def trie_nodes(seqs: list[tuple[int, ...]]) -> int:
    """Distinct prefixes over all sequences (the tokens a perfect prefix cache computes)."""
    seen: set[tuple[int, ...]] = set()
    for s in seqs:
        for i in range(1, len(s) + 1):
            seen.add(s[:i])
    return len(seen)


def count(seqs: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> dict[str, Any]:
    total = sum(len(p) + len(t) for p, t in seqs)
    nodes = trie_nodes([p + t for p, t in seqs])
    groups = Counter(p for p, _ in seqs)
    engine = sum((c - 1) * len(p) for p, c in groups.items())
    return {
        "windows": len(seqs),
        "tokens": total,
        "prefix_cache_tokens": nodes,
        "share_saved_by_prefix_cache": round(1 - nodes / total, 4),
        "share_saved_by_engine_shared_prompts": round(engine / total, 4),
        "distinct_prompts": len(groups),
    }


def time_engine(scorer: Any, w: dict[str, Any], windows: list[tuple[int, int]]) -> list[dict]:
    """The same left-term windows through the engine with partial-prefix reuse on and off."""
    import time

    import torch

    from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine

    torch.set_num_threads(1)
    lefts = [w["left"][c] for _, c in windows]
    sents = [w["sentence"][q] for q, _ in windows]
    rights = [w["right"][c] for _, c in windows]
    out, ref = [], None
    for mode in ("prefix reuse", "off"):
        on = mode == "prefix reuse"
        scorer.min_shared_prefix = type(scorer).min_shared_prefix if on else 0
        eng = ScoringEngine(scorer, EngineConfig(token_budget=4096, prefix_order=on))
        eng.score(lefts[:16], sents[:16], rights[:16], ("left",))  # warm-up
        eng.stats = type(eng.stats)()
        c0 = time.process_time()
        got = eng.score(lefts, sents, rights, ("left",))["left"]
        cpu = time.process_time() - c0
        ref = got if ref is None else ref
        out.append(
            {
                "mode": mode,
                "windows": len(windows),
                "cpu_s": round(cpu, 2),
                "cpu_ms_per_window": round(1000 * cpu / len(windows), 2),
                "forward_calls": eng.stats.forward_calls,
                "max_abs_diff_vs_first": float(np.max(np.abs(got - ref))),
            }
        )
        print(out[-1], flush=True)
    scorer.min_shared_prefix = type(scorer).min_shared_prefix
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--cs", type=int, default=4)
    ap.add_argument("--pairs-per-query", type=int, default=2)
    ap.add_argument("--books", type=int, default=2)
    ap.add_argument("--name", default="prefix_share_books")
    ap.add_argument("--time", type=int, default=0, help="left-term windows to score both ways")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    w = book_windows(a.books)
    n = len(w["sentence"])
    scorer = make_scorer("causal", "smollm2-135m", None)
    queries = rng.choice(n, a.queries, replace=False)
    ctx_pool = rng.choice(n, a.queries * a.cs * 4, replace=False)
    cs = {int(q): [int(c) for c in rng.choice(ctx_pool, a.cs, replace=False)] for q in queries}
    pairs = {
        (int(q), int(o))
        for q in queries
        for o in rng.choice(queries[queries != q], a.pairs_per_query, replace=False)
    }
    need: set[tuple[int, int]] = set()  # (query, context): {a, b} x (Cs_a ∪ Cs_b)
    for q1, q2 in pairs:
        for q in (q1, q2):
            need |= {(q, c) for c in cs[q1] + cs[q2]}
    tok = scorer.tokenize

    def ids(text: str) -> tuple[int, ...]:
        return tuple(tok([text])[0])

    main_seqs, null_seqs = [], []
    timed = sorted(need)[: a.time]
    for q, c in sorted(need):
        s, left, right = ids(w["sentence"][q]), ids(w["left"][c]), ids(w["right"][c])
        main_seqs.append(scorer.build_ids("left", (None, s, right), left))
    for c in sorted({c for _, c in need}):
        left, right = ids(w["left"][c]), ids(w["right"][c])
        null_seqs.append(scorer.build_ids("left", (None, (), right), left))
    rows = []
    for kind, seqs in (
        ("left term", main_seqs),
        ("null left (PMI)", null_seqs),
        ("both", main_seqs + null_seqs),
    ):
        rows.append({"windows_of": kind, **count(seqs)})
        print(rows[-1], flush=True)
    tables = {"engine": time_engine(scorer, w, timed)} if timed else {}
    write_results(
        a.name,
        rows,
        tables=tables,
        meta={
            "command": "python -m bench.archive.bench_prefix_share "
            + " ".join(argv or sys.argv[1:]),
            "rows_per_query": round(len(need) / a.queries, 2),
            "template_left": "Passage: ___ {sentence} {right}\\nThe missing sentence ___ is: "
            "{target}",
            "note": "a count of tokens (no model runs; no timing, so no load caveat); compute "
            "per token is about constant for a 135M model at these lengths",
        },
    )


if __name__ == "__main__":
    main()
