"""Benchmark: the `evaluate` stage in bf16 against float32 on a CPU with bf16 units.

`ctxsim adapt` evaluates three systems (the adapted model, the download, TF-IDF) on every dev
task of ``--eval-dir`` at 256 tokens; on MedQuAD that was as many CPU-seconds as the student's
training. This runs the same ``evaluate_model`` call twice, float32 (the default) and
``bf16_cpu``, one torch thread each, and reports the CPU-seconds of each, every dev figure of
every system side by side, and the paired interval of the adapted model against the download in
each arm: bf16 is worth its speed only if the figures and the intervals do not move.

Run: ``.venv/bin/python -m bench.bench_evaluate_bf16 --model DIR --eval-dir DIR``
(``--backbone minilm``: the download the card compares with).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.common import add_evaluation_args, timed_evaluation
from bench.harness import command_line, peak_rss_mb, write_results

#: each task format's primary metric (the one the card and the paired intervals lead with)
PRIMARY = {"pairs": "ap", "retrieval": "ndcg_at_10"}


def figures(result: dict[str, Any]) -> dict[tuple[str, str], float]:
    """(task, system) -> the primary metric, from ``evaluate_model``'s domain result."""
    out = {}
    for section, metric in PRIMARY.items():
        for task, by_system in result.get("domain", {}).get(section, {}).items():
            for system, scores in by_system.items():
                out[(task, system)] = float(scores[metric])
    return out


def intervals(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """task -> the adapted model against the download on the primary metric."""
    out = {}
    for key, ci in result.get("domain", {}).get("bootstrap", {}).items():
        section, rest = key.split(".", 1)
        task, metric, versus = rest.rsplit(".", 2)
        if PRIMARY.get(section) == metric and versus == "surrogate-vs-backbone":
            out[task] = ci
    return out


def run_arm(model: str, eval_dir: str, backbone: str, bf16: bool, max_len: int) -> dict:
    cpu, wall, res = timed_evaluation(model, eval_dir, backbone, max_len, bf16_cpu=bf16)
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "figures": figures(res),
        "intervals": intervals(res),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_evaluation_args(ap)
    ap.add_argument("--name", default="evaluate_bf16")
    ap.add_argument("--out-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    from ctxsim.models.encoders import bf16_available

    arms = {"float32": False, "bf16": True}
    got = {
        name: run_arm(a.model, a.eval_dir, a.backbone, bf16, a.max_seq_length)
        for name, bf16 in arms.items()
    }
    base, fast = got["float32"], got["bf16"]
    rows = [
        {
            "arm": name,
            "CPU-s": round(r["cpu_s"], 1),
            "wall s": round(r["wall_s"], 1),
            "x float32 (CPU-s)": round(base["cpu_s"] / r["cpu_s"], 2),
        }
        for name, r in got.items()
    ]
    fig_rows = [
        {
            "task": task,
            "system": system,
            "float32": round(v, 2),
            "bf16": round(fast["figures"][(task, system)], 2),
            "bf16 - float32": round(fast["figures"][(task, system)] - v, 3),
        }
        for (task, system), v in base["figures"].items()
    ]
    ci_rows = [
        {
            "task": task,
            "arm": arm,
            "adapted - download": round(got[arm]["intervals"][task]["delta"], 2),
            "CI": f"[{got[arm]['intervals'][task]['ci_low']:+.2f}, "
            f"{got[arm]['intervals'][task]['ci_high']:+.2f}]",
        }
        for task in base["intervals"]
        for arm in arms
    ]
    meta = {
        "command": command_line("bench.bench_evaluate_bf16", argv),
        "model": a.model,
        "eval_dir": a.eval_dir,
        "max_seq_length": a.max_seq_length,
        "bf16 units": bf16_available("cpu"),
        "torch threads": 1,
        "peak RSS MB": round(peak_rss_mb()),
    }
    tables = {"dev figures (primary metric)": fig_rows, "adapted against the download": ci_rows}
    for path in write_results(a.name, rows, meta, a.out_dir, tables):
        print(path)
    for r in rows + fig_rows + ci_rows:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
