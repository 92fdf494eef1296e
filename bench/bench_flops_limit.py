"""The physical limit of scoring on this CPU: the scorer's FLOPs per labelled pair divided by the
machine's measured matmul FLOP/s (one torch thread, float32 and dynamic int8).

FLOPs per pair = 2 x (non-embedding parameters) x tokens per labelled pair (+ the vocabulary
head on target tokens only, as the engine computes it); tokens per pair from
bench/results/prefix_share_books.json (the books config's windows, counted). Matmul speed: a
(4096 x d) @ (d x 4d) product, the shape of the scorer's MLP at the engine's token budget,
timed in CPU seconds (time.process_time; a shared machine slows it, so this limit is if
anything pessimistic). Usage::

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_flops_limit
"""

from __future__ import annotations

import json
import sys
import time

import torch

from bench.harness import RESULTS_DIR, write_results

D, FF, TOKENS, VOCAB = 576, 1536, 4096, 49152  # SmolLM2-135M: hidden 576, MLP 1536, vocab 49152
NON_EMB_PARAMS = 134.5e6 - VOCAB * D  # tied embedding / head


def flops_per_s(fn, flops: float, min_cpu: float = 3.0) -> float:
    fn()
    n, c0 = 0, time.process_time()
    while time.process_time() - c0 < min_cpu:
        fn()
        n += 1
    return flops * n / (time.process_time() - c0)


def matmul_speeds() -> dict[str, float]:
    """FLOP per CPU-second of the scorer's MLP-shaped matmul, float32 and dynamic int8."""
    from torch.ao.quantization import quantize_dynamic

    x = torch.randn(TOKENS, D)
    lin = torch.nn.Linear(D, FF, bias=False)
    q = quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
    flops = 2.0 * TOKENS * D * FF
    with torch.inference_mode():
        return {
            "fp32": flops_per_s(lambda: lin(x), flops),
            "int8": flops_per_s(lambda: q(x), flops),
        }


def main(argv: list[str] | None = None) -> None:
    torch.set_num_threads(1)
    speeds = matmul_speeds()
    fp32, int8 = speeds["fp32"], speeds["int8"]
    share = json.loads((RESULTS_DIR / "prefix_share_books.json").read_text())
    both = next(r for r in share["rows"] if r["windows_of"] == "both")
    pairs = 400  # the count's workload: 200 queries x 2 pairs per query
    tok_pair = both["tokens"] / pairs
    tok_pair_cached = both["prefix_cache_tokens"] / pairs
    f_pair = 2 * NON_EMB_PARAMS * tok_pair
    rows = []
    for name, speed in (("fp32", fp32), ("int8 dynamic", int8)):
        for tokens, label in ((tok_pair, "every token"), (tok_pair_cached, "prefix cache")):
            f = 2 * NON_EMB_PARAMS * tokens
            rows.append(
                {
                    "matmul": name,
                    "tokens_per_pair": round(tokens, 1),
                    "counted": label,
                    "gflop_per_pair": round(f / 1e9, 1),
                    "measured_gflop_per_cpu_s": round(speed / 1e9, 1),
                    "limit_cpu_s_per_pair": round(f / speed, 2),
                    "limit_pairs_per_cpu_hour": round(3600 * speed / f),
                }
            )
            print(rows[-1], flush=True)
    write_results(
        "scorer_flops_limit",
        rows,
        meta={
            "command": "python -m bench.bench_flops_limit " + " ".join(argv or sys.argv[1:]),
            "model": f"SmolLM2-135M: {NON_EMB_PARAMS / 1e6:.1f}M non-embedding parameters",
            "flops_per_pair_fp32_all_tokens_g": round(f_pair / 1e9, 1),
            "reference": "books-s12 (bench/results/pipeline_books.md): score 1914.9 CPU-s for "
            "400 labelled pairs = 4.79 CPU-s per pair (2 torch threads, load 2)",
            "load_caveat": "shared machine, load ~10 on 2 cores: the measured FLOP/s is low if "
            "anything, so the limit is pessimistic",
        },
    )


if __name__ == "__main__":
    main()
