"""CLRCMD loss step, dense vs memory-saving pairwise RCMD (CLRCMD Table 3), a process per size.

Each (batch, tokens, form) runs in a fresh interpreter, so the peak-RSS increase is not hidden by
memory an earlier size left in the allocator (``bench_evaluate``'s in-process rows are). Token
vectors are random (d = 384, MiniLM's width): only sizes matter. Run:
``OMP_NUM_THREADS=1 .venv/bin/python -m bench.archive.bench_rcmd_memory``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from bench.common import loss_step
from bench.harness import write_results


def one(b: int, L: int, sparse: bool) -> dict:
    torch.set_num_threads(1)
    step = loss_step(b, L, 384, sparse)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    step()
    dt = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "batch": b,
        "tokens": L,
        "rcmd": "memory-saving" if sparse else "dense",
        "seconds": round(dt, 3),
        "peak_rss_increase_mb": round(peak - base, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--tokens", default="32,128")
    ap.add_argument(
        "--one", nargs=3, type=int, metavar=("B", "L", "SPARSE"), help=argparse.SUPPRESS
    )
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], a.one[1], bool(a.one[2]))))
        return
    rows = []
    for b in map(int, a.batches.split(",")):
        for L in map(int, a.tokens.split(",")):
            for sparse in (0, 1):
                mod = "bench.archive.bench_rcmd_memory"
                cmd = [sys.executable, "-m", mod, "--one", str(b), str(L)]
                out = subprocess.run(
                    [*cmd, str(sparse)], capture_output=True, text=True, check=True
                )
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(rows[-1], flush=True)
    meta = {
        "command": "python -m bench.archive.bench_rcmd_memory " + " ".join(sys.argv[1:]),
        "what": "forward + backward of the CLRCMD contrastive loss over B x B pairwise RCMD "
        "from random token vectors (d 384), one fresh process per row",
    }
    write_results("evaluate_rcmd_memory", rows, meta)


if __name__ == "__main__":
    main()
