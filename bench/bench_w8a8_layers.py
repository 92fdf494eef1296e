"""Which linear layers cost the int8 products (score.w8a8_on_cpu) their agreement with float32:
each kind of layer kept bf16 in turn, on the windows a real run scores.

Why: per-token int8 activations lose most where a layer's inputs carry the widest outliers, and
which layers those are depends on the model. This names, for the run's own LM, the layer kinds
worth keeping bf16 (score.w8a8_bf16_layers) and what each costs in CPU time: float32 agreement
(Spearman, max and mean abs difference in nats per token) and engine CPU-s of every variant on
the same windows. Replays bench_lm_route's capture of a run (made on first use).
`python -m bench.bench_w8a8_layers --configs configs/books_generated.yaml`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

from bench.common import (
    bf16_scorer,
    capture_run,
    load_capture,
    run_engine,
    save_capture,
)
from bench.harness import write_results


def layer_kinds(model: torch.nn.Module) -> list[str]:
    """The distinct last name parts of the model's linear layers but its vocabulary head (the
    names score.w8a8_bf16_layers matches)."""
    head = model.get_output_embeddings()
    return sorted(
        {
            n.rpartition(".")[2]
            for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and m is not head
        }
    )


def variants(kinds: list[str], combos: list[str]) -> dict[str, tuple[str, ...] | None]:
    """bf16 alone (None), every layer in int8 (()), each kind kept bf16, and each combo
    ("a+b": those kinds kept together)."""
    out: dict[str, tuple[str, ...] | None] = {"bf16": None, "int8 all": ()}
    out |= {f"keep {k}": (k,) for k in kinds}
    out |= {f"keep {c}": tuple(c.split("+")) for c in combos}
    return out


def slice_calls(calls: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first n // len(calls) windows of each captured call."""
    per = max(1, n // len(calls))
    return [{**c, "windows": tuple(w[:per] for w in c["windows"])} for c in calls]


def sensitivity(
    calls: list[dict[str, Any]],
    fp32: Any,
    make_bf16: Callable[[], Any],
    plan: dict[str, tuple[str, ...] | None],
    fused: bool = True,
) -> list[dict[str, Any]]:
    """One row per variant of ``plan`` (name -> layers kept bf16; None: no int8 at all): its
    agreement with ``fp32``'s scores on ``calls`` and its engine CPU-s (after one untimed pass:
    compiled kernels and caches warm)."""
    from ctxsim.models.contextual.quantize import smooth_quantize_scorer

    ref = run_engine(calls, True, fp32)["scores"]
    rows = []
    for name, keep in plan.items():
        scorer = make_bf16()
        if keep is not None:
            smooth_quantize_scorer(scorer, fused=fused, skip=keep)
        run_engine(calls, True, scorer)
        timed = run_engine(calls, True, scorer)
        got, cpu = timed["scores"], timed["cpu_s"]
        diff = np.abs(got - ref)
        rows.append(
            {
                "variant": name,
                "kept_bf16": "all" if keep is None else ("+".join(keep) or "none"),
                "windows": len(got),
                "fp32_spearman": round(float(spearmanr(got, ref).statistic), 5),
                "fp32_max_abs": round(float(diff.max()), 6),
                "fp32_mean_abs": round(float(diff.mean()), 6),
                "engine_cpu_s": round(cpu, 3),
            }
        )
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="configs/books_generated.yaml")
    ap.add_argument("--queries", type=int, default=40, help="queries.n_corpus of a new capture")
    ap.add_argument("--root", default="/tmp/ctxsim-bench-lm-route")
    ap.add_argument("--windows", type=int, default=400)
    ap.add_argument("--combos", nargs="*", default=[], help='kinds kept together: "a+b"')
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--name", default="w8a8_layers")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    from ctxsim.flows.prefect_env import configure_prefect
    from ctxsim.scores.loading import load_scorer

    configure_prefect(args.root)
    rows: list[dict[str, Any]] = []
    for config in args.configs.split(","):
        name = Path(config).stem
        saved = Path(args.root) / f"{name}-capture.pkl"
        if not saved.exists():
            save_capture(capture_run(config, Path(args.root) / name, args.queries, "bench"), saved)
        cap = load_capture(saved)
        torch.set_num_threads(args.threads)
        gen_dir = Path(cap["record"]["stages"]["generator"]["path"]) / "files"
        fp32, _ = load_scorer(gen_dir, "cpu")
        plan = variants(layer_kinds(fp32.model), args.combos)
        calls = slice_calls(cap["calls"], args.windows)
        for r in sensitivity(calls, fp32, lambda d=gen_dir: bf16_scorer(d), plan):
            rows.append({"config": name, **r})
    write_results(
        args.name,
        rows,
        {
            "command": "python -m bench.bench_w8a8_layers " + " ".join(argv),
            "workload": "bench_lm_route's capture of each config's score stage, the first "
            f"{args.windows} windows split evenly over its engine calls",
            "fp32": "the run's float32 scorer on the same windows, the same engine",
            "int8": "models/contextual/quantize.py smooth_quantize_scorer (SmoothQuant alpha 0.5, "
            "bundled calibration text) on bf16 weights, the named layers kept bf16; the head "
            "always bf16",
            "engine_cpu_s": "time.process_time of the second of two passes (the first compiles "
            "the element-wise kernels); the blocks not compiled, unlike the stage",
            "torch_threads": args.threads,
        },
    )


if __name__ == "__main__":
    main()
