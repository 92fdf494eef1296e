"""`train`'s speed on CPU: the in-domain scorer's training (the `context` objective: each corpus
sentence with its next 8 sentences, MultipleNegativesRankingLoss) as the trainer runs it, in
float32, in bf16 autocast (the default where the CPU has bf16 units), in bf16 with
``torch.compile`` (the trainer's ``torch_compile``), with length-grouped batches
(``train.context_batches: length``), with the plain-matmul attention (``train.attention:
eager``), without dropout (``train.dropout: 0``), with dropout masks drawn from bytes
(``train.dropout_masks: bytes``; its attention keeps bf16 probabilities, and an arm adds
the float32 mask as before, which makes them float32) and with the lowest layers fixed
(``train.freeze_layers``), each in a fresh process.

Per arm: CPU-seconds per step once warm (the median of the steps after ``--warmup``), the first
steps' CPU (compilation included), the whole training's CPU, peak RSS, and the loss after the
last step (compiled and eager numerics should agree), the tokens a step feeds the model
(padding included) against those of its texts, and the step's matmul FLOPs per CPU-second
against this machine's rate on the encoder's MLP matmul, measured in the same run (how far the
step is from the arithmetic's speed). Examples come from a finished run's shard
(``--root/--run``), built by the objective's own functions, so the batches have the recipe's
shape (sentences up to 40 tokens against 8-sentence contexts up to 128).

    python -m bench.bench_train_speed --root R --run RUN [--steps 40] [--warmup 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from bench.harness import run_artefacts, run_isolated, write_results

#: arm -> (bf16, torch_compile, batches, attention kernel, dropout: None keeps the model's,
#: lowest layers fixed, dropout masks[, train.unpad])
_BF16_EAGER = (True, False, "random", "eager")
_FLOAT32 = (False, False, "random")
ARMS = {
    "float32 eager": (False, False, "random", "sdpa", None, 0, "torch"),
    "float32, eager attention, dropout masks from bytes (the recipe's without bf16 units)": (
        *_FLOAT32,
        "eager",
        None,
        0,
        "bytes",
    ),
    "float32, sdpa attention, dropout masks from bytes": (*_FLOAT32, "sdpa", None, 0, "bytes"),
    "float32, eager attention, dropout masks from bytes, unpadded": (
        *_FLOAT32,
        "eager",
        None,
        0,
        "bytes",
        True,
    ),
    "bf16 eager (the default)": (True, False, "random", "sdpa", None, 0, "torch"),
    "bf16 + torch.compile": (True, True, "random", "sdpa", None, 0, "torch"),
    "bf16, length-grouped batches": (True, False, "length", "sdpa", None, 0, "torch"),
    "bf16, eager attention (the recipe's)": (*_BF16_EAGER, None, 0, "torch"),
    "bf16, eager attention, dropout masks from bytes": (*_BF16_EAGER, None, 0, "bytes"),
    "bf16, eager attention, dropout masks from bytes, unpadded": (
        *_BF16_EAGER,
        None,
        0,
        "bytes",
        True,
    ),
    "bf16, eager attention, dropout masks from bytes, float32 probabilities (before)": (
        *_BF16_EAGER,
        None,
        0,
        "bytes, float32 probabilities",
    ),
    "bf16, no dropout": (True, False, "random", "sdpa", 0.0, 0, "torch"),
    "bf16, no dropout, eager attention": (*_BF16_EAGER, 0.0, 0, "torch"),
    "bf16, eager attention, 2 lowest layers fixed": (*_BF16_EAGER, None, 2, "torch"),
    "bf16, eager attention, 3 lowest layers fixed": (*_BF16_EAGER, None, 3, "torch"),
}


def context_examples(root: str, run: str, n: int, width: int, seed: int) -> dict[str, list[str]]:
    """``n`` (sentence, its next ``width`` sentences) examples of a finished run's corpus."""
    from ctxsim.models.training.objectives.context import right_contexts, sample_with_context

    _, arts = run_artefacts(root, run)
    shard = arts["shard"].read_table(["sent_id", "section_id", "text"])
    sid = shard.column("sent_id").to_numpy()
    sec = shard.column("section_id").to_numpy()
    texts = shard.column("text").to_pylist()
    picked = sample_with_context(sid, sec, n, seed)
    ctx = right_contexts(sid, sec, texts, picked.tolist(), width)
    row = {s: i for i, s in enumerate(sid.tolist())}
    anchors = [texts[row[s]] for s in picked.tolist()]
    return {"anchor": anchors, "positive": [c or "" for c in ctx]}


