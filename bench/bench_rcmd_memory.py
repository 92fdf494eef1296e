"""CLRCMD loss step, dense vs memory-saving pairwise RCMD (CLRCMD Table 3), one process per size.

Each (batch, tokens, form) runs in a fresh interpreter so the peak-RSS increase is not hidden by
memory an earlier size left in the allocator. Run: ``for b in 32 128; do for L in 32 128; do for
s in 0 1; do OMP_NUM_THREADS=1 .venv/bin/python bench/bench_rcmd_memory.py $b $L $s; done; done;
done``. Token vectors are random (d = 384, MiniLM's width): only sizes matter here.
"""

import json
import resource
import sys
import time

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from models.similarity import rcmd_pairwise

b, L, sparse = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
torch.set_num_threads(1)
g = torch.Generator().manual_seed(b)
x, y = torch.randn(b, L, 384, generator=g), torch.randn(b, L, 384, generator=g)
m = torch.ones(b, L, dtype=torch.bool)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
xx, yy = x.clone().requires_grad_(), y.clone().requires_grad_()
logits = rcmd_pairwise(xx, m, yy, m, sparse=sparse) / 0.05
torch.nn.functional.cross_entropy(logits, torch.arange(b)).backward()
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(
    json.dumps(
        {
            "batch": b,
            "tokens": L,
            "rcmd": "memory-saving" if sparse else "dense",
            "seconds": round(dt, 3),
            "peak_rss_increase_mb": round(peak - base, 1),
        }
    )
)
