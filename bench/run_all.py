"""Run every stage benchmark in turn (``make bench`` = ``--quick``); each writes bench/results/."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

BENCHES = [
    "bench.bench_shard",
    "bench.bench_retrieve",
    "bench.bench_screen",
    "bench.bench_score",
    "bench.bench_select",
    "bench.bench_wordpiece",
    "bench.bench_label",
    "bench.bench_evaluate",
    "bench.bench_scaling",
    "bench.bench_explain_topk",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small inputs (minutes, not hours)")
    ap.add_argument("--only", nargs="*", default=None, help="module names to run")
    args = ap.parse_args()
    failed = []
    for mod in args.only or BENCHES:
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", mod] + (["--quick"] if args.quick else [])
        print(f"== {' '.join(cmd)}", flush=True)
        if subprocess.call(cmd) != 0:
            failed.append(mod)
        print(f"== {mod}: {time.perf_counter() - t0:.0f}s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