def train_flops(
    batch: int, length: int, cfg: Any, frozen: int = 0, real: int | None = None
) -> float:
    """FLOPs of one forward and backward of a BERT-shaped encoder over ``batch`` x ``length``
    tokens (padding included): 3x the forward's matmuls (projections, MLP, attention's two
    products) of a trained layer, 1x of each of the ``frozen`` lowest (no backward), less the
    input gradient of the first trained layer's query, key and value projections (its input
    needs none); the embeddings' lookups and the pooling are not matmuls. With ``real`` (an
    unpadded stack's real tokens) the projections and MLP count those alone, the attention's
    products still the padded shape."""
    d, ff, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    weights = 2 * (4 * d * d + 2 * d * ff)
    passes = 3 * (layers - frozen) + frozen
    tokens = batch * length if real is None else real
    linear = tokens * (passes * weights - (6 * d * d if frozen else 0))
    return 1.0 * linear + batch * length * passes * 4 * length * d


def matmul_rates(d: int, ff: int, threads: int) -> dict[str, float]:
    """FLOP per CPU-second of this machine on the encoder's MLP matmul (4,096 tokens x d x ff),
    float32 and under bf16 autocast: the limit a training step's FLOPs are held against."""
    import torch

    from bench.common import flops_per_s

    torch.set_num_threads(threads)
    x, lin = torch.randn(4096, d), torch.nn.Linear(d, ff, bias=False)
    flops = 2.0 * 4096 * d * ff
    with torch.inference_mode():
        fp32 = flops_per_s(lambda: lin(x), flops)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = flops_per_s(lambda: lin(x), flops)
    return {"float32": fp32, "bf16": bf16}


def _float32_probabilities() -> None:
    """The byte-mask attention as it was: its mask added as float32 to bf16 scores, so the
    softmax, the dropout and their backward run on float32 probabilities (this process only:
    each arm runs in its own)."""
    from ctxsim.models.training import dropout as cheap

    cheap._in_dtype = lambda mask, dtype: mask


