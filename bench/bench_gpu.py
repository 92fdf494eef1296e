"""Benchmark the CUDA paths in one call on a lent GPU: the right term at scale (books_generated's
shape, >= 100,000 windows: old padded engine vs grouped prompts, bf16 autocast vs bf16 weights,
vocabulary head chunked or whole, cuDNN attention on or off, one torch.profiler table), the
encoder route's corpus pass (``embed``), the score engine's three terms (token budgets, the OOM
back-off), gencontexts sampling, and what they make of the labelled pairs per GPU-hour. Also runs
on CPU (``--device cpu --smoke``) so the script is tested before device time is spent on it.

Why one script: a lent GPU comes with minutes, not hours, and each call starts a machine; every
check that needs the GPU runs here, in one process, and writes one results file.

Models are randomly initialised from the packaged models' own ``config.json`` (SmolLM2-135M:
Llama, 30 layers, 576 d, vocabulary 49,152; Gemma-3-270m: 18 layers, 640 d, vocabulary 262,144):
speed does not depend on the weights, and the weights (0.5-1 GB) cannot travel to a lent machine
(64 MiB). Prompts are tokenised with SmolLM2's tokenizer for both (Gemma's is 33 MB); ids stay
inside both vocabularies. FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` on the
very calls that are timed (so padding counts as work done, as in a hardware utilisation); MFU is
that over the GPU's measured bf16 matrix-product peak (8192^3, mean of 10 after 3 warm-ups).

    python -m bench.bench_gpu --arch-dir DIR --sentences FILE [--device cuda]
    python -m bench.bench_gpu --from-log LOG [LOG ...] --name NAME   # rows printed on the GPU

``bench/gpu_lease.sh`` is the whole call on a lent machine; ``--from-log`` rebuilds the results
file from the rows a call printed, when a call's time ran out before its last write.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

from bench.harness import write_results
from ctxsim.models.contextual.context_sampling import SamplingSettings, render, sample_texts
from ctxsim.models.contextual.generator import CausalPrefixScorer
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine

ARCHS = ("smollm2-135m", "gemma-270m")
#: books_generated on the 2-core CPU at its fastest (bench/results/pipeline_books_generated_bf16.md,
#: run bg-q500-bf16-b256): 2,000 labelled pairs from 500 queries x 4 samples and 18,000 scored
#: windows (right term only), 704.4 CPU-s all-in, of which score 472.8 and the sampler 127.9
WINDOWS_PER_PAIR = 18_000 / 2_000
SAMPLES_PER_PAIR = 2_000 / 2_000
OTHER_CPU_S_PER_PAIR = (704.4 - 472.8 - 127.9) / 2_000  # shard, pairs, select, label ...
#: all-in on the 2-core CPU: float32 and int8 (pipeline_books_generated.md), bf16 weights in the
#: scorer and the sampler (pipeline_books_generated_bf16.md)
CPU_PAIRS_PER_HOUR = {"fp32": 4_276.3, "int8": 6_894.6, "bf16": 10_221.5}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def gpu_info(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"device": device, "torch": torch.__version__}
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(0)
        info |= {
            "gpu": p.name,
            "gpu_memory_gb": round(p.total_memory / 2**30, 1),
            "sms": p.multi_processor_count,
            "cuda": torch.version.cuda,
        }
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except OSError:
            pass
    return info


def matmul_peak_tflops(device: str, n: int, reps: int = 10) -> float:
    """Measured bf16 matrix-product rate: the denominator of the utilisation figures."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12


def arch_model(arch_dir: Path, name: str, device: str, layers: int | None = None) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(arch_dir / name)
    if layers is not None:  # --smoke: the same shapes, fewer layers
        cfg.num_hidden_layers = layers
        if hasattr(cfg, "layer_types") and cfg.layer_types:
            cfg.layer_types = cfg.layer_types[:layers]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return model.to(device).eval()


def load_paragraphs(path: Path, n: int) -> list[list[str]]:
    """Runs of consecutive sentences (one JSON list per line)."""
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            sents = json.loads(line)
            if len(sents) >= 5:
                out.append(sents)
            if len(out) == n:
                break
    return out


