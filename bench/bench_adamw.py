"""The optimizer step of `train` (train.optimizer): AdamW over an encoder's parameters with
torch's three kernels, in one run on the same gradients: the multi-tensor loop (``foreach``,
the trainer's ``adamw_torch``), the fused kernel (``adamw_torch_fused``, transformers' own
default on torch >= 2.8) and the plain per-parameter loop (the naive way). Per kernel: CPU
milliseconds a step once warm (the median of ``--steps``), and the largest difference of the
parameters from the multi-tensor loop's after the same steps (the same update, other rounding).

    python -m bench.bench_adamw [--model minilm] [--steps 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from bench.harness import write_results

#: kernel -> torch.optim.AdamW's keyword choosing it
KERNELS = {
    "multi-tensor loop (adamw_torch, the default)": {"foreach": True},
    "fused (adamw_torch_fused)": {"fused": True},
    "per-parameter loop (naive)": {"foreach": False},
}


def step_kernels(model_dir: str, steps: int, threads: int, seed: int = 0) -> list[dict[str, Any]]:
    """Each kernel from the same start and gradients: its step's CPU time and how far its
    parameters end from the multi-tensor loop's."""
    import torch

    from ctxsim.models.training.sentence_encoder import build_student

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = build_student(model_dir, 32, "cpu")
    start = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    grads = [torch.randn_like(p) * 1e-3 for p in start]
    rows, reference = [], None
    for name, kernel in KERNELS.items():
        params = [p.clone().requires_grad_(True) for p in start]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt = torch.optim.AdamW(params, lr=1e-5, **kernel)
        opt.step()  # the state allocated outside the clock
        times = []
        for _ in range(steps):
            t0 = time.process_time()
            opt.step()
            times.append(time.process_time() - t0)
        if reference is None:
            reference = [p.detach() for p in params]
        gap = max(
            float((p.detach() - r).abs().max()) for p, r in zip(params, reference, strict=True)
        )
        rows.append(
            {
                "kernel": name,
                "CPU ms a step (median)": round(1000 * statistics.median(times), 1),
                "parameters (M)": round(sum(p.numel() for p in params) / 1e6, 2),
                "largest parameter difference from the multi-tensor loop": gap,
            }
        )
    base = rows[0]["CPU ms a step (median)"]
    for row in rows:
        row["x the multi-tensor loop"] = round(base / max(row["CPU ms a step (median)"], 1e-9), 2)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--name", default="adamw_step")
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args(argv)
    from ctxsim.models.registry import resolve_model

    rows = step_kernels(str(resolve_model(a.model)), a.steps, a.threads)
    for row in rows:
        print(row, flush=True)
    meta = {
        "command": "python -m bench.bench_adamw " + " ".join(argv if argv else sys.argv[1:]),
        "model": a.model,
        "steps": a.steps,
        "torch threads": a.threads,
        "gradients": "one seeded random set (1e-3 scale), the same for every kernel",
    }
    write_results(a.name, rows, meta, a.out_dir)


if __name__ == "__main__":
    main()
