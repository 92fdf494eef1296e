"""Benchmark: the `evaluate` stage's cache of its baselines' encodings (`evaluate.cache`).

`ctxsim adapt` scores the adapted model, the download and TF-IDF on every dev task; the
download's encodings are the same on every run, and the stage keeps them under
ROOT/_cache/evaluate. This runs the same ``evaluate_model`` call (the recipe's: bf16 where the
CPU has the units, 256 tokens, one torch thread) without the cache (before), with an empty cache
(the first run on a root: it encodes and writes) and with the cache that call left (every later
run), the uncached and warm arms twice, interleaved, since this VM's speed drifts. It reports
CPU-seconds per arm, each arm against the uncached mean, and whether every arm's result is the
same JSON as the uncached one (it must be: the cache only saves work).

Run: ``.venv/bin/python -m bench.bench_evaluate_cache --model DIR --eval-dir DIR``
(``--backbone minilm``: the download the card compares with; ``--similarities cosine,rcmd``:
the STS sets' similarities, as the paper route's evaluation).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from bench.common import add_evaluation_args, timed_evaluation
from bench.harness import command_line, peak_rss_mb, write_results

#: (arm, what the cache folder holds before it) in the order they run
ARMS = (
    ("no cache (before)", None),
    ("cache, empty (a root's first run)", "empty"),
    ("cache, filled (every later run)", "filled"),
    ("no cache (before), again", None),
    ("cache, filled, again", "filled"),
)


def run_arm(
    model: str, eval_dir: str, backbone: str, cache: Path | None, max_len: int, sims: list[str]
) -> tuple[float, float, str]:
    """(CPU-s, wall s, the result as sorted JSON) of one evaluation in bf16."""
    cpu, wall, res = timed_evaluation(
        model, eval_dir, backbone, max_len, similarities=sims, bf16_cpu=True, encoding_cache=cache
    )
    return cpu, wall, json.dumps(res, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_evaluation_args(ap)
    ap.add_argument(
        "--similarities", default="cosine", help="of the STS sets, comma-separated: cosine,rcmd"
    )
    ap.add_argument("--name", default="evaluate_cache")
    ap.add_argument("--out-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    from ctxsim.models.encoders import bf16_available

    folder = Path(tempfile.mkdtemp(prefix="bench-evaluate-cache-"))
    got: list[tuple[str, float, float, str, int | str]] = []
    try:
        for arm, state in ARMS:
            if state == "empty":
                shutil.rmtree(folder, ignore_errors=True)
            cache = folder if state else None
            sims = a.similarities.split(",")
            cpu, wall, result = run_arm(
                a.model, a.eval_dir, a.backbone, cache, a.max_seq_length, sims
            )
            files = len(list(folder.glob("*.npy"))) if cache and folder.is_dir() else "-"
            got.append((arm, cpu, wall, result, files))
            print(arm, round(cpu, 1), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    plain = [cpu for arm, cpu, *_ in got if arm.startswith("no cache")]
    base = sum(plain) / len(plain)
    reference = got[0][3]
    rows = [
        {
            "arm": arm,
            "CPU-s": round(cpu, 1),
            "wall s": round(wall, 1),
            "x the uncached mean (CPU-s)": round(base / cpu, 2),
            "cache files after": files,
            "result identical to the uncached one": result == reference,
        }
        for arm, cpu, wall, result, files in got
    ]
    meta = {
        "command": command_line("bench.bench_evaluate_cache", argv),
        "model": a.model,
        "eval_dir": a.eval_dir,
        "max_seq_length": a.max_seq_length,
        "similarities (STS sets)": a.similarities,
        "bf16 units": bf16_available("cpu"),
        "torch threads": 1,
        "peak RSS MB": round(peak_rss_mb()),
    }
    for path in write_results(a.name, rows, meta, a.out_dir):
        print(path)
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
