"""The LM route's score engine, old (padded batches) vs new (grouped prompts), on the windows a
real run scores: `python -m bench.bench_score --lm-route` (or this module).

For each config (books_generated and the MedQuAD LM config), a fresh run to `label` with fewer
queries; the score stage's own engine calls are captured (the windows, the scorer as the stage
loaded it: int8 on CPU as the configs say), then both engines score those same windows in this
process (interleaved repeats, CPU-seconds, not wall time: the machine is shared). Reported per
engine: tokens the model ran per target token (prompts and padding included), the old
``padded_tokens`` measure, target tokens per CPU-second, peak RSS growth, and labelled pairs per
CPU-hour all-in (every stage to `label` from the run's manifests, with the score stage's engine
CPU replaced by each engine's); agreement of old and new scores (int8 on every window, float32
on a sample); a torch.profiler summary of each engine on a slice.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
from scipy.stats import spearmanr

from bench.common import (
    bf16_scorer,
    capture_run,
    engine_config,
    load_capture,
    run_engine,
    save_capture,
    stages_to_label,
)
from bench.harness import write_results
from ctxsim.models.contextual import score_engine as se


def compiled_bf16_scorer(
    generator_dir: Path,
    call: dict[str, Any],
    scope: str,
    w8a8: bool = False,
    keep_bf16: tuple[str, ...] = (),
) -> tuple[Any, float]:
    """bf16 weights with part of the model under ``torch.compile`` (``CausalPrefixScorer.compile``
    with ``scope``: the decoder stack, or each layer's MLP and norms), and the CPU-s of compiling
    it and of a first pass over ``call``'s windows (tracing the shapes), paid once per process (so
    once per shard in a run), which the timed replays then leave out. ``w8a8``: the linear
    layers but the head (and ``keep_bf16``: score.w8a8_bf16_layers) as int8 products first
    (score.w8a8_on_cpu), calibration included in the CPU-s."""
    from ctxsim.models.contextual.quantize import smooth_quantize_scorer

    sc = bf16_scorer(generator_dir)
    t0 = time.process_time()
    if w8a8:
        smooth_quantize_scorer(sc, skip=keep_bf16)
    if not sc.compile(scope):
        raise RuntimeError("torch.compile is not available on this machine")
    se.ScoringEngine(sc, engine_config(call, True)).score(*call["windows"], call["directions"])
    return sc, time.process_time() - t0


#: the engines replayed: name -> (label, grouped prompts, scorer: the stage's or bf16 weights)
ENGINES: dict[str, tuple[str, bool, str]] = {
    "old": ("old (padded batches)", False, "stage"),
    "new": ("new (grouped prompts)", True, "stage"),
    "bf16w": ("bf16 weights (grouped prompts)", True, "bf16"),
    "bf16c": ("bf16 weights, torch.compile (grouped prompts)", True, "bf16c"),
    "bf16b": ("bf16 weights, MLPs and norms compiled (grouped prompts)", True, "bf16b"),
    "bf16bk": (
        "bf16 weights, MLPs and norms compiled, key/value heads copied (grouped prompts)",
        True,
        "bf16bk",
    ),
    "w8a8b": (
        "bf16 weights, int8 products (SmoothQuant), MLPs and norms compiled (grouped prompts)",
        True,
        "w8a8b",
    ),
    "bf16bf": (
        "bf16 weights, MLPs and norms compiled, torch's flash attention (grouped prompts)",
        True,
        "bf16bf",
    ),
    "w8a8bd": (
        "bf16 weights, int8 products but the MLP down projections (SmoothQuant), MLPs and norms"
        " compiled (grouped prompts)",
        True,
        "w8a8bd",
    ),
}
#: compiled engines: name -> CausalPrefixScorer.compile's scope
COMPILE_SCOPE = {
    "bf16c": "decoder",
    "bf16b": "blocks",
    "bf16bk": "blocks",
    "w8a8b": "blocks",
    "bf16bf": "blocks",
    "w8a8bd": "blocks",
}
#: engines whose linear layers run as int8 products (score.w8a8_on_cpu): name -> the layers kept
#: bf16 (score.w8a8_bf16_layers)
W8A8: dict[str, tuple[str, ...]] = {"w8a8b": (), "w8a8bd": ("down_proj",)}
#: engines run with transformers' copy of each key/value head per query head (repeat_kv), the
#: engine's attention before models/contextual/native_gqa.py
COPIED_HEADS = {"bf16bk"}
#: engines run with torch's attention kernel (sdpa) instead of the engine's grouped products on
#: CPU (models/contextual/grouped_attention.py), the engine's attention before them
FLASH_ATTENTION = {"bf16bf"}


def flash_attention(on: bool) -> contextlib.AbstractContextManager[Any]:
    """The engine without its grouped-product attention, for the duration."""
    if not on:
        return contextlib.nullcontext()
    from ctxsim.models.contextual import grouped_attention  # the engine imports it per call

    return mock.patch.object(
        grouped_attention, "grouped_matmul", lambda *_: contextlib.nullcontext()
    )


def heads_copied(on: bool) -> contextlib.AbstractContextManager[Any]:
    """transformers' default for masked grouped-query attention on CPU, for the duration (a
    value of the user's, which native_gqa leaves alone)."""
    from ctxsim.models.contextual.native_gqa import GQA_ENV

    return mock.patch.dict(os.environ, {GQA_ENV: "0"}) if on else contextlib.nullcontext()


