"""Scorer variants side by side in one table, the teacher as the reference row.

For each variant (a finished `ctxsim origin` run on one root; all score the same generated
samples with a different scorer): Origin on the run's pairs at |Cs| = K (cosine, view S) and its
paired BCa 95% CI against the reference run; how well its S agrees with the reference's on the
same (sentence, context) windows (Spearman); its parameters; its CPU-seconds per window, timed
here, in one process, on the same seeded windows for every variant (time.process_time, one torch
thread); the CPU-seconds per labelled pair that gives for configs/books_generated.yaml (its
measured non-score CPU per pair and windows per pair, bench/results/pipeline_books_generated.json,
plus windows x this CPU per window); and the physical limit: the variant's FLOPs per labelled
pair over this machine's measured matmul FLOP/s (float32, or dynamic int8 for the int8 rows:
2 x non-embedding parameters x window tokens + 2 x head parameters x target tokens). Usage::

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.archive.bench_scorer_variants \\
        --root /tmp/i17/root \\
        --k 8 --reference smollm2=gen-right-k8-p500 \\
        --variants smollm2-int8=gen-right-k8-int8-p500 gemma=gen-right-k8-gemmascore-p500
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

from bench.common import matmul_speeds
from bench.harness import RESULTS_DIR, run_artefacts, write_results
from ctxsim.models.contextual.origin import ContextSets, ScoreLookup, origin_labels, spearman_x100
from ctxsim.models.contextual.quantize import quantize_int8
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine
from ctxsim.models.evaluation.metrics import bootstrap_diff_ci
from ctxsim.scores.eq3 import INT8_FLOAT_LAYERS
from ctxsim.scores.loading import load_scorer


def origin_at_k(arts: dict[str, Any], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair ids, gold, Eq. 4 cosine of S over the first k contexts), by pair id."""
    sel = arts["select"].read_table(["query_id", "context_id", "position"])
    pos = sel.column("position").to_numpy()
    keep = pos < k
    cs = ContextSets.from_rows(
        sel.column("query_id").to_numpy()[keep],
        sel.column("context_id").to_numpy()[keep],
        pos[keep],
    )
    sc = arts["score"].read_table(["query_id", "context_id", "S"])
    lookup = ScoreLookup(
        sc.column("query_id").to_numpy(),
        sc.column("context_id").to_numpy(),
        sc.column("S").to_numpy().astype(np.float64)[:, None],
    )
    lab = arts["label"].read_table(["pair_id", "s1_id", "s2_id", "gold"]).sort_by("pair_id")
    s1, s2 = lab.column("s1_id").to_numpy(), lab.column("s2_id").to_numpy()
    pred = origin_labels(cs, s1, s2, lookup)[:, 0]
    return lab.column("pair_id").to_numpy(), lab.column("gold").to_numpy(), pred


def window_s(arts: dict[str, Any]) -> dict[tuple[int, int], float]:
    sc = arts["score"].read_table(["query_id", "context_id", "S"])
    return dict(
        zip(
            zip(
                sc.column("query_id").to_pylist(), sc.column("context_id").to_pylist(), strict=True
            ),
            sc.column("S").to_pylist(),
            strict=True,
        )
    )