def train_arm(
    examples: dict[str, list[str]],
    model: str,
    bf16: bool,
    compile_: bool,
    batches: str,
    steps: int,
    batch: int,
    threads: int,
    attention: str = "sdpa",
    dropout: float | None = None,
    frozen: int = 0,
    masks: str = "torch",
    max_seq_length: int = 128,
    unpad: bool = False,
) -> dict[str, Any]:
    """One training in this (fresh) process: CPU-seconds after each step, the last loss, and
    the tokens the model was fed (padding included) and of them real."""
    import tempfile

    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from transformers import TrainerCallback

    from ctxsim.models.training.sentence_encoder import build_student

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    float32_probs = masks == "bytes, float32 probabilities"
    st = build_student(
        model,
        max_seq_length,
        "cpu",
        dropout,
        attention=attention,
        freeze_layers=frozen,
        dropout_masks="bytes" if float32_probs else masks,
        unpad=unpad,
    )
    if float32_probs:
        _float32_probabilities()
    ticks: list[float] = []
    logged: list[float] = []
    fed = {"tokens": 0, "real": 0, "flops": 0.0}
    pad, cfg = st.tokenizer.pad_token_id, st[0].auto_model.config

    def count(_module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            real = int((ids != pad).sum())
            fed["tokens"] += ids.numel()
            fed["real"] += real
            fed["flops"] += train_flops(*ids.shape, cfg, frozen, real if unpad else None)

    # the embeddings, not the model: sentence-transformers calls the model's forward directly
    st[0].auto_model.embeddings.register_forward_pre_hook(count, with_kwargs=True)
    sampler: Any = "batch_sampler"
    if batches == "length":
        from ctxsim.models.training.batches import length_batch_sampler

        sampler = length_batch_sampler(st.max_seq_length)

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            ticks.append(time.process_time())

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if logs and "loss" in logs:
                logged.append(float(logs["loss"]))

    with tempfile.TemporaryDirectory() as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp,
            max_steps=steps,
            per_device_train_batch_size=batch,
            learning_rate=1e-5,
            bf16=bf16,
            torch_compile=compile_,
            batch_sampler=sampler,
            save_strategy="no",
            logging_steps=steps,
            report_to=[],
            disable_tqdm=True,
            seed=0,
            data_seed=0,
            use_cpu=True,
        )
        trainer = SentenceTransformerTrainer(
            model=st,
            args=args,
            train_dataset=Dataset.from_dict(examples),
            loss=losses.MultipleNegativesRankingLoss(st),
            callbacks=[Clock()],
        )
        t0 = time.process_time()
        trainer.train()
        total = time.process_time() - t0
    per_step = [b - a for a, b in zip([t0, *ticks[:-1]], ticks, strict=True)]
    return {
        "per_step": per_step,
        "total": total,
        "loss": logged[-1] if logged else None,
        **fed,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--arms", nargs="*", default=list(ARMS))
    ap.add_argument(
        "--max-seq-lengths",
        nargs="*",
        type=int,
        default=[128],
        help="each arm at each token cap (train.max_seq_length); the first is the reference",
    )
    ap.add_argument("--name", default="train_speed")
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args(argv)
    from ctxsim.models.registry import resolve_model

    model = str(resolve_model(a.model))
    examples = context_examples(a.root, a.run, a.steps * a.batch, 8, 0)
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model)
    rates, _, _ = run_isolated(matmul_rates, cfg.hidden_size, cfg.intermediate_size, a.threads)
    rows: list[dict[str, Any]] = []
    base = ref = None
    caps = a.max_seq_lengths or [128]
    for arm, cap in [(arm, cap) for arm in a.arms for cap in caps]:
        bf16, comp, batches, attention, dropout, frozen, masks, *unpad = ARMS[arm]
        res, peak, _ = run_isolated(
            train_arm,
            examples,
            model,
            bf16,
            comp,
            batches,
            a.steps,
            a.batch,
            a.threads,
            attention,
            dropout,
            frozen,
            masks,
            cap,
            *unpad,
        )
        warm = statistics.median(res["per_step"][a.warmup :])
        first = sum(res["per_step"][: a.warmup])
        base = warm if arm == "float32 eager" and cap == caps[0] else base
        ref = warm if cap == caps[0] else ref
        rows.append(
            {
                "arm": arm if len(caps) == 1 else f"{arm}, {cap} tokens",
                "CPU-s per step (warm, median)": round(warm, 3),
                "x float32": round(base / warm, 2) if base else None,
                **({f"x {caps[0]} tokens": round(warm / ref, 3)} if len(caps) > 1 else {}),
                f"CPU-s of the first {a.warmup} steps": round(first, 1),
                f"CPU-s all {a.steps} steps": round(res["total"], 1),
                "peak RSS MB": round(peak),
                "loss after the last step": round(res["loss"], 4) if res["loss"] else None,
                "tokens fed a step": round(res["tokens"] / a.steps),
                "of them real": round(res["real"] / max(res["tokens"], 1), 3),
                "GFLOP a step": round(res["flops"] / a.steps / 1e9, 1),
                "GFLOP per CPU-s (warm)": round(res["flops"] / a.steps / warm / 1e9, 1),
                "share of the matmul rate": round(
                    res["flops"] / a.steps / warm / rates["bf16" if bf16 else "float32"], 2
                ),
            }
        )
        print(rows[-1], flush=True)
    meta = {
        "command": "python -m bench.bench_train_speed "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "run": f"{a.root}:{a.run}",
        "model": a.model,
        "steps": a.steps,
        "warmup steps": a.warmup,
        "batch": a.batch,
        "torch threads": a.threads,
        "examples": "the context objective's: a corpus sentence and its next 8 sentences, "
        f"cut at {', '.join(map(str, caps))} tokens",
        "matmul rate, GFLOP per CPU-s": {k: round(v / 1e9, 1) for k, v in rates.items()},
        "FLOPs": "3x the forward's matmuls over the tokens fed, padding included (an unpadded "
        "arm's projections and MLP over its real tokens only), 1x for fixed layers "
        "(train_flops); the share is against the arm's precision's matmul rate",
    }
    write_results(a.name, rows, meta, a.out_dir)


if __name__ == "__main__":
    main()
