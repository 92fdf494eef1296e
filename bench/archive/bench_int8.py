"""Dynamic int8 quantisation of the causal scorer (models/contextual/quantize.py) against float32.

Real book windows [c<, s, c>] scored with the packaged SmolLM2-135M in both precisions, the
books config's way (the left term, and the left term as PMI: minus the same target scored
without s). The two variants run interleaved chunk by chunk in one process on one torch thread,
so machine load hits both alike; cost is CPU seconds (time.process_time) per window, the
ratio is what to read (the machine is shared). Agreement: Spearman of the int8 scores with the
float32 ones. Usage::

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.archive.bench_int8 --windows 300 --chunk 25
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

from bench.common import book_windows, make_scorer
from bench.harness import write_results
from ctxsim.models.contextual.generator import CausalPrefixScorer
from ctxsim.models.contextual.quantize import quantize_int8
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--windows", type=int, default=300)
    ap.add_argument("--chunk", type=int, default=25)
    ap.add_argument("--books", type=int, default=2)
    ap.add_argument("--budget", type=int, default=4096)
    ap.add_argument("--name", default="int8_smollm2")
    ap.add_argument(
        "--variants",
        default="int8_tensor_head,int8_channel",
        help="int8_tensor / int8_channel (scales per tensor / per output channel); _nodown: MLP "
        "down projections stay float32; _mlp: attention projections stay float32; _head: the "
        "vocabulary head quantised too",
    )
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    w = book_windows(a.books)
    pick = np.sort(rng.permutation(len(w["sentence"]))[: a.windows])
    lefts = [w["left"][i] for i in pick]
    sents = [w["sentence"][i] for i in pick]
    rights = [w["right"][i] for i in pick]
    fp32 = make_scorer("causal", "smollm2-135m", None)
    assert isinstance(fp32, CausalPrefixScorer)
    variants = {"fp32": fp32}
    for v in a.variants.split(","):
        per_channel, head = v.startswith("int8_channel"), v.endswith("_head")
        skip = ("down_proj",) if "_nodown" in v else ()
        skip += ("self_attn",) if "_mlp" in v else ()
        variants[v] = quantize_int8(
            copy.deepcopy(fp32), per_channel=per_channel, head=head, skip=skip
        )
    engines = {
        name: ScoringEngine(sc, EngineConfig(token_budget=a.budget))
        for name, sc in variants.items()
    }
    out: dict[str, dict[str, list[np.ndarray]]] = {k: {"left": [], "null": []} for k in engines}
    cpu = dict.fromkeys(engines, 0.0)
    for start in range(0, len(pick), a.chunk):
        sl = slice(start, start + a.chunk)
        for name, eng in engines.items():  # interleaved: both see the same load
            c0 = time.process_time()
            res = eng.score(lefts[sl], sents[sl], rights[sl], ("left",))
            null = eng.score(lefts[sl], [""] * len(sents[sl]), rights[sl], ("left",))
            cpu[name] += time.process_time() - c0
            out[name]["left"].append(res["left"])
            out[name]["null"].append(null["left"])
    n = len(pick)
    ref = {k: np.concatenate(v) for k, v in out["fp32"].items()}
    rows: list[dict[str, Any]] = []
    for name in engines:
        got = {k: np.concatenate(v) for k, v in out[name].items()}
        pmi, ref_pmi = got["left"] - got["null"], ref["left"] - ref["null"]
        n_params = sum(p.numel() for p in fp32.model.parameters())
        rows.append(
            {
                "scorer": name,
                "windows": n,
                "cpu_s_per_window": round(cpu[name] / n, 4),
                "speedup_vs_fp32": round(cpu["fp32"] / cpu[name], 2),
                "spearman_left_vs_fp32": round(float(spearmanr(got["left"], ref["left"])[0]), 4),
                "spearman_pmi_left_vs_fp32": round(float(spearmanr(pmi, ref_pmi)[0]), 4),
                "max_abs_diff_left": round(float(np.max(np.abs(got["left"] - ref["left"]))), 4),
                "n_params_m": round(n_params / 1e6, 1),
            }
        )
        print(rows[-1], flush=True)
    write_results(
        a.name,
        rows,
        meta={
            "command": "python -m bench.archive.bench_int8 " + " ".join(argv or sys.argv[1:]),
            "model": "smollm2-135m (packaged GGUF Q4_1 dequantised to float32)",
            "torch_threads": 1,
            "cost": "time.process_time per window, one window = the left term + its null pass "
            "(score.pmi [left], as configs/books.yaml); fp32 and int8 interleaved per chunk",
            "load_caveat": "shared machine (load ~10 on 2 cores): absolute CPU seconds are "
            "inflated; the ratio between the interleaved variants is the figure to read",
        },
    )


if __name__ == "__main__":
    main()
