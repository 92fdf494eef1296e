"""The physical limit of scoring on this CPU: the scorer's FLOPs per labelled pair divided by the
machine's measured matmul FLOP/s (one torch thread, float32 and dynamic int8; ``--books-generated``:
bfloat16, the LM route's shipped workload).

FLOPs per pair = 2 x (non-embedding parameters) x tokens per labelled pair (+ the vocabulary
head on target tokens only, as the engine computes it); tokens per pair from
bench/results/prefix_share_books.json (the books config's windows, counted). Matmul speed: a
(4096 x d) @ (d x 4d) product, the shape of the scorer's MLP at the engine's token budget,
timed in CPU seconds (time.process_time; a shared machine slows it, so this limit is if
anything pessimistic). Usage::

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_flops_limit
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_flops_limit --books-generated

``--books-generated``: the right term of configs/books_generated.yaml with bfloat16 weights, its
work per window measured by bench_score (bench/results/score_lm_route_bf16.json: target tokens
per window, tokens run per target token, engine CPU-s) and its windows and other stages' CPU-s
per labelled pair by bench_pipeline (bench/results/pipeline_books_generated_bf16.json, the
sampler in bf16 at batch 256), against this CPU's bfloat16 rate on each of the scorer's matrix
shapes. It answers whether 20,000 labelled pairs per CPU-hour all-in is reachable by engineering
the engine, with the same model and labels.
"""

from __future__ import annotations

import json
import sys

import torch

from bench.common import FF, TOKENS, VOCAB, D, flops_per_s, matmul_speeds
from bench.harness import RESULTS_DIR, write_results

NON_EMB_PARAMS = 134.5e6 - VOCAB * D  # tied embedding / head


#: SmolLM2-135M's matrix products per token: (rows, in, out) x how many per layer / per model
LAYER_SHAPES = {"q, o": (D, D, 2), "k, v": (D, 192, 2), "gate, up": (D, FF, 2), "down": (FF, D, 1)}
LAYERS = 30


def bf16_rates(tokens: int = TOKENS, bursts: int = 8) -> dict[str, float]:
    """FLOP per CPU-second of each of the scorer's products in bfloat16 (AMX/AVX512-BF16 where
    the CPU has them), and of the vocabulary head: the best of ``bursts`` short runs, since a
    shared machine only ever slows a run (one shape read 420-1,080 GFLOP/CPU-s from run to run
    here) and the limit wants what the CPU can do."""
    out = {}
    shapes = {k: (i, o) for k, (i, o, _) in LAYER_SHAPES.items()} | {"head": (D, VOCAB)}
    with torch.inference_mode():
        for name, (i, o) in shapes.items():
            x = torch.randn(tokens, i, dtype=torch.bfloat16)
            w = torch.randn(o, i, dtype=torch.bfloat16)
            f = 2.0 * tokens * i * o
            out[name] = max(
                flops_per_s(lambda x=x, w=w: torch.nn.functional.linear(x, w), f, 0.6)
                for _ in range(bursts)
            )
    return out


#: the bench_pipeline result and run whose other stages (all but score) are charged per pair
PIPELINE_RUN = "pipeline_books_generated_bf16:bg-q500-bf16-b256"


def books_generated(
    rates: dict[str, float], pipeline_run: str = PIPELINE_RUN
) -> tuple[list[dict], dict]:
    """Achieved FLOP/s of the bf16 engine on books_generated's windows, and the labelled pairs
    per CPU-hour all-in if every product of the scorer ran at this CPU's matmul rate, the other
    stages costing what ``pipeline_run`` (``RESULT:RUN`` of bench_pipeline) measured."""
    eng = json.loads((RESULTS_DIR / "score_lm_route_bf16.json").read_text())
    row = next(r for r in eng["rows"] if r["engine"].startswith("bf16 weights"))
    name, run_id = pipeline_run.split(":", 1)
    pipe = json.loads((RESULTS_DIR / f"{name}.json").read_text())
    run = next(r for r in pipe["rows"] if r["run"] == run_id)
    stages = [s for s in pipe["tables"]["stages"] if s["run"] == run["run"]]
    score = next(s for s in stages if s["stage"] == "score")
    pairs = run["labelled_pairs"]
    windows_per_pair = score["rows"] / pairs
    other_cpu_s = (run["cpu_s_to_label"] - score["cpu_s"]) / pairs
    target_per_window = row["target_tok_per_cpu_s"] * row["engine_cpu_s"] / row["windows"]
    run_per_window = target_per_window * row["tokens_run_per_target_tok"]
    # CPU-s per window at the matmul rates: each product's FLOPs over its own measured rate
    per_tok = {k: 2.0 * i * o * n * LAYERS for k, (i, o, n) in LAYER_SHAPES.items()}
    flops_w = sum(per_tok.values()) * run_per_window + 2.0 * D * VOCAB * target_per_window
    floor_s = sum(per_tok[k] / rates[k] for k in per_tok) * run_per_window
    floor_s += 2.0 * D * VOCAB * target_per_window / rates["head"]
    measured_s = row["engine_cpu_s"] / row["windows"]
    budget = 3600 / 20_000 - other_cpu_s  # score CPU-s per pair that 20,000 pairs/h would allow
    rows = []
    stage_s = score["cpu_s"] / score["rows"]  # the pipeline run's score stage, all of it
    for label, s_w in (
        ("measured (bench_score)", measured_s),
        (f"score stage of {run_id} (pipeline)", stage_s),
        ("every product at matmul rate", floor_s),
    ):
        score_pair = s_w * windows_per_pair
        rows.append(
            {
                "scorer": label,
                "cpu_ms_per_window": round(1e3 * s_w, 2),
                "gflop_per_window": round(flops_w / 1e9, 2),
                "gflop_per_cpu_s": round(flops_w / s_w / 1e9, 1),
                "score_cpu_s_per_pair": round(score_pair, 4),
                "other_cpu_s_per_pair": round(other_cpu_s, 4),
                "pairs_per_cpu_hour_all_in": round(3600 / (score_pair + other_cpu_s)),
            }
        )
        print(rows[-1], flush=True)
    meta = {
        "workload": f"books_generated right term, bf16 weights: {target_per_window:.1f} target "
        f"tokens and {run_per_window:.1f} tokens run per window, {windows_per_pair:.1f} windows "
        f"and {other_cpu_s:.4f} CPU-s of other stages (sampler included) per labelled pair",
        "bf16_gflop_per_cpu_s": {k: round(v / 1e9, 1) for k, v in rates.items()},
        "engine_share_of_matmul_floor": round(floor_s / measured_s, 3),
        "other_stages_from": pipeline_run,
        "score_cpu_s_per_pair_for_20000": round(budget, 4),
        "gflop_per_cpu_s_needed_for_20000": round(flops_w * windows_per_pair / budget / 1e9, 1),
    }
    return rows, meta


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(1)
    if "--books-generated" in argv:  # [--pipeline RESULT:RUN] [--name NAME]
        opt = dict(zip(argv, argv[1:], strict=False))  # each flag and the word after it
        rows, meta = books_generated(bf16_rates(), opt.get("--pipeline", PIPELINE_RUN))
        meta |= {"command": "python -m bench.bench_flops_limit " + " ".join(argv)}
        write_results(opt.get("--name", "scorer_flops_limit_books_generated"), rows, meta=meta)
        return
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
