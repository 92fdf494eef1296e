"""Dropout whose random masks cost less on a CPU: the same Bernoulli keep-mask distribution as
``torch.nn.functional.dropout``, drawn from the bits of 64-bit random words.

Why: on CPU torch draws dropout's mask one element at a time (``bernoulli_``), and in the recipe's
bf16 training step that is about a third of the step (docs/adapt-measured.md, "On a CPU with AMX").
Here each 64-bit draw of torch's generator gives four 16-bit numbers, each kept when at or above
``round(p * 65536)``: a drop probability exact to 1/65,536 (0.1 is 0.100006), seeded, saved and
restored with torch's own generator state, so a run and its resume draw alike.

``use_cheap_dropout`` puts it into a training backbone: every ``nn.Dropout`` module becomes a
``CheapDropout`` of the same ``p``, and a BERT-shaped backbone with eager attention runs
``eager_attention`` (the same products and softmax, this dropout on the probabilities). Neither
holds weights nor touches the config a saved model writes.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

#: the attention implementation name registered with transformers for ``eager_attention``
ATTENTION_NAME = "ctxsim_eager"
_LEVELS = 1 << 16


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: Any = None) -> torch.Tensor:
    """A bool mask of ``shape``, each element kept (True) with probability ``1 - p``, rounded
    to a multiple of 1/65,536, from torch's default generator."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    n = math.prod(shape)
    words = torch.randint(
        -(1 << 63), (1 << 63) - 1, ((n + 3) // 4,), dtype=torch.int64, device=device
    )
    halves = words.view(torch.int16)[:n]  # uniform over [-32768, 32767]
    threshold = round(p * _LEVELS) - (_LEVELS // 2)
    return (halves >= threshold).view(shape)


def cheap_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with ``keep_mask``'s mask: zeros where dropped, the rest
    scaled by 1 / (1 - p). The mask is made once in ``x``'s dtype, already scaled, so the
    forward and the backward are each one multiplication (on CPU a bool mask costs a type
    promotion or a select each time)."""
    if not training or p == 0.0:
        return x
    keep = keep_mask(x.shape, p, x.device)
    scale = torch.tensor(1.0 / (1.0 - p), dtype=x.dtype, device=x.device)
    return x * torch.where(keep, scale, torch.zeros_like(scale))


class CheapDropout(nn.Dropout):
    """``nn.Dropout`` drawing its mask with ``keep_mask``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cheap_dropout(x, self.p, self.training)


def eager_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' BERT ``eager_attention_forward`` with ``cheap_dropout`` on the attention
    probabilities: the same products, mask and softmax, the additive mask in the scores' dtype.

    Why the mask's dtype: under bf16 autocast the scores are bf16 and the mask float32, so
    ``scores + mask`` is float32 and the softmax, the dropout and their backward run on float32
    probabilities that the next matmul casts back to bf16; in the scores' dtype they stay bf16
    (the softmax still sums in float32 inside its kernel; the matmul saw bf16 probabilities
    either way). A float32 run is unchanged."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + _in_dtype(attention_mask, weights.dtype)
    weights = nn.functional.softmax(weights, dim=-1)
    weights = cheap_dropout(weights, dropout, module.training)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


def _in_dtype(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive mask in ``dtype``, its large negatives kept finite: float32's minimum
    rounds to -inf in bf16, and a row whose every key is masked would then softmax to NaN
    where float32 gives it equal weights."""
    if mask.dtype == dtype:
        return mask
    return mask.clamp(min=torch.finfo(dtype).min).to(dtype)


def use_cheap_dropout(auto_model: nn.Module) -> int:
    """Every ``nn.Dropout`` of ``auto_model`` a ``CheapDropout`` of the same ``p``, and a BERT
    backbone's eager attention ``eager_attention``; returns the modules swapped."""
    swapped = 0
    for parent in list(auto_model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, CheapDropout(child.p, child.inplace))
                swapped += 1
    config = auto_model.config
    if config.model_type == "bert" and config._attn_implementation == "eager":
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        AttentionInterface.register(ATTENTION_NAME, eager_attention)
        AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)  # eager's additive mask
        auto_model.set_attn_implementation(ATTENTION_NAME)
    return swapped
