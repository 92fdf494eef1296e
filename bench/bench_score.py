"""Benchmark `score`: the batched generative scoring engine (models/contextual/score_engine.py) vs
one pair per
forward call, for both backends (seq2seq BERT2BERT, causal prefix LM), on real book sentences.

Workload shaped like the score stage: Q sentences each against the same C contexts (so contexts
are shared, as in Cs1 ∪ Cs2), every Eq. (3) direction. Reports pairs/s and target tokens/s
(medians), the speed-up over the naive way, the largest score difference between the two
(they must agree), peak RSS growth, and how the cost per pair grows with context width
(sentences per side) and sentence length. Speed does not depend on the weights, so models are
randomly initialised at the sizes named (``--real`` adds the packaged minilm BERT2BERT and
SmolLM2-135M when installed).

    .venv/bin/python -m bench.bench_score [--quick] [--real]
    .venv/bin/python -m bench.bench_score --lm-route [--queries 40]   # bench/bench_lm_route.py
"""

# ruff: noqa: B023  (closures are timed inside the loop iteration that defines them)
from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

from bench.common import SIZES, book_windows, load_paragraphs, make_scorer
from bench.harness import median, peak_rss_mb, reset_peak_rss, timeit, write_results
from ctxsim.models.contextual.generator import (
    GenerativeScorer,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine, naive_score

CUDA_NOTES = {
    "cuda_autocast": "torch.autocast('cuda', dtype=torch.bfloat16); log-softmax in float32",
    "cuda_inference": "torch.inference_mode(); weights stay float32, matmuls run in bf16",
    "cuda_processes": "one process per GPU (CUDA_VISIBLE_DEVICES=i), query shards spread",
    "cuda_oom": "torch.OutOfMemoryError -> halve the failing batch, retry both halves, "
    "halve the token budget for the rest; a single pair that OOMs is raised",
    "cuda_budget_hint": "token_budget 65536-262144 on an 80 GB GPU for 270M-parameter models; "
    "max_logit_elems bounds batch x target positions x vocab (Gemma vocab 262144)",
}


def book_sentences(n: int, seed: int = 0) -> list[list[str]]:
    """Runs of consecutive sentences (one list per paragraph) from two books."""
    import blingfire

    paras = load_paragraphs(2)
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.permutation(len(paras)):
        sents = [s for s in blingfire.text_to_sentences(paras[i]).split("\n") if s.strip()]
        if len(sents) >= 9:
            out.append(sents)
        if len(out) == n:
            break
    return out


def workload(paras: list[list[str]], q: int, c: int, width: int, rng: np.random.Generator):
    """q sentences x c contexts (width sentences per side), every pair."""
    ctxs = []
    for p in paras[:c]:
        mid = len(p) // 2
        ctxs.append((" ".join(p[mid - width : mid]), " ".join(p[mid + 1 : mid + 1 + width])))
    pool = [s for p in paras[c:] for s in p]
    sents = [pool[i] for i in rng.permutation(len(pool))[:q]]
    lefts = [lc for _ in sents for lc, _ in ctxs]
    rights = [rc for _ in sents for _, rc in ctxs]
    ss = [s for s in sents for _ in ctxs]
    return lefts, ss, rights


def bench_one(
    name: str, sc: GenerativeScorer, wl: tuple, n_naive: int, repeat: int, budget: int
) -> dict[str, Any]:
    lefts, sents, rights = wl
    n = len(sents)
    cfg = EngineConfig(token_budget=budget)
    reset_peak_rss()
    base = peak_rss_mb()
    eng_times = timeit(lambda: ScoringEngine(sc, cfg).score(lefts, sents, rights), repeat, 1)
    eng_rss = peak_rss_mb() - base
    eng = ScoringEngine(sc, cfg)
    got = eng.score(lefts, sents, rights)
    sub = np.random.default_rng(1).permutation(n)[:n_naive]
    sl, ss, sr = ([x[i] for i in sub] for x in (lefts, sents, rights))
    reset_peak_rss()
    base = peak_rss_mb()
    t0 = time.perf_counter()
    ref = naive_score(sc, sl, ss, sr)
    naive_t = time.perf_counter() - t0
    naive_rss = peak_rss_mb() - base
    diff = max(float(np.max(np.abs(got[d][sub] - ref[d]))) for d in ref)
    t = median(eng_times)
    # the same engine with bf16 autocast on CPU (EngineConfig.bf16_on_cpu): speed and whether
    # the order of the scores survives (Spearman against float32, worst direction)
    bcfg = EngineConfig(token_budget=budget, bf16_on_cpu=True)
    bf_t = median(timeit(lambda: ScoringEngine(sc, bcfg).score(lefts, sents, rights), repeat, 1))
    bf = ScoringEngine(sc, bcfg).score(lefts, sents, rights)
    bf_rho = min(float(spearmanr(bf[d], got[d]).statistic) for d in got)
    return {
        "model": name,
        "pairs": n,
        "engine_pairs_per_s": n / t,
        "naive_pairs_per_s": n_naive / naive_t,
        "speedup": (n / t) / (n_naive / naive_t),
        "engine_bf16_pairs_per_s": n / bf_t,
        "speedup_bf16": (n / bf_t) / (n_naive / naive_t),
        "bf16_spearman_vs_fp32": bf_rho,
        "engine_target_tok_per_s": eng.stats.target_tokens / t,
        "forward_calls": eng.stats.forward_calls,
        "encoder_passes": eng.stats.encoder_sources,
        "padded_tokens_per_target_token": eng.stats.padded_tokens / max(1, eng.stats.target_tokens),
        "max_abs_diff_vs_naive": diff,
        "engine_peak_rss_growth_mb": eng_rss,
        "naive_peak_rss_growth_mb": naive_rss,
    }


def quality(args: argparse.Namespace) -> None:
    """'Does the true context win' on held-out book sentences, per term and for S_gen, and the
    validation perplexity per direction, for packaged models (zero-shot causal LMs and a
    briefly trained BERT2BERT)."""
    from ctxsim.models.contextual.generator import DIRECTIONS, eq3_example
    from ctxsim.models.contextual.generator_training import (
        TrainConfig,
        random_partners,
        train_generator,
    )

    rng = np.random.default_rng(0)
    w = book_windows(args.books)
    docs = np.unique(w["doc"])
    val_docs = docs[-2:]
    is_val = np.isin(w["doc"], val_docs)
    va, tr = np.flatnonzero(is_val), np.flatnonzero(~is_val)
    va = va[rng.permutation(len(va))[: 20 * args.n_eval]]
    lengths = np.asarray([len(w["left"][i]) + len(w["right"][i]) for i in va], np.float64)
    partner = random_partners(lengths, w["section"][va], 0.2, rng)
    pick = rng.permutation(len(va))[: args.n_eval]
    own, rand = va[pick], va[partner[pick]]
    n = len(own)
    sents = [w["sentence"][i] for i in own] * 2
    lefts = [w["left"][i] for i in own] + [w["left"][i] for i in rand]
    rights = [w["right"][i] for i in own] + [w["right"][i] for i in rand]
    rows = []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        backend = "seq2seq" if name == "minilm" else "causal"
        sc = make_scorer(backend, name, None)
        trained = name in args.train_models.split(",")
        label = f"{name}+ft" if trained and backend == "causal" else name
        row: dict[str, Any] = {"model": label, "backend": backend, "eval_sentences": n}
        row["n_params_m"] = sum(p.numel() for m in sc.modules() for p in m.parameters()) / 1e6
        cache: dict = {}
        if trained:
            tr_sub = tr[rng.permutation(len(tr))[: args.train_windows]]
            ex = [
                (
                    d,
                    *sc.example_ids(
                        d, *eq3_example(d, w["left"][i], w["sentence"][i], w["right"][i]), cache
                    ),
                )
                for i in tr_sub
                for d in DIRECTIONS
            ]
            cfg = TrainConfig(
                steps=100_000,
                batch_size=16,
                lr=args.train_lr,
                warmup_steps=20,
                max_seconds=args.train_seconds,
            )
            summ = train_generator(sc, ex, cfg, log=print)
            row["train_steps"] = summ["steps"]
            row["train_seconds"] = round(summ["seconds"], 1)
            row["train_windows_seen"] = summ["steps"] * 16 // 3
        eng = ScoringEngine(sc, EngineConfig(token_budget=args.budget))
        t1 = time.perf_counter()
        res = eng.score(lefts, sents, rights)
        secs = time.perf_counter() - t1
        null = eng.score(lefts, [""] * len(sents), rights, ("left", "right"))
        s_gen = sum(res[d].astype(np.float64) for d in DIRECTIONS)
        # held-out perplexity per direction from the own-context scores (mean over sentences)
        row |= {f"val_ppl_{d}": float(np.exp(-np.mean(res[d][:n]))) for d in DIRECTIONS}
        for key, v in [*((f"gen_{d}", res[d]) for d in DIRECTIONS), ("S_gen", s_gen)]:
            row[f"wins_{key}"] = float(np.mean(v[:n] > v[n:]))
        for d in ("left", "right"):  # as score.pmi takes them: minus the target without s
            pmi = res[d].astype(np.float64) - null[d]
            row[f"wins_pmi_{d}"] = float(np.mean(pmi[:n] > pmi[n:]))
        row["score_pairs_per_s"] = 2 * n / secs
        row["score_target_tok_per_s"] = eng.stats.target_tokens / secs
        row["total_seconds"] = time.perf_counter() - t0
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
        rows.append(row)
        del sc
        write_results(args.name, rows, quality_meta(args))


def quality_meta(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "what": "own context vs a random held-out context (different section, length within "
        "+-20%) for held-out sentences of the last 2 of the first N books; wins = share where "
        "the own context scores higher; S_gen = fwd + left + right (lambda 1); pmi_<term> = the "
        "term minus its target's log-prob with the sentence left out (score.pmi)",
        "books": args.books,
        "train": f"{args.train_models}: AdamW lr {args.train_lr}, batch 16, warmup 20, "
        f"{args.train_seconds}s wall cap, windows of the first N-2 books",
        "torch_threads": args.threads,
        "templates": "ctxsim.models.contextual.generator.DEFAULT_TEMPLATES",
        "val_ppl": "exp(-mean over held-out sentences of the mean target-token log-prob)",
    }


def main() -> None:
    import sys

    if "--lm-route" in sys.argv:  # the LM route's engines on a real run's windows
        import subprocess  # bench_lm_route run as a tool, the command its results record

        args = [a for a in sys.argv[1:] if a != "--lm-route"]
        sys.exit(subprocess.call([sys.executable, "-m", "bench.bench_lm_route", *args]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--quality", action="store_true", help="true-context-wins with real models")
    ap.add_argument("--models", default="gemma-270m,smollm2-135m,minilm")
    ap.add_argument("--n-eval", type=int, default=200)
    ap.add_argument("--books", type=int, default=8)
    ap.add_argument("--train-windows", type=int, default=20000)
    ap.add_argument(
        "--train-models",
        default="minilm",
        help="models trained on the first books' windows (all 3 directions) before evaluation",
    )
    ap.add_argument("--train-lr", type=float, default=1e-4)
    ap.add_argument("--train-seconds", type=float, default=600)
    ap.add_argument("--quick", action="store_true", help="fewer pairs, tiny + small only")
    ap.add_argument("--name", default="score_quality", help="results file name (--quality)")
    ap.add_argument("--real", action="store_true", help="add packaged minilm / SmolLM2 models")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=int, default=8192)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.quality:
        quality(args)
        return
    q, c, n_naive = (12, 8, 24) if args.quick else (30, 12, 60)
    paras = book_sentences(c + 60)
    tok = train_wordpiece_tokenizer([s for p in paras for s in p], vocab_size=4000)
    rng = np.random.default_rng(0)
    wl = workload(paras, q, c, 1, rng)
    models = [(b, s) for s in ("tiny", "small") for b in ("seq2seq", "causal")]
    if args.real:
        models += [("seq2seq", "minilm"), ("causal", "smollm2-135m")]
    # packaged models are 100-1000x slower per pair: a smaller workload of the same shape
    wl_real = workload(paras, max(q // 4, 4), c, 1, np.random.default_rng(0))
    rows = []
    for backend, size in models:
        try:
            sc = make_scorer(backend, size, tok)
        except Exception as e:  # noqa: BLE001 - a missing package skips that model
            print(f"skip {backend}/{size}: {e}")
            continue
        name = f"{backend}/{size}"
        real = size not in SIZES
        row = bench_one(
            name,
            sc,
            wl_real if real else wl,
            max(n_naive // 3, 8) if real else n_naive,
            args.repeat,
            args.budget,
        )
        row["n_params_m"] = sum(p.numel() for m in sc.modules() for p in m.parameters()) / 1e6
        rows.append(row)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    # scaling of the engine's cost per pair (small models): context width, sentence length
    scale_rows = []
    for backend in ("seq2seq", "causal"):
        sc = make_scorer(backend, "small", tok)
        for width in (1, 2, 4):
            wlw = workload(paras, q, c, width, np.random.default_rng(0))
            t = median(timeit(lambda: ScoringEngine(sc).score(*wlw), args.repeat, 1))
            scale_rows.append(
                {
                    "model": f"{backend}/small",
                    "vary": "context width",
                    "value": width,
                    "ms_per_pair": 1000 * t / len(wlw[1]),
                }
            )
        for lo, hi in ((1, 10), (10, 25), (25, 80)):
            pool = [s for p in paras for s in p if lo <= len(s.split()) < hi]
            sents = pool[: q * c]
            ctx_l, _, ctx_r = workload(paras, 1, c, 1, np.random.default_rng(0))
            wls = (
                [ctx_l[i % c] for i in range(len(sents))],
                sents,
                [ctx_r[i % c] for i in range(len(sents))],
            )
            t = median(timeit(lambda: ScoringEngine(sc).score(*wls), args.repeat, 1))
            scale_rows.append(
                {
                    "model": f"{backend}/small",
                    "vary": "sentence words",
                    "value": f"{lo}-{hi - 1}",
                    "ms_per_pair": 1000 * t / len(sents),
                }
            )
    for r in scale_rows:
        print(r, flush=True)
    meta = {
        "workload": f"{q} book sentences x {c} contexts (1 sentence per side), 3 directions; "
        f"naive on {n_naive} random pairs of them (packaged models: {max(q // 4, 4)} sentences, "
        f"naive on {max(n_naive // 3, 8)} pairs)",
        "torch_threads": args.threads,
        "token_budget": args.budget,
        "speed_goal": ">= 10x over one pair per forward call",
        **CUDA_NOTES,
    }
    write_results("score" + ("_quick" if args.quick else ""), rows + scale_rows, meta)


if __name__ == "__main__":
    main()