def windows(paras: list[list[str]], q: int, c: int) -> tuple[list[str], list[str], list[str]]:
    """q sentences x c contexts (one sentence a side): the score stage's shape."""
    ctx = [(p[len(p) // 2 - 1], p[len(p) // 2 + 1]) for p in paras[:c]]
    pool = [s for p in paras[c:] for s in p]
    sents = pool[:q]
    return (
        [lc for _ in sents for lc, _ in ctx],
        [s for s in sents for _ in ctx],
        [rc for _ in sents for _, rc in ctx],
    )


def timed_score(
    eng_cfg: EngineConfig, sc: CausalPrefixScorer, wl: tuple, directions: tuple[str, ...]
) -> tuple[dict[str, np.ndarray], float, Any, float]:
    """One warm-up, one timed run, then the same run again under a FLOP counter (untimed: the
    counter's Python hook on every op would slow the GPU's small kernels)."""
    ScoringEngine(sc, eng_cfg).score(*(x[:64] for x in wl), directions)
    device = sc.device.type
    sync(device)
    eng = ScoringEngine(sc, eng_cfg)
    t0 = time.perf_counter()
    got = eng.score(*wl, directions)
    sync(device)
    secs = time.perf_counter() - t0
    flops, _ = counted_flops(sc, eng_cfg, wl, directions)
    return got, secs, eng.stats, flops


def bench_score(args: argparse.Namespace, tok: Any, peak: float) -> list[dict[str, Any]]:
    paras = load_paragraphs(args.sentences, args.contexts + args.queries)
    wl = windows(paras, args.queries, args.contexts)
    rows = []
    for arch in ARCHS:
        model = arch_model(args.arch_dir, arch, args.device, 2 if args.smoke else None)
        sc = CausalPrefixScorer(model, tok, device=args.device)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        ref = None
        for budget in args.budgets:
            for bf16 in (True, False) if budget == args.budgets[-1] else (True,):
                cfg = EngineConfig(
                    token_budget=budget,
                    max_batch=args.max_batch,
                    max_logit_elems=args.max_logit_elems,
                    bf16_on_cuda=bf16,
                )
                got, secs, st, flops = timed_score(cfg, sc, wl, ("fwd", "left", "right"))
                if ref is None:
                    ref = got
                row = {
                    "section": "score",
                    "model": f"{arch} (random init)",
                    "params_m": round(params, 1),
                    "dtype": "bf16 autocast" if bf16 else "float32",
                    "token_budget": budget,
                    "windows": len(wl[1]),
                    "seconds": round(secs, 3),
                    "windows_per_s": round(len(wl[1]) / secs, 1),
                    "target_tok_per_s": round(st.target_tokens / secs),
                    "forward_calls": st.forward_calls,
                    "padded_per_target_tok": round(st.padded_tokens / max(1, st.target_tokens), 2),
                    "tflop_per_s": round(flops / secs / 1e12, 2),
                    "mfu_vs_bf16_peak": round(flops / secs / 1e12 / peak, 4),
                    "oom_retries": st.oom_retries,
                    "max_abs_diff_vs_first": round(
                        max(float(np.max(np.abs(got[d] - ref[d]))) for d in got), 5
                    ),
                    "spearman_vs_first": round(
                        min(float(spearmanr(got[d], ref[d]).statistic) for d in got), 5
                    ),
                }
                print(row, flush=True)
                rows.append(row)
        # the right term alone, as configs/books_generated.yaml scores: windows/s -> pairs/GPU-h
        cfg = EngineConfig(
            token_budget=args.budgets[-1],
            max_batch=args.max_batch,
            max_logit_elems=args.max_logit_elems,
        )
        _, secs, st, flops = timed_score(cfg, sc, ([""] * len(wl[1]), wl[1], wl[2]), ("right",))
        rows.append(
            {
                "section": "score_right_only",
                "model": f"{arch} (random init)",
                "dtype": "bf16 autocast",
                "token_budget": args.budgets[-1],
                "windows": len(wl[1]),
                "seconds": round(secs, 3),
                "windows_per_s": round(len(wl[1]) / secs, 1),
                "target_tok_per_s": round(st.target_tokens / secs),
                "mfu_vs_bf16_peak": round(flops / secs / 1e12 / peak, 4),
            }
        )
        print(rows[-1], flush=True)
        if args.device.startswith("cuda"):  # on a CPU it would take the host's memory
            try:
                rows.append(oom_drill(args, sc, arch, paras, ref_cfg=cfg))
            except torch.OutOfMemoryError as e:  # the drill failed: a result, not a crash
                rows.append({"section": "oom_backoff", "model": arch, "failed": str(e)[:160]})
                print(rows[-1], flush=True)
        del sc, model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def k_windows(paras: list[list[str]], n_windows: int, k: int, seed: int = 0) -> tuple:
    """books_generated's right-term shape: each sentence with ``k`` right contexts of its own
    (there, its generated continuations), no left context, so the sentence is the prompt its
    ``k`` windows share."""
    sents = [s for p in paras for s in p]
    n_sent = -(-n_windows // k)
    if n_sent * 2 > len(sents):
        raise ValueError(f"{len(sents)} sentences cannot make {n_windows} windows of {k} each")
    pool = sents[n_sent:]
    pick = np.random.default_rng(seed).integers(0, len(pool), size=n_sent * k)
    return (
        [""] * (n_sent * k),
        [s for s in sents[:n_sent] for _ in range(k)],
        [pool[j] for j in pick],
    )


def counted_flops(sc: CausalPrefixScorer, eng_cfg: EngineConfig, wl: tuple, dirs: tuple) -> tuple:
    """(FLOPs, tokens run) of one engine run on ``wl``, counted by FlopCounterMode (eager
    attention: the counter cannot size SDPA with grouped key/value heads)."""
    from torch.utils.flop_counter import FlopCounterMode

    sc.model.set_attn_implementation("eager")
    try:
        eng = ScoringEngine(sc, eng_cfg)
        with FlopCounterMode(display=False) as fc:
            eng.score(*wl, dirs)
    finally:
        sc.model.set_attn_implementation("sdpa")
    return float(fc.get_total_flops()), eng.stats.run_tokens


def profiled(sc: CausalPrefixScorer, eng_cfg: EngineConfig, wl: tuple, out: Path | None) -> dict:
    """torch.profiler over one engine run: the top operators by device and by host time (to
    ``out``), and the share of the wall time the GPU spent in kernels."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU]
    cuda = sc.device.type == "cuda"
    if cuda:
        acts.append(ProfilerActivity.CUDA)
    sync(sc.device.type)
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        ScoringEngine(sc, eng_cfg).score(*wl, ("right",))
        sync(sc.device.type)
    wall = time.perf_counter() - t0
    ka = prof.key_averages()
    kernel_us = sum(
        getattr(e, "self_device_time_total", 0.0) for e in ka if str(e.device_type).endswith("CUDA")
    )
    tables = ka.table(sort_by="self_cpu_time_total", row_limit=20)
    if cuda:
        tables = ka.table(sort_by="self_device_time_total", row_limit=20) + "\n\n" + tables
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(tables, encoding="utf-8")
    print(tables[:6000], flush=True)
    return {"profiled_wall_s": round(wall, 3), "gpu_kernel_share": round(kernel_us / 1e6 / wall, 3)}


#: the right-term variants run on the >= 100,000-window workload: name -> (engine label,
#: group_prompts, weights dtype, autocast, head_chunk, cuDNN attention); a bfloat16-weights
#: variant runs after every float32 one (casting back would round the weights)
RIGHT_VARIANTS: dict[str, tuple[str, bool, str, bool, int, bool]] = {
    "grouped-chunk128": ("grouped", True, "float32", True, 128, True),
    "grouped": ("grouped", True, "float32", True, 0, True),
    "padded": ("padded (old)", False, "float32", True, 0, True),
    "grouped-nocudnn": ("grouped", True, "float32", True, 0, False),
    "grouped-bf16w": ("grouped", True, "bfloat16", False, 0, True),
    "grouped-bf16w-nocudnn": ("grouped", True, "bfloat16", False, 0, False),
    "grouped-bf16w-tok1": ("grouped", True, "bfloat16", False, 0, True),
    "grouped-bf16w-compile": ("grouped", True, "bfloat16", False, 0, True),
    "grouped-bf16w-tail": ("grouped", True, "bfloat16", False, 0, True),
    "grouped-bf16w-blocks": ("grouped", True, "bfloat16", False, 0, True),
}
#: engine settings a variant sets beyond the table above: the tokenizer on one thread (as before
#: the engine turned its threads on on CUDA)
VARIANT_ENGINE: dict[str, dict[str, Any]] = {
    "grouped-bf16w-tok1": {"tokenizer_threads": False},
}
#: variants under torch.compile: name -> CausalPrefixScorer.compile's scope
COMPILED = {
    "grouped-bf16w-compile": "decoder",
    "grouped-bf16w-tail": "head",
    "grouped-bf16w-blocks": "blocks",
}


def bench_right(args: argparse.Namespace, tok: Any, peak: float) -> list[dict[str, Any]]:
    """The books_generated right term at scale: old (padded) engine vs new (grouped prompts),
    bf16 autocast vs bf16 weights, vocabulary head in chunks of 128 (the CPU default) vs whole;
    FLOPs counted on the first ``--flop-windows`` and scaled by tokens run; one profile."""
    paras = load_paragraphs(args.sentences, 100_000)
    rows = []
    for arch, n_win in zip(ARCHS, args.right_windows, strict=False):
        wl = k_windows(paras, n_win, args.k)
        sub = tuple(x[: args.flop_windows] for x in wl)
        model = arch_model(args.arch_dir, arch, args.device, 2 if args.smoke else None)
        if args.cold_run:
            rows.append(cold_run(args, model, tok, arch, wl))
        ref = None
        for variant in args.variants:
            label, grouped, wdtype, autocast, chunk, cudnn = RIGHT_VARIANTS[variant]
            model.to(getattr(torch, wdtype))
            sc = CausalPrefixScorer(model, tok, device=args.device)
            cfg = variant_config(args, variant)
            if variant in COMPILED:
                torch._dynamo.config.cache_size_limit = 64  # budgets cut batches of many shapes
                sc.compile(COMPILED[variant], args.compile_backend)
            t0 = time.perf_counter()
            try:  # warm-up (and, compiled, the compile: its first shapes)
                ScoringEngine(sc, cfg).score(*(x[: args.warmup_windows] for x in wl), ("right",))
            except Exception as e:  # noqa: BLE001 - a variant that cannot run is a result
                rows.append(
                    {"section": "right_term_at_scale", "variant": variant, "failed": repr(e)[:300]}
                )
                print(rows[-1], flush=True)
                sc.uncompiled()
                continue
            sync(args.device)
            warm_s = time.perf_counter() - t0
            eng = ScoringEngine(sc, cfg)
            t0 = time.perf_counter()
            got = eng.score(*wl, ("right",))["right"]
            sync(args.device)
            secs = time.perf_counter() - t0
            st = eng.stats
            prof = None
            if variant in args.profile_variant and arch == ARCHS[0]:
                prof_wl = tuple(x[: args.profile_windows] for x in wl)
                out = args.profile_out and Path(args.profile_out)
                out = out and out.with_name(f"{out.stem}_{variant}{out.suffix}")
                prof = profiled(sc, cfg, prof_wl, out)
            sc.uncompiled()  # the FLOP counter runs eager (the same work)
            flops_sub, run_sub = counted_flops(sc, cfg, sub, ("right",))
            flops = flops_sub * st.run_tokens / max(run_sub, 1)
            ref = got if ref is None else ref
            row = {
                "section": "right_term_at_scale",
                "model": f"{arch} (random init)",
                "engine": label,
                "variant": variant,
                "weights": wdtype,
                "autocast_bf16": autocast,
                "head_chunk": chunk,
                "cudnn_attention": cudnn,
                "token_budget": cfg.token_budget,
                "windows": len(got),
                "k": args.k,
                "seconds": round(secs, 3),
                "windows_per_s": round(len(got) / secs, 1),
                "target_tok_per_s": round(st.target_tokens / secs),
                "run_per_target_tok": round(st.run_tokens / max(1, st.target_tokens), 3),
                "padded_per_target_tok": round(st.padded_tokens / max(1, st.target_tokens), 3),
                "forward_calls": st.forward_calls,
                "tflop_per_s": round(flops / secs / 1e12, 2),
                "mfu_vs_bf16_peak": round(flops / secs / 1e12 / peak, 4),
                "max_abs_diff_vs_first": round(float(np.max(np.abs(got - ref))), 5),
                "spearman_vs_first": round(float(spearmanr(got, ref).statistic), 5),
                "warmup_s": round(warm_s, 1),
            }
            print(row, flush=True)
            rows.append(row)
            if prof is not None:
                rows.append({"section": "profile", "model": arch, **row_keys(row)} | prof)
                print(rows[-1], flush=True)
        del model, sc
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def variant_config(args: argparse.Namespace, variant: str) -> EngineConfig:
    """The engine settings of a right-term variant (its compile scope is set on the scorer)."""
    _, grouped, _, autocast, chunk, cudnn = RIGHT_VARIANTS[variant]
    return EngineConfig(
        token_budget=args.budgets[-1],
        max_batch=args.max_batch,
        max_logit_elems=args.max_logit_elems,
        bf16_on_cuda=autocast,
        group_prompts=grouped,
        head_chunk=chunk,
        cudnn_attention=cudnn,
        **VARIANT_ENGINE.get(variant, {}),
    )


def cold_run(args: argparse.Namespace, model: Any, tok: Any, arch: str, wl: tuple) -> dict:
    """The whole workload once, timed, before any variant: the first full-size run in a process
    ran 1.45-1.49x slower than a repeat of it on an H100 (bench/results/gpu_h100_compile.md;
    the cause was not measured: the allocator's growth and attention plans for each new shape
    are candidates), so the variants that follow are all timed warm and this row says what a
    fresh score process pays. Eager, with the first variant's weights."""
    model.to(getattr(torch, RIGHT_VARIANTS[args.variants[0]][2]))
    sc = CausalPrefixScorer(model, tok, device=args.device)
    sync(args.device)
    t0 = time.perf_counter()
    ScoringEngine(sc, variant_config(args, args.variants[0])).score(*wl, ("right",))
    sync(args.device)
    secs = time.perf_counter() - t0
    row = {
        "section": "right_term_cold",
        "model": f"{arch} (random init)",
        "variant": args.variants[0],
        "windows": len(wl[1]),
        "seconds": round(secs, 3),
        "windows_per_s": round(len(wl[1]) / secs, 1),
    }
    print(row, flush=True)
    return row


def row_keys(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("engine", "variant", "weights", "head_chunk", "cudnn_attention")}


def bench_encode(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The encoder route's corpus pass (``embed``): paragraphs truncated at 64 tokens through
    all-MiniLM-L6-v2's architecture (random init), sentences per second by batch and dtype."""
    import shutil
    import tempfile

    from transformers import AutoConfig, AutoModel

    from ctxsim.models.encoders import encode, load_encoder

    paras = load_paragraphs(args.sentences, 100_000)
    texts = [" ".join(p) for p in paras]
    texts = (texts * (args.encode_texts // max(1, len(texts)) + 1))[: args.encode_texts]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "minilm"
        shutil.copytree(args.arch_dir / "minilm", d)
        torch.manual_seed(0)
        AutoModel.from_config(AutoConfig.from_pretrained(d)).save_pretrained(d)
        combos = [(dt, par) for dt in ("float32", "float16") for par in args.encode_parallel]
        for dtype, par in combos:
            # the Rust tokenizer reads this on each batch call: its threads on or off
            os.environ["TOKENIZERS_PARALLELISM"] = par
            model = load_encoder(str(d), 64, args.device)
            model.to(getattr(torch, dtype))
            for batch in args.encode_batches:
                encode(model, texts[: batch * 2], batch)  # warm-up
                sync(args.device)
                t0 = time.perf_counter()
                emb = encode(model, texts, batch)
                sync(args.device)
                secs = time.perf_counter() - t0
                rows.append(
                    {
                        "section": "embed_corpus_pass",
                        "model": "all-MiniLM-L6-v2 (random init)",
                        "dtype": dtype,
                        "tokenizer_parallelism": par,
                        "max_seq_length": 64,
                        "batch_size": batch,
                        "texts": len(texts),
                        "seconds": round(secs, 3),
                        "texts_per_s": round(len(texts) / secs, 1),
                        "all_finite": bool(np.isfinite(emb).all()),
                    }
                )
                print(rows[-1], flush=True)
            del model
    return rows


def oom_drill(
    args: argparse.Namespace, sc: CausalPrefixScorer, arch: str, paras: list, ref_cfg: EngineConfig
) -> dict[str, Any]:
    """A budget far past the GPU's memory: the engine must halve its way down, lose no window
    and give the scores of a budget that fits."""
    wl = windows(paras, args.oom_queries, args.contexts)
    huge = EngineConfig(token_budget=1 << 26, max_batch=1 << 20, max_logit_elems=1 << 42)
    sync(args.device)
    t0 = time.perf_counter()
    eng = ScoringEngine(sc, huge)
    got = eng.score(*wl, ("fwd",))
    sync(args.device)
    secs = time.perf_counter() - t0
    ref = ScoringEngine(sc, ref_cfg).score(*wl, ("fwd",))
    row = {
        "section": "oom_backoff",
        "model": f"{arch} (random init)",
        "token_budget": huge.token_budget,
        "windows": len(wl[1]),
        "seconds": round(secs, 3),
        "oom_retries": eng.stats.oom_retries,
        "forward_calls": eng.stats.forward_calls,
        "all_finite": bool(np.isfinite(got["fwd"]).all()),
        "max_abs_diff_vs_fitting_budget": round(float(np.max(np.abs(got["fwd"] - ref["fwd"]))), 5),
    }
    print(row, flush=True)
    return row


def bench_sampling(args: argparse.Namespace, tok: Any) -> list[dict[str, Any]]:
    paras = load_paragraphs(args.sentences, 4000)
    sents = [s for p in paras for s in p][: args.samples]
    prompts = [render("right", s) for s in sents]
    seeds = list(range(len(prompts)))
    settings = SamplingSettings(max_new_tokens=24)  # configs/books_generated.yaml
    rows = []
    for arch in args.sample_archs:
        model = arch_model(args.arch_dir, arch, args.device, 2 if args.smoke else None)
        for batch in args.sample_batches:
            for bf16 in (False, True):
                ctx = (
                    torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16)
                    if bf16
                    else torch.autocast(args.device.split(":")[0], enabled=False)
                )
                with ctx:
                    sample_texts(model, tok, prompts[:batch], seeds[:batch], settings, batch)
                    sync(args.device)
                    t0 = time.perf_counter()
                    out = sample_texts(model, tok, prompts, seeds, settings, batch)
                    sync(args.device)
                    secs = time.perf_counter() - t0
                rows.append(
                    {
                        "section": "gencontexts_sampling",
                        "model": f"{arch} (random init)",
                        "dtype": "bf16 autocast" if bf16 else "float32",
                        "batch_size": batch,
                        "samples": len(out),
                        "max_new_tokens": settings.max_new_tokens,
                        "seconds": round(secs, 3),
                        "samples_per_s": round(len(out) / secs, 1),
                    }
                )
                print(rows[-1], flush=True)
        del model
    return rows


def pairs_per_gpu_hour(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """books_generated's per-pair work (9.0 right-term windows, 1 sample, the CPU stages) at
    the measured GPU rates; the CPU stages stay at their 2-core CPU cost per pair."""
    out = []
    for arch in ARCHS:
        mine = [r for r in rows if r["model"].startswith(arch)]
        win = [
            r["windows_per_s"]
            for r in mine
            if r["section"] in ("score_right_only", "right_term_at_scale")
        ]
        smp = [r for r in mine if r["section"] == "gencontexts_sampling"]
        if not win or not smp:
            continue
        best_smp = max(r["samples_per_s"] for r in smp)
        gpu_s = WINDOWS_PER_PAIR / max(win) + SAMPLES_PER_PAIR / best_smp
        pairs = 3600 / (gpu_s + OTHER_CPU_S_PER_PAIR)
        # the lent machine's own cores (16) running the CPU stages, if they scaled linearly
        pairs16 = 3600 / (gpu_s + OTHER_CPU_S_PER_PAIR * 2 / 16)
        out.append(
            {
                "section": "labelled_pairs_per_gpu_hour",
                "model": f"{arch} (scorer and sampler)",
                "gpu_s_per_pair": round(gpu_s, 5),
                "cpu_s_per_pair_other_stages": round(OTHER_CPU_S_PER_PAIR, 4),
                "pairs_per_hour_all_in": round(pairs),
                "pairs_per_gpu_hour_gpu_stages_only": round(3600 / gpu_s),
                "x_vs_2core_cpu_bf16": round(pairs / CPU_PAIRS_PER_HOUR["bf16"], 1),
                "x_vs_2core_cpu_int8": round(pairs / CPU_PAIRS_PER_HOUR["int8"], 1),
                "all_in_cpu_stages_on_16_cores_linear": round(pairs16),
                "x16_vs_2core_cpu_bf16": round(pairs16 / CPU_PAIRS_PER_HOUR["bf16"], 1),
                "gpu_stages_only_vs_2core_cpu_bf16": round(
                    3600 / gpu_s / CPU_PAIRS_PER_HOUR["bf16"], 1
                ),
            }
        )
        print(out[-1], flush=True)
    return out


def write_sections(name: str, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """One table per section (score first), each without its empty columns."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["section"], []).append({k: v for k, v in r.items() if k != "section"})
    main = by.pop("score", [])
    write_results(name, main, meta, tables=by)


def meta_text(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "command": "python -m bench.bench_gpu " + " ".join(sys.argv[1:]),
        "measured_on": "the GPU rows: the lent machine named below (gpu, torch, cuda); the "
        "Machine line above is the host that wrote this file",
        "models": "randomly initialised from the packaged config.json (speed does not depend on "
        "the weights); SmolLM2's tokenizer for both",
        "workload": f"{args.queries} book sentences x {args.contexts} contexts (one sentence a "
        "side), the three Eq. 3 directions; right_only: the books_generated.yaml term",
        "mfu": "FLOPs counted by FlopCounterMode (eager attention) on a repeat of the timed call "
        "(padding included) / the timed seconds / the measured bf16 matmul peak",
        "oom_drill": f"{args.oom_queries} x {args.contexts} windows, fwd term, token budget 2^26: "
        "scores compared with a budget that fits",
        "pairs_per_gpu_hour": "books_generated per pair: 9.0 right-term windows + 1 sample on the "
        "GPU, other stages at their 2-core CPU cost (bench/results/pipeline_books_generated_bf16.md"
        ", run bg-q500-bf16-b256: all but score and the sampler); x_vs_2core_cpu_*: against that "
        "CPU's all-in pairs per hour",
    }


def rows_from_logs(paths: list[Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The machine line and the result rows a device call printed (Python dict reprs)."""
    info: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for call, path in enumerate(paths, 1):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("{"):
                continue
            d = ast.literal_eval(line)
            if "section" in d and d["section"] != "labelled_pairs_per_gpu_hour":
                rows.append(d | ({"call": call} if len(paths) > 1 else {}))
            elif "gpu" in d:
                peaks = info.get("bf16_matmul_peak_tflops_per_call", [])
                info = d | {
                    "bf16_matmul_peak_tflops_per_call": [*peaks, d["bf16_matmul_peak_tflops"]]
                }
    return info, rows


def sampling_rows(path: Path | None) -> list[dict[str, Any]]:
    """gencontexts' sampling rows of an earlier results file (a call that measured the scorer
    alone takes the sampler's rate from the call that measured it)."""
    if path is None:
        return []
    got = json.loads(path.read_text(encoding="utf-8"))["tables"].get("gencontexts_sampling", [])
    return [{"section": "gencontexts_sampling", **r, "from": path.name} for r in got]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch-dir", type=Path, help="<arch>/config.json + tokenizer")
    ap.add_argument("--from-log", type=Path, nargs="+", help="rebuild results from device logs")
    ap.add_argument("--sentences", type=Path, help="JSONL, a sentence list a line")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="2 layers, small workloads (CPU check)")
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--contexts", type=int, default=48)
    ap.add_argument("--oom-queries", type=int, default=160)
    ap.add_argument("--budgets", type=int, nargs="+", default=[8192, 131072])
    ap.add_argument("--max-batch", type=int, default=4096)
    ap.add_argument("--max-logit-elems", type=int, default=1 << 32)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--sample-batches", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--peak-n", type=int, default=8192)
    ap.add_argument("--name", default="gpu")
    ap.add_argument("--skip", nargs="*", default=[], choices=list(SECTIONS))
    ap.add_argument("--right-windows", type=int, nargs="+", default=[100_000, 20_000])
    ap.add_argument("--k", type=int, default=9, help="right contexts per sentence")
    ap.add_argument("--variants", nargs="+", default=list(RIGHT_VARIANTS), choices=RIGHT_VARIANTS)
    ap.add_argument("--profile-variant", nargs="*", default=["grouped-bf16w-nocudnn"])
    ap.add_argument("--warmup-windows", type=int, default=256)
    ap.add_argument(
        "--cold-run",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the whole workload once first, so every variant after it runs warm",
    )
    ap.add_argument(
        "--compile-backend", default="inductor", help="torch.compile backend (CPU smoke: eager)"
    )
    ap.add_argument("--encode-parallel", nargs="+", default=["false"], choices=["false", "true"])
    ap.add_argument("--flop-windows", type=int, default=4096)
    ap.add_argument("--profile-windows", type=int, default=8192)
    ap.add_argument("--profile-out", default=None, help="the profile's tables (text)")
    ap.add_argument("--encode-texts", type=int, default=32_768)
    ap.add_argument("--encode-batches", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--sample-archs", nargs="+", default=list(ARCHS))
    ap.add_argument("--note", default="", help="recorded in the results (e.g. the device calls)")
    ap.add_argument(
        "--sampling-from",
        type=Path,
        default=None,
        help="--from-log: sampling rows of a results json",
    )
    args = ap.parse_args(argv)
    if args.from_log:
        info, rows = rows_from_logs(args.from_log)
        rows += sampling_rows(args.sampling_from)
        rows += pairs_per_gpu_hour(rows)
        meta = {**meta_text(args), **info, "note": args.note}
        write_sections(args.name, rows, meta | {"from_logs": [str(p) for p in args.from_log]})
        return
    if args.arch_dir is None or args.sentences is None:
        ap.error("--arch-dir and --sentences are needed (or --from-log)")
    from transformers import AutoTokenizer

    t_start = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(args.arch_dir / "smollm2-135m")
    info = gpu_info(args.device)
    peak = matmul_peak_tflops(args.device, args.peak_n)
    info["bf16_matmul_peak_tflops"] = round(peak, 1)
    print(info, flush=True)
    rows: list[dict[str, Any]] = []
    meta = {**meta_text(args), **info}
    for section, run in SECTIONS.items():  # results written after each: a timeout keeps them
        if section in args.skip:
            continue
        rows += run(args, tok, peak)
        write_sections(args.name, rows, meta | {"wall_s": round(time.perf_counter() - t_start, 1)})
    rows += pairs_per_gpu_hour(rows)
    write_sections(args.name, rows, meta | {"wall_s": round(time.perf_counter() - t_start, 1)})


#: the sections in the order they run (the issue's first questions first)
SECTIONS: dict[str, Any] = {
    "right": bench_right,
    "encode": lambda args, tok, peak: bench_encode(args),
    "score": bench_score,
    "sampling": lambda args, tok, peak: bench_sampling(args, tok),
}

if __name__ == "__main__":
    main()
