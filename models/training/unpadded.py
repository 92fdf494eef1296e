"""A BERT encoder stack that runs its linear layers on real tokens only: the same function as
the padded stack, and the same dropout draws, without the padding's arithmetic.

Why: a training batch pads every text to its batch's longest, and the recipe's random batches of
right contexts are 68-75% real tokens (docs/adapt-measured.md, "length-grouped batches"). Grouping
by length recovers that but changes which texts share a batch, the right-context objective's
negatives, and cost economics' QA task; this keeps the batches and drops the padding instead. Per
layer the query, key, value, output and MLP projections, the layer norms and the dropout run on a
``(real tokens, hidden)`` matrix; only the attention's two products, a few percent of a layer's work
at 128 tokens, see the padded ``(batch, heads, length, head)`` shape again, through the backbone's
own attention function and mask. Padding rows of the output are zeros (the mean pooling weighs them
by the attention mask, which is 0 there).

The dropout masks are drawn at the padded shape, in the padded stack's order, and the real rows
kept: the same random stream, so a run trains on the same draws as the padded stack and a
resume draws alike (train.unpad; tests/models/training/test_unpadded.py holds the equalities).
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import eager_attention_forward


def unpaddable(auto_model: nn.Module) -> bool:
    """Whether ``use_unpadded_layers`` applies: a BERT-shaped encoder (not a decoder, no
    cross-attention) with the ``encoder.layer`` stack this module walks."""
    cfg = getattr(auto_model, "config", None)
    return (
        cfg is not None
        and cfg.model_type == "bert"
        and not cfg.is_decoder
        and not getattr(cfg, "add_cross_attention", False)
        and hasattr(getattr(auto_model, "encoder", None), "layer")
    )


def use_unpadded_layers(auto_model: nn.Module) -> None:
    """Run ``auto_model``'s encoder stack on real tokens only (this instance; no weights or
    saved config change). Raises ValueError for a backbone ``unpaddable`` rejects."""
    if not unpaddable(auto_model):
        kind = getattr(getattr(auto_model, "config", None), "model_type", type(auto_model))
        raise ValueError(f"train.unpad: only a BERT-shaped encoder can run unpadded, not {kind}")
    encoder = auto_model.encoder
    padded_forward = encoder.forward

    def forward(self: nn.Module, hidden_states: torch.Tensor, attention_mask: Any = None, **kw):
        real = _real_tokens(attention_mask, hidden_states.shape[:2])
        if real is None or bool(real.all()):
            return padded_forward(hidden_states, attention_mask, **kw)
        out = unpadded_stack(self, hidden_states, attention_mask, real)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=out)

    encoder.forward = types.MethodType(forward, encoder)


def _real_tokens(mask: Any, shape: torch.Size) -> torch.Tensor | None:
    """The (batch, length) real-token mask behind the encoder's attention mask: a 4-D additive
    float mask (0 where a key is seen) or a bool one (True where seen), read from the first
    query's row (a bidirectional mask is the same for every query); None when there is none."""
    if not isinstance(mask, torch.Tensor) or mask.dim() != 4:
        return None
    row = mask[:, 0, 0, :]
    seen = row if row.dtype == torch.bool else row == 0
    return seen.expand(shape) if seen.shape != shape else seen


def unpadded_stack(
    encoder: nn.Module, hidden: torch.Tensor, mask: torch.Tensor, real: torch.Tensor
) -> torch.Tensor:
    """``encoder.layer`` over the real rows of ``hidden`` (batch, length, hidden); the padded
    (batch, length, hidden) output with zeros at padding."""
    b, length, d = hidden.shape
    rows = real.reshape(-1).nonzero().squeeze(1)
    x = hidden.reshape(b * length, d).index_select(0, rows)
    for layer in encoder.layer:
        x = _layer(layer, x, mask, rows, b, length)
    return x.new_zeros(b * length, d).index_copy(0, rows, x).view(b, length, d)


def _layer(
    layer: nn.Module, x: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, b: int, length: int
) -> torch.Tensor:
    """One BertLayer (self-attention, its output, the MLP) on packed rows ``x`` (tokens, hidden),
    in the order and with the dropout draws of ``BertLayer.forward``."""
    sa, so = layer.attention.self, layer.attention.output
    d = x.shape[1]

    def heads(proj: nn.Module) -> torch.Tensor:
        y = proj(x)
        full = y.new_zeros(b * length, y.shape[1]).index_copy(0, rows, y)
        return full.view(b, length, -1, sa.attention_head_size).transpose(1, 2)

    attend = ALL_ATTENTION_FUNCTIONS.get_interface(
        sa.config._attn_implementation, eager_attention_forward
    )
    context, _ = attend(
        sa,
        heads(sa.query),
        heads(sa.key),
        heads(sa.value),
        mask,
        dropout=0.0 if not sa.training else sa.dropout.p,
        scaling=sa.scaling,
    )
    context = context.reshape(b * length, d).index_select(0, rows)
    attended = so.LayerNorm(_dropout(so.dropout, so.dense(context), rows, b * length) + x)
    inner = layer.intermediate(attended)
    out = _dropout(layer.output.dropout, layer.output.dense(inner), rows, b * length)
    return layer.output.LayerNorm(out + attended)


def _dropout(module: nn.Module, y: torch.Tensor, rows: torch.Tensor, padded: int) -> torch.Tensor:
    """``module`` (an ``nn.Dropout``) on packed rows ``y`` with the mask it would draw for the
    padded (``padded``, hidden) matrix, its real rows kept: the padded stack's random draws."""
    if not module.training or module.p == 0.0:
        return y
    scale = module(torch.ones(padded, y.shape[1], dtype=y.dtype, device=y.device))
    return y * scale.index_select(0, rows)