def sample_windows(arts: dict[str, Any], k: int, n: int, seed: int) -> tuple[list, list]:
    """The first k samples of ``n // k`` seeded sentences: (sentence, continuation) windows
    grouped as the score stage sees them (one sentence's continuations share its prompt)."""
    sel = arts["select"].read_table(["query_id", "context_id", "position"])
    pos = sel.column("position").to_numpy()
    q = sel.column("query_id").to_numpy()[pos < k]
    c = sel.column("context_id").to_numpy()[pos < k]
    uq = np.unique(q)
    chosen = np.random.default_rng(seed).permutation(uq)[: max(1, n // k)]
    pick = np.flatnonzero(np.isin(q, chosen))
    qt = arts["queries"].read_table(["query_id", "text"])
    q_text = dict(
        zip(qt.column("query_id").to_pylist(), qt.column("text").to_pylist(), strict=True)
    )
    gt = arts["gencontexts"].read_table(["context_id", "text"])
    c_text = dict(
        zip(gt.column("context_id").to_pylist(), gt.column("text").to_pylist(), strict=True)
    )
    return [q_text[int(x)] for x in q[pick]], [c_text[int(x)] for x in c[pick]]


def time_scorer(scorer: Any, sents: list[str], conts: list[str], budget: int) -> float:
    """CPU-seconds per window of the right term (one warm-up pass on a few windows first)."""
    eng = ScoringEngine(scorer, EngineConfig(token_budget=budget))
    blank = [""] * len(sents)
    eng.score(blank[:8], sents[:8], conts[:8], ("right",))
    c0 = time.process_time()
    eng.score(blank, sents, conts, ("right",))
    return (time.process_time() - c0) / len(sents)


def flops_per_window(scorer: Any, sents: list[str], conts: list[str]) -> tuple[float, dict]:
    model = scorer.model
    emb = model.get_input_embeddings().weight
    vocab, hidden = emb.shape
    total = sum(p.numel() for p in model.parameters())  # tied embedding counted once
    tied = model.get_output_embeddings().weight is emb
    non_emb = total - vocab * hidden * (1 if tied else 2)
    prompt = np.mean([len(x) for x in scorer.tokenize(sents)])
    target = np.mean([len(x) for x in scorer.tokenize(conts)])
    f = 2.0 * non_emb * (prompt + target) + 2.0 * vocab * hidden * target
    return f, {
        "params_m": round(total / 1e6, 1),
        "non_embedding_m": round(non_emb / 1e6, 1),
        "window_tokens": round(float(prompt + target), 1),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--reference", required=True, help="NAME=RUN of the teacher")
    ap.add_argument("--variants", nargs="+", default=[], help="NAME=RUN ...")
    ap.add_argument("--windows", type=int, default=400, help="timed windows per variant")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--pipeline", default="pipeline_books_generated", help="results file")
    ap.add_argument("--pipeline-run", default="bg-k4-q500-int8")
    ap.add_argument("--name", default="scorer_variants")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    pipe = json.loads((RESULTS_DIR / f"{a.pipeline}.json").read_text())
    prow = next(r for r in pipe["rows"] if r["run"] == a.pipeline_run)
    score_cpu = next(
        r["cpu_s"]
        for r in pipe["tables"]["stages"]
        if r["run"] == a.pipeline_run and r["stage"] == "score"
    )
    pairs = prow["labelled_pairs"]
    score_rows = next(
        r["rows"]
        for r in pipe["tables"]["stages"]
        if r["run"] == a.pipeline_run and r["stage"] == "score"
    )
    other_cpu_per_pair = (prow["cpu_s_to_label"] - score_cpu) / pairs
    windows_per_pair = score_rows / pairs

    speed = matmul_speeds()

    named = [tuple(s.split("=", 1)) for s in [a.reference, *a.variants]]
    ref_rec, ref_arts = run_artefacts(a.root, named[0][1])
    ref_ids, gold, ref_pred = origin_at_k(ref_arts, a.k)
    ref_s = window_s(ref_arts)
    sents, conts = sample_windows(ref_arts, a.k, a.windows, seed=0)
    rows = []
    for name, run in named:
        rec, arts = run_artefacts(a.root, run)
        ids, g, pred = origin_at_k(arts, a.k)
        if not np.array_equal(ids, ref_ids):
            raise SystemExit(f"{run}: not the reference run's pairs")
        s = window_s(arts)
        common = sorted(set(s) & set(ref_s))
        agree = spearmanr([s[w] for w in common], [ref_s[w] for w in common]).statistic
        int8 = bool(rec["config"]["score"].get("int8_on_cpu"))
        scorer, meta = load_scorer(arts["generator"].files_dir, "cpu")
        f_win, size = flops_per_window(scorer, sents, conts)
        if int8:
            scorer = quantize_int8(scorer, skip=INT8_FLOAT_LAYERS)
        with torch.inference_mode():
            cpu_win = time_scorer(scorer, sents, conts, rec["config"]["score"]["token_budget"])
        row = {
            "variant": name,
            "run": run,
            "scorer": meta.get("distilled_from")
            and f"distilled from {meta['distilled_from']}"
            or meta.get("backbone"),
            "int8": int8,
            **size,
            "origin": round(spearman_x100(pred, g), 2),
        }
        if name != named[0][0]:
            ci = bootstrap_diff_ci(g, pred, ref_pred, n_resamples=a.resamples)
            row["minus_ref"] = round(ci["delta"], 2)
            row["ci"] = [round(ci["ci_low"], 2), round(ci["ci_high"], 2)]
        row |= {
            "spearman_S_vs_ref": round(float(agree), 4),
            "windows_compared": len(common),
            "cpu_ms_per_window": round(1000 * cpu_win, 2),
            "cpu_s_per_labelled_pair": round(other_cpu_per_pair + windows_per_pair * cpu_win, 3),
            "pairs_per_cpu_hour": round(3600 / (other_cpu_per_pair + windows_per_pair * cpu_win)),
            "limit_cpu_ms_per_window": round(
                float(1000 * f_win / speed["int8" if int8 else "fp32"]), 2
            ),
            "limit_pairs_per_cpu_hour_score_only": round(
                float(3600 * speed["int8" if int8 else "fp32"] / (f_win * windows_per_pair))
            ),
        }
        print(row, flush=True)
        rows.append(row)
        del scorer
    write_results(
        a.name,
        rows,
        meta={
            "command": "python -m bench.archive.bench_scorer_variants "
            + " ".join(argv or sys.argv[1:]),
            "pairs": f"{len(gold)} pairs of the reference run (the fixed STSb-dev sample)",
            "k": a.k,
            "timed_windows": f"the first {a.k} samples of {a.windows // a.k} seeded sentences "
            "(their continuations share the sentence's prompt, as in the score stage), the "
            "same windows for every variant",
            "labelled_pair_cost": f"{a.pipeline_run}: {other_cpu_per_pair:.3f} CPU-s per pair "
            f"outside score + {windows_per_pair:.2f} windows per pair x the variant's CPU per "
            "window",
            "matmul_gflop_per_cpu_s": {k: round(v / 1e9, 1) for k, v in speed.items()},
            "limit": "FLOPs per window / measured matmul FLOP/s (int8 rows: int8 speed for "
            "all of it, so optimistic: the head and MLP down projections stay float32)",
        },
    )


if __name__ == "__main__":
    main()
