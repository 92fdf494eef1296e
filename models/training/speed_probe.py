"""A training step of MiniLM's shape on random weights, timed: how fast this machine runs the
recipe's training, so a cost model fit on one machine can be scaled to another.

Why: `ctxsim adapt`'s cost model (flows/adapt.py) prices stages in CPU-seconds measured on one
machine; another CPU differs in its clock, its vector units and above all its bf16 units (the
recipe's step on a Xeon with AMX took 0.69x the CPU-s it took on an EPYC with AVX512-BF16). A
step of the same architecture, dtype, dropout masks and optimizer on random weights and
random tokens (nothing downloaded) is the same kind of work at a fixed size, so the ratio of
its CPU-s here to its CPU-s on the machine the model was fit on scales the prediction.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

#: all-MiniLM-L6-v2's shape: the recipe's default encoder
MINILM_SHAPE: dict[str, Any] = {
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
}


def probe_step_cpu_s(
    bf16: bool,
    batch: int = 16,
    length: int = 128,
    steps: int = 5,
    warmup: int = 1,
    shape: dict[str, Any] | None = None,
) -> float:
    """The median CPU-seconds of one training step (forward, backward, fused AdamW) of a
    BERT encoder of ``shape`` (MiniLM's unless told) on ``batch`` random texts of up to
    ``length`` tokens (a quarter to all of it, padded, as real batches are), with the recipe's
    dropout masks from bytes and eager attention, under bf16 autocast when ``bf16``; one torch
    thread. Torch's random state and thread count are as they were afterwards."""
    from transformers import BertConfig, BertModel

    from ctxsim.models.training.dropout import use_cheap_dropout

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            config = BertConfig(**(shape or MINILM_SHAPE), attn_implementation="eager")
            model = BertModel(config, add_pooling_layer=False).train()
            use_cheap_dropout(model)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
            ids = torch.randint(1000, config.vocab_size, (batch, length))
            lengths = torch.linspace(length // 4, length, batch).round().long()
            mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
            weights = mask[..., None].float()
            times: list[float] = []
            for _ in range(warmup + steps):
                start = time.process_time()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    out = model(input_ids=ids, attention_mask=mask).last_hidden_state
                    pooled = (out.float() * weights).sum(1) / weights.sum(1)
                    loss = pooled.pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                times.append(time.process_time() - start)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times[warmup:])
