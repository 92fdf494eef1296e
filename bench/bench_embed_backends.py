"""Embed's encoder backends on real context units, one thread, side by side in one run.

Variants (all-MiniLM-L6-v2 unless --model, units truncated at 64 tokens, batches of 64):

* ``torch fp32``: ``models.encoders.encode`` in float32 (today's path without ``embed.bf16``);
* ``torch bf16``: the same under bf16 autocast (``embed.bf16``, the recipe's default; skipped
  on a CPU without bf16 units, where autocast emulates it);
* ``onnx fp32``: the transformer exported to ONNX (``torch.onnx.export``), ONNX Runtime's CPU
  provider with every graph optimisation, length-sorted batches, mean pooling as the model's;
* ``onnx int8``: that graph with ONNX Runtime's dynamic int8 quantisation (``quantize_dynamic``).

Per variant: units per CPU-s, its ratio to torch fp32, the smallest cosine of a unit's vector to
float32's, and the Spearman correlation of 20,000 random unit pairs' cosines with float32's
(what the closed-form labels are made of). The ONNX rows need ``pip install onnx onnxruntime``
(not a dependency of ctxsim: skipped without them).

Usage: ``python -m bench.bench_embed_backends --root ROOT --units 6000`` (ROOT: a run's
artefact root with its shard and contexts, e.g. the MedQuAD recipe's)
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import sole_manifest, write_results

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _units(root: Path, n: int) -> list[str]:
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.chunks import context_unit_index

    store = ArtefactStore(root)
    arts = {s: store.get(s, sole_manifest(root, s)["fingerprint"]) for s in ("shard", "contexts")}
    units = context_unit_index(arts["contexts"], arts["shard"], "chunk", 8)
    return units.texts(np.arange(min(n, len(units.ids))))


def _export(model: Any, tok: Any, out: Path) -> tuple[Path, Path]:
    """The transformer as ONNX (float32) and its dynamic int8 quantisation."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    class Hidden(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.m(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    fp32, int8 = out / "model.onnx", out / "model-int8.onnx"
    dummy = tok(["a sentence", "another one"], padding=True, return_tensors="pt")
    axes = {k: {0: "batch", 1: "tokens"} for k in (*INPUTS, "hidden")}
    torch.onnx.export(
        Hidden(model.float().eval()),
        tuple(dummy[k] for k in INPUTS),
        str(fp32),
        input_names=list(INPUTS),
        output_names=["hidden"],
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    return fp32, int8


def _onnx_encode(path: Path, tok: Any, texts: list[str], batch: int, dim: int) -> np.ndarray:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    order = np.argsort([len(t) for t in texts])
    out = np.empty((len(texts), dim), np.float32)
    for lo in range(0, len(texts), batch):
        idx = order[lo : lo + batch]
        b = tok(
            [texts[i] for i in idx],
            padding=True,
            truncation=True,
            max_length=64,
            return_tensors="np",
        )
        h = sess.run(None, {k: b[k].astype(np.int64) for k in INPUTS})[0]
        mask = b["attention_mask"][..., None].astype(np.float32)
        v = (h * mask).sum(1) / mask.sum(1)
        out[idx] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--units", type=int, default=6000)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--work", type=Path, default=Path("/tmp/ctxsim-embed-backends"))
    ap.add_argument("--name", default="embed_backends")
    ap.add_argument("--out-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch
    from scipy.stats import spearmanr

    from ctxsim.models.encoders import bf16_available, encode, load_encoder

    torch.set_num_threads(1)
    texts = _units(args.root, args.units)
    model = load_encoder(args.model, 64, "cpu")
    runs: dict[str, tuple[np.ndarray, float]] = {}

    def timed(name: str, fn: Any) -> None:
        fn(texts[:256])  # warm-up
        c0 = time.process_time()
        runs[name] = (fn(texts), time.process_time() - c0)
        print(name, f"{len(texts) / runs[name][1]:.1f} units/CPU-s", flush=True)

    timed("torch fp32", lambda t: encode(model, t, args.batch, bf16=False))
    bf16_units = bf16_available("cpu")
    if bf16_units:  # without the units autocast emulates bf16, slower than float32
        timed("torch bf16", lambda t: encode(model, t, args.batch, bf16=True))
    have_onnx = all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime"))
    if have_onnx:
        tok = model.tokenizer
        args.work.mkdir(parents=True, exist_ok=True)
        fp32, int8 = _export(model[0].auto_model, tok, args.work)
        dim = runs["torch fp32"][0].shape[1]
        for name, path in (("onnx fp32", fp32), ("onnx int8", int8)):
            timed(name, lambda t, p=path: _onnx_encode(p, tok, t, args.batch, dim))
    ref, ref_s = runs["torch fp32"]
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, len(texts), 20_000), rng.integers(0, len(texts), 20_000)
    want = np.einsum("nd,nd->n", ref[a], ref[b])
    rows = []
    for name, (emb, secs) in runs.items():
        rows.append(
            {
                "variant": name,
                "units_per_cpu_s": round(len(texts) / secs, 1),
                "x_torch_fp32": round(ref_s / secs, 2),
                "min_cos_to_fp32": round(float(np.einsum("nd,nd->n", emb, ref).min()), 5),
                "pair_cos_spearman_vs_fp32": round(
                    float(spearmanr(np.einsum("nd,nd->n", emb[a], emb[b]), want)[0]), 6
                ),
            }
        )
    meta = {
        "units": len(texts),
        "model": args.model,
        "batch": args.batch,
        "threads": 1,
        "onnx": "skipped (pip install onnx onnxruntime)" if not have_onnx else "measured",
        "bf16": "measured" if bf16_units else "skipped (the CPU has no bf16 units)",
        "command": "python -m bench.bench_embed_backends " + " ".join(sys.argv[1:]),
    }
    md, js = write_results(args.name, rows, meta=meta, out_dir=args.out_dir)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    main()
