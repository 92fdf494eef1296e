"""The `gencontexts` sampler on CPU: float32 vs bfloat16 weights, by batch size, against the
library a user would pick (transformers' ``generate``) and the naive way (one prompt at a time).

Reported per variant: CPU-seconds per sample (``time.process_time``, the median of interleaved
repeats), peak RSS growth, and how many samples equal the reference's (ctxsim float32 at batch 32,
the shipped default before): the sample cache and ``batch_size`` being a knob rely on a sample
depending on its seed only. ``--kept`` adds, at the largest batch, the sampler as it was
before finished rows left the decoding batch and the key/value cache was reserved (rows kept to
the last step, transformers' concatenating cache). ``generate`` draws from one global
generator, so its texts are other draws by construction (its count is not a defect; its speed
is the comparison).
Usage::

    .venv/bin/python -m bench.bench_sampler --queries 96 --k 4 --batches 32 128 384
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from bench.harness import peak_rss_mb, reset_peak_rss, write_results
from ctxsim.models.contextual import context_sampling
from ctxsim.models.contextual.context_sampling import (
    SamplingSettings,
    first_sentence,
    render,
    sample_texts,
)

#: book sentences when no queries parquet is given: the bundled sample's first sentences
SAMPLE_GLOB = "data/sample/*.jsonl"


def book_prompts(n: int, queries: Path | None) -> list[str]:
    """``n`` sentences to continue: a queries artefact's texts, or the bundled sample's."""
    if queries is not None:
        import pyarrow.parquet as pq

        return pq.read_table(queries, columns=["text"]).column("text").to_pylist()[:n]
    import json

    out: list[str] = []
    for f in sorted(Path().glob(SAMPLE_GLOB)):
        for line in f.read_text(encoding="utf-8").splitlines():
            for para in json.loads(line).get("paragraphs", []):
                out += [s.strip() + "." for s in para.split(".") if len(s.split()) >= 5]
            if len(out) >= n:
                return out[:n]
    return out


def hf_generate(
    model: Any, tok: Any, prompts: list[str], s: SamplingSettings, batch: int
) -> list[str]:
    """transformers' sampling: left-padded batches, one draw per row, first sentence kept."""
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    out: list[str] = []
    for lo in range(0, len(prompts), batch):
        enc = tok(prompts[lo : lo + batch], return_tensors="pt", padding=True)
        with torch.inference_mode():
            ids = model.generate(
                **enc,
                do_sample=True,
                max_new_tokens=s.max_new_tokens,
                temperature=s.temperature,
                top_p=s.top_p,
                top_k=s.top_k,
                pad_token_id=tok.pad_token_id,
            )
        new = ids[:, enc["input_ids"].shape[1] :]
        out += [first_sentence(t) for t in tok.batch_decode(new, skip_special_tokens=True)]
    return out


def rows_kept(run: Callable[[], list[str]]) -> list[str]:
    """``run`` with finished rows kept in the decoding batch to its last step, on transformers'
    concatenating cache."""
    with (
        mock.patch.object(context_sampling, "MIN_DECODE_ROWS", sys.maxsize),
        mock.patch.object(context_sampling, "RESERVE_CACHE", False),
    ):
        return run()


def main(argv: list[str] | None = None) -> None:
    from ctxsim.models.contextual.context_sampling import load_sampler_lm
    from ctxsim.models.registry import resolve_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--queries", type=int, default=96, help="sentences, each sampled --k times")
    ap.add_argument("--queries-parquet", type=Path, default=None)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 128, 384])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--naive-prompts", type=int, default=32, help="one-at-a-time: fewer")
    ap.add_argument("--name", default="sampler_bf16")
    ap.add_argument("--note", default="")
    ap.add_argument(
        "--kept", action="store_true", help="also: the sampler before (rows kept, cache grown)"
    )
    ap.add_argument("--out-dir", default=None, help="default bench/results")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    texts = book_prompts(args.queries, args.queries_parquet)
    prompts = [render("right", t) for t in texts for _ in range(args.k)]
    seeds = list(range(len(prompts)))
    s = SamplingSettings(24, 1.0, 0.95, 100)
    path = str(resolve_model(args.model))
    warn = logging.getLogger(__name__).warning
    models = {
        w: load_sampler_lm(path, "cpu", warn if w == "bfloat16" else None)
        for w in ("float32", "bfloat16")
    }

    # name -> (weights, n prompts, run): interleaved repeats, so load drifts hit every variant
    variants: dict[str, tuple[str, int, Callable[[int], list[str]]]] = {}
    for w, (lm, tok) in models.items():
        for b in args.batches:
            variants[f"ctxsim {w} batch {b}"] = (
                w,
                len(prompts),
                lambda n, lm=lm, tok=tok, b=b: sample_texts(lm, tok, prompts[:n], seeds[:n], s, b),
            )
        if args.kept:
            b = max(args.batches)
            variants[f"ctxsim {w} batch {b}, rows kept, cache grown (before)"] = (
                w,
                len(prompts),
                lambda n, lm=lm, tok=tok, b=b: rows_kept(
                    lambda: sample_texts(lm, tok, prompts[:n], seeds[:n], s, b)
                ),
            )
        variants[f"ctxsim {w} one at a time (naive)"] = (
            w,
            min(args.naive_prompts, len(prompts)),
            lambda n, lm=lm, tok=tok: sample_texts(lm, tok, prompts[:n], seeds[:n], s, 1),
        )
    lm32, tok32 = models["float32"]
    variants[f"transformers generate float32 batch {args.batches[0]}"] = (
        "float32",
        len(prompts),
        lambda n: hf_generate(lm32, tok32, prompts[:n], s, args.batches[0]),
    )
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    rss: dict[str, float] = dict.fromkeys(variants, 0.0)
    texts_of: dict[str, list[str]] = {}
    for _ in range(args.repeat):
        for name, (_, n, fn) in variants.items():
            reset_peak_rss()
            base = peak_rss_mb()
            t0 = time.process_time()
            got = fn(n)
            cpu[name].append(time.process_time() - t0)
            rss[name] = max(rss[name], peak_rss_mb() - base)
            texts_of.setdefault(name, got)
    ref = texts_of[f"ctxsim float32 batch {args.batches[0]}"]
    rows = []
    for name, (w, n, _) in variants.items():
        sec = statistics.median(cpu[name])
        same = sum(a == b for a, b in zip(texts_of[name], ref, strict=False))
        rows.append(
            {
                "variant": name,
                "weights": w,
                "samples": n,
                "cpu_s": round(sec, 1),
                "cpu_s_runs": ", ".join(f"{x:.1f}" for x in cpu[name]),
                "ms_per_sample": round(1000 * sec / n, 1),
                "same_as_reference": f"{same}/{n}",
                "empty": sum(1 for t in texts_of[name] if not t),
                "peak_rss_growth_mb": round(rss[name], 1),
            }
        )
    meta = {
        "command": "python -m bench.bench_sampler "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "workload": f"{len(texts)} book sentences x K {args.k}, max_new_tokens 24, top_p 0.95, "
        f"top_k 100, the `right` template; {args.threads} thread(s)",
        "reference": f"ctxsim float32 batch {args.batches[0]}",
        "note": args.note,
    }
    write_results(args.name, rows, meta, out_dir=args.out_dir)


if __name__ == "__main__":
    main()