def fp32_agreement(
    calls: list[dict[str, Any]],
    generator_dir: Path,
    n: int,
    others: dict[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Old vs new engine with the float32 scorer on the first ``n`` windows (the exactness
    check: the int8 scores move with the batch, since activations are quantised per batch), and
    each of ``others`` (an engine's scores on every window) against float32 on those windows."""
    from ctxsim.scores.loading import load_scorer

    scorer, _ = load_scorer(generator_dir, "cpu")
    c = calls[0]
    w = tuple(x[:n] for x in c["windows"])
    got = {}
    for group in (False, True):
        cfg = engine_config(c, group)
        res = se.ScoringEngine(scorer, cfg).score(*w, c["directions"])
        got[group] = np.concatenate([res[d] for d in c["directions"]])
    out = {
        "fp32_windows": len(w[0]),
        "fp32_max_abs_diff": float(np.max(np.abs(got[True] - got[False]))),
        "fp32_spearman": float(spearmanr(got[True], got[False]).statistic),
    }
    if len(c["directions"]) == 1:  # an engine's scores line up with the first call's windows
        for name, scores in (others or {}).items():
            mine = scores[: len(w[0])]
            out[f"{name}_vs_fp32_max_abs_diff"] = float(np.max(np.abs(mine - got[True])))
            out[f"{name}_vs_fp32_spearman"] = float(spearmanr(mine, got[True]).statistic)
    return out


def profile(
    calls: list[dict[str, Any]],
    group: bool,
    n: int,
    top: int = 8,
    scorer: Any | None = None,
    engine: str | None = None,
) -> list[dict[str, Any]]:
    """torch.profiler's top operators (self CPU) of one engine on the first ``n`` windows."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    c = calls[0]
    w = tuple(x[:n] for x in c["windows"])
    cfg = engine_config(c, group)
    with tprofile(activities=[ProfilerActivity.CPU]) as pr:
        se.ScoringEngine(scorer if scorer is not None else c["scorer"], cfg).score(
            *w, c["directions"]
        )
    ev = sorted(pr.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ev) or 1.0
    return [
        {
            "engine": engine or ("new" if group else "old"),
            "op": e.key,
            "self_cpu_share": round(e.self_cpu_time_total / total, 3),
            "self_cpu_s": round(e.self_cpu_time_total / 1e6, 2),
            "calls": e.count,
        }
        for e in ev[:top]
    ]


def bench_config(args: argparse.Namespace, config: str) -> tuple[list[dict], list[dict], dict]:
    name = Path(config).stem
    root = Path(args.root) / name
    saved = root.parent / f"{name}-capture.pkl"
    if args.reuse and saved.exists():
        cap = load_capture(saved)
    else:
        save_capture(capture_run(config, root, args.queries, "bench"), saved)
        cap = load_capture(saved)  # the replays' scorer is built the same way either way
    torch.set_num_threads(args.threads)
    calls = cap["calls"]
    to_label = set(stages_to_label())
    stage_cpu = {r["stage"]: r["cpu_s"] or 0.0 for r in cap["stages"] if r["stage"] in to_label}
    label = next(r for r in cap["stages"] if r["stage"] == "label")
    pairs = int(label["rows"] or 0)
    in_stage_engine = sum(c["cpu_s"] for c in calls)
    # everything but the engine's own work: the other stages and the score stage's overheads
    # (loading and quantising the scorer, building texts)
    rest = sum(stage_cpu.values()) - in_stage_engine
    gen_dir = Path(cap["record"]["stages"]["generator"]["path"]) / "files"
    scorers = {"stage": None, "bf16": bf16_scorer(gen_dir) if "bf16w" in args.engines else None}
    warmup = {e: 0.0 for e in args.engines}
    for e in (e for e in args.engines if e in COMPILE_SCOPE):
        scorers[e], warmup[e] = compiled_bf16_scorer(
            gen_dir, calls[0], COMPILE_SCOPE[e], w8a8=e in W8A8, keep_bf16=W8A8.get(e, ())
        )
    runs: dict[str, list[dict[str, Any]]] = {e: [] for e in args.engines}
    for _ in range(args.repeat):
        for e in args.engines:
            _, group, which = ENGINES[e]
            with heads_copied(e in COPIED_HEADS), flash_attention(e in FLASH_ATTENTION):
                runs[e].append(run_engine(calls, group, scorers[which]))
    rows = []
    for e in args.engines:
        rs = runs[e]
        cpu = float(np.median([r["cpu_s"] for r in rs]))
        st = rs[0]["stats"]
        rows.append(
            {
                "config": name,
                "engine": ENGINES[e][0],
                "windows": sum(len(c["windows"][0]) for c in calls),
                "engine_cpu_s": round(cpu, 1),
                "engine_cpu_s_runs": ", ".join(f"{r['cpu_s']:.1f}" for r in rs),
                "compile_cpu_s": round(warmup[e], 1),
                "tokens_run_per_target_tok": round(st.run_tokens / max(st.target_tokens, 1), 3),
                "padded_per_target_tok": round(st.padded_tokens / max(st.target_tokens, 1), 3),
                "target_tok_per_cpu_s": round(st.target_tokens / max(cpu, 1e-9), 1),
                "peak_rss_growth_mb": round(max(r["rss_mb"] for r in rs), 1),
                "labelled_pairs": pairs,
                "cpu_s_to_label": round(rest + cpu, 1),
                "pairs_per_cpu_hour_all_in": round(3600 * pairs / max(rest + cpu, 1e-9), 1),
            }
        )
    agree: dict[str, Any] = {"config": name}
    if "old" in runs and "new" in runs:
        old, new = runs["old"][0]["scores"], runs["new"][0]["scores"]
        agree |= {
            "int8_windows": len(new),
            "int8_max_abs_diff": float(np.max(np.abs(new - old))),
            "int8_spearman": float(spearmanr(new, old).statistic),
            # the same engine twice: how far int8 scores move between runs of one batching
            "int8_old_vs_old_max_abs_diff": float(np.max(np.abs(runs["old"][-1]["scores"] - old))),
        }
    if "bf16w" in runs and "new" in runs:
        bf, new = runs["bf16w"][0]["scores"], runs["new"][0]["scores"]
        agree["bf16w_vs_stage_spearman"] = float(spearmanr(bf, new).statistic)
    others = {e: runs[e][0]["scores"] for e in runs}
    agree |= fp32_agreement(calls, gen_dir, args.fp32_windows, others)
    prof = []
    for e in args.engines:
        _, group, which = ENGINES[e]
        with heads_copied(e in COPIED_HEADS), flash_attention(e in FLASH_ATTENTION):
            prof += profile(calls, group, args.profile_windows, scorer=scorers[which], engine=e)
    stages = [
        {"config": name, "stage": s, "cpu_s": round(v, 1)} for s, v in sorted(stage_cpu.items())
    ]
    stages.append(
        {"config": name, "stage": "score: engine (in stage)", "cpu_s": round(in_stage_engine, 1)}
    )
    print(json.dumps({"rows": rows, "agree": agree}, default=str), flush=True)
    return rows, [agree], {"profile": prof, "stages": stages}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="configs/books_generated.yaml,configs/medquad_lm.yaml")
    ap.add_argument("--queries", type=int, default=40, help="queries.n_corpus of each run")
    ap.add_argument("--repeat", type=int, default=2, help="interleaved runs of each engine")
    ap.add_argument("--fp32-windows", type=int, default=240)
    ap.add_argument("--profile-windows", type=int, default=240)
    ap.add_argument("--root", default="/tmp/ctxsim-bench-lm-route")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reuse", action="store_true", help="replay a saved capture, no run")
    ap.add_argument("--name", default="score_lm_route")
    ap.add_argument(
        "--engines",
        nargs="+",
        choices=list(ENGINES),
        default=["old", "new"],
        help="bf16w: the run's scorer with bfloat16 weights, grouped (score.bf16_weights_on_cpu)",
    )
    args = ap.parse_args(argv)
    from ctxsim.flows.prefect_env import configure_prefect

    configure_prefect(args.root)  # before Prefect is imported: its settings, the server's timeout
    torch.set_num_threads(args.threads)
    rows, agree, prof, stages = [], [], [], []
    for config in args.configs.split(","):
        if not Path(config).exists():
            print(f"skip {config}: no such file")
            continue
        r, a, t = bench_config(args, config)
        rows += r
        agree += a
        prof += t["profile"]
        stages += t["stages"]
        meta = {
            "command": "python -m bench.bench_score --lm-route " + " ".join(argv or []),
            "workload": f"each config run to label with queries.n_corpus={args.queries} on a "
            "fresh root; the score stage's engine calls captured and replayed by both engines",
            "cpu_s": "time.process_time (CPU-seconds of this process); median of the repeats",
            "all_in": "CPU-s of every stage to label (manifests) minus the score stage's own "
            "engine CPU, plus the engine's CPU measured here",
            "tokens_run": "tokens the decoder stack ran (prompts, prefixes and padding "
            "included) per target token scored",
            "padded_per_target_tok": "the old measure: per batch rows x (longest prompt + "
            "longest target); for the new engine, the tokens run",
            "torch_threads": args.threads,
        }
        write_results(
            args.name,
            rows,
            meta,
            tables={"agreement": agree, "profile": prof, "stages": stages},
        )


if __name__ == "__main__":
    main()
