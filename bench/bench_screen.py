"""Benchmark `screen`: cached last-layer scoring (Sec. 3.3) vs re-running the BiLSTM per candidate.

A randomly initialised discriminator (speed does not depend on the weights) scores one query
against N candidate contexts of real book sentences: (a) ours — context parts cached once, one
tanh layer per pair; (b) naive — the full model (BiLSTM over c<, s, c> + head) per candidate,
batched. Also the one-off cost of building the cache, for 10% and 100% of the sentence sample.

    .venv/bin/python -m bench.bench_screen [--quick]
"""

# ruff: noqa: B023  (closures are timed inside the loop iteration that defines them)
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from bench.common import load_paragraphs
from bench.harness import median, timeit, traced_peak, write_results
from ctxsim.models.contextual.discriminator import (
    CoherenceDiscriminator,
    DiscriminatorConfig,
    ScratchTokenizer,
    encode_sequences,
    encode_texts,
    pad_batch,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="hidden 64, 20K sentences")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    import blingfire

    n_sent = 20_000 if args.quick else 60_000
    hidden, head = (64, 64) if args.quick else (300, 300)
    sents: list[str] = []
    for p in load_paragraphs(3 if args.quick else 8):
        sents.extend(s for s in blingfire.text_to_sentences(p).split("\n") if s.strip())
        if len(sents) >= n_sent:
            break
    sents = sents[:n_sent]
    tok = ScratchTokenizer.build(sents, 30_000, 2)
    toks = encode_texts(tok.encode, sents, 48)
    model = CoherenceDiscriminator(
        DiscriminatorConfig(len(tok), emb_dim=hidden, hidden=hidden, head_hidden=head)
    ).eval()
    rows, cache_rows = [], []
    for frac in (0.1, 1.0):
        n = int(len(toks) * frac)
        t0 = time.perf_counter()
        reps = encode_sequences(model, toks[:n], 512)
        with torch.no_grad():
            left, right = torch.from_numpy(reps[:-2]), torch.from_numpy(reps[2:])
            ctx_part = model.context_part(left, right).numpy()
        cache_s = time.perf_counter() - t0
        cache_rows.append(
            {
                "fraction": frac,
                "sentences": n,
                "cache_build_s": round(cache_s, 2),
                "sentences_per_s": round(n / cache_s, 1),
                "cache_mb": round(ctx_part.nbytes / 2**20, 1),
            }
        )
        print(cache_rows[-1], flush=True)
        n_cand = min(len(ctx_part), 20_000)
        rng = np.random.default_rng(0)
        cand = rng.choice(len(ctx_part), n_cand, replace=False)
        q = toks[int(rng.integers(len(toks)))]

        def cached() -> np.ndarray:
            with torch.no_grad():
                qp = model.centre_part(torch.from_numpy(encode_sequences(model, [q])))
                return model.combine(torch.from_numpy(ctx_part[cand]), qp).numpy()

        n_naive = min(n_cand, 2000)  # the naive way is slow: time a slice, report per candidate

        def naive() -> np.ndarray:
            out = []
            with torch.no_grad():
                for lo in range(0, n_naive, 256):
                    c = cand[lo : min(lo + 256, n_naive)]
                    out.append(
                        model(
                            pad_batch([toks[i] for i in c]),
                            pad_batch([q] * len(c)),
                            pad_batch([toks[i + 2] for i in c]),
                        ).numpy()
                    )
            return np.concatenate(out)

        t_c = median(timeit(cached, args.repeat, 1))
        t_n = median(timeit(naive, max(1, args.repeat - 2), 0))
        with traced_peak() as pc:
            a = cached()
        with traced_peak() as pn:
            b = naive()
        err = float(np.abs(a[:n_naive] - b).max())
        per_c, per_n = t_c / n_cand, t_n / n_naive
        base = {"fraction": frac, "sentences": n, "hidden": hidden, "head_hidden": head}
        rows.append(
            {
                **base,
                "method": "ours (cached reps, last layer)",
                "candidates": n_cand,
                "candidates_per_s": round(1 / per_c),
                "speedup": round(per_n / per_c, 1),
                "peak_traced_mb": round(pc.peak_mb, 1),
                "max_abs_diff": err,
            }
        )
        rows.append(
            {
                **base,
                "method": "naive (BiLSTM per candidate, batched 256)",
                "candidates": n_naive,
                "candidates_per_s": round(1 / per_n),
                "speedup": 1.0,
                "peak_traced_mb": round(pn.peak_mb, 1),
                "max_abs_diff": 0.0,
            }
        )
        print(json.dumps(rows[-2:]), flush=True)
    write_results(
        "screen" + ("_quick" if args.quick else ""),
        rows,
        {
            "command": "python -m bench.bench_screen" + (" --quick" if args.quick else ""),
            "torch_threads": 1,
        },
        tables={"cache_build": cache_rows},
    )


if __name__ == "__main__":
    main()
