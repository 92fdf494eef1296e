"""Attention as two batched products per key/value head group, for the score engine on CPU.

The engine's continuation batches are short queries (a target, about 18 tokens) over short keys
(a prefix and the target, a few dozen): torch's CPU flash kernel then spends more on its per
(row, head) set-up than on arithmetic. Here a row's query heads that share a key/value head are
stacked into one matrix, so each layer runs one product for the scores and one for the values
per (row, key/value head), with no key/value copies (``repeat_kv``) and the softmax in float32
as transformers' eager path does. Registered with transformers' attention and mask interfaces
(the additive float mask of its eager path, so sliding windows and padding arrive built);
``grouped_matmul`` switches a model to it for the duration.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

#: the name it is registered under (``config._attn_implementation``)
GROUPED_MATMUL = "ctxsim_grouped_matmul"
#: the architectures whose attention it reproduces (tested against sdpa: Llama-style SmolLM2,
#: Gemma 3 with its sliding windows); others keep their own (relative position biases, sinks)
MODEL_TYPES = frozenset({"llama", "gemma3_text"})


def grouped_matmul_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query (rows, heads, q, dim), key and value (rows,
    key/value heads, k, dim), an additive mask (rows, 1, q, >= k); returns (rows, q, heads,
    dim). Inference only (no dropout, no attention weights)."""
    if dropout and module.training:
        raise ValueError(f"{GROUPED_MATMUL}: inference only (dropout {dropout})")
    extra = [k for k in ("position_bias", "s_aux", "sinks") if kwargs.get(k) is not None]
    if extra:
        raise ValueError(f"{GROUPED_MATMUL}: {', '.join(extra)} not supported")
    rows, heads, q_len, dim = query.shape
    kv_heads, k_len = key.shape[1], key.shape[2]
    group = heads // kv_heads  # query head h reads key/value head h // group (repeat_kv's order)
    scale = dim**-0.5 if scaling is None else scaling
    scores = torch.matmul(query.reshape(rows, kv_heads, group * q_len, dim), key.transpose(2, 3))
    scores = scores * scale
    softcap = kwargs.get("softcap")
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.view(rows, kv_heads, group, q_len, k_len)
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, None, :, :k_len]
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs.view(rows, kv_heads, group * q_len, k_len), value)
    return out.view(rows, heads, q_len, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_MATMUL, grouped_matmul_attention)
AttentionMaskInterface.register(GROUPED_MATMUL, eager_mask)


@contextlib.contextmanager
def grouped_matmul(model: Any, device: torch.device | str) -> Iterator[None]:
    """``model`` attends with ``grouped_matmul_attention`` for the duration, on CPU only (on
    CUDA the fused kernels win) and for ``MODEL_TYPES``; its own implementation comes back
    afterwards."""
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if (
        torch.device(device).type != "cpu"
        or getattr(config, "model_type", None) not in MODEL_TYPES
        or before is None
        or before == GROUPED_MATMUL
    ):
        yield
        return
    model.set_attn_implementation(GROUPED_MATMUL)
    try:
        yield
    finally:
        model.set_attn_implementation(before)
