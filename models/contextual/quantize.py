"""Dynamic int8 quantisation of a causal scorer's linear layers, for CPU inference.

Why: on CPU the scorer's matrix work is the whole cost of a label (bench/results/pipeline_books.md:
`score` is 92% of the marginal CPU time). torch's dynamic quantisation stores every ``nn.Linear``
weight as int8 (per-tensor scale) and quantises activations per batch at run time, so the
matmuls run in int8 (fbgemm/x86 kernels); embeddings, norms and attention's softmax stay float32.
No hand-written kernels. Scores move slightly: bench/bench_int8.py measures how far (Spearman of
S against float32) and how much CPU time it saves.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ctxsim.models.contextual.generator import CausalPrefixScorer, GenerativeScorer


def quantize_int8(
    scorer: GenerativeScorer,
    per_channel: bool = True,
    head: bool = False,
    skip: tuple[str, ...] = (),
) -> GenerativeScorer:
    """The scorer with its model's linear layers quantised to int8 in place: one scale per
    output channel (``per_channel``; per tensor otherwise), the vocabulary head kept in float32
    unless ``head`` (it runs on target positions only, a few % of the FLOPs, and its per-tensor
    int8 scores collapse: bench/results/int8_smollm2.md); layers whose name contains one of
    ``skip`` stay float32 too. CPU only; the causal backend only."""
    if not isinstance(scorer, CausalPrefixScorer):
        raise ValueError(
            f"int8 quantisation supports the causal backend, not {type(scorer).__name__}"
        )
    if scorer.device.type != "cpu":
        raise ValueError(
            f"int8 quantisation is for CPU inference, the scorer is on {scorer.device}"
        )
    from torch.ao.quantization import (
        default_dynamic_qconfig,
        per_channel_dynamic_qconfig,
        quantize_dynamic,
    )

    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    model = scorer.model.eval()
    out_head = model.get_output_embeddings()
    spec = {
        name: qconfig
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear)
        and (head or m is not out_head)
        and not any(k in name for k in skip)
    }
    with warnings.catch_warnings():  # torch flags its quantised tensor API for a future move
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        scorer.model = quantize_dynamic(model, spec, dtype=torch.qint8)
    return scorer


def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 units (AVX512-BF16 or AMX): without them bfloat16 weights
    run emulated, slower than float32. True when torch cannot tell (its probes are private)."""
    probes = [
        getattr(torch.cpu, n, None) for n in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    ]
    probes = [p for p in probes if p is not None]
    return not probes or any(p() for p in probes)


def to_bf16_weights(model: torch.nn.Module, setting: str, warn: Any) -> torch.nn.Module:
    """``model`` with its weights cast to bfloat16 in place, for CPU inference (the callers take
    float32 log-probabilities of its logits); ``warn`` (a logger's ``warning``) is told when this
    CPU has no bf16 units, naming ``setting`` as the switch back."""
    if not cpu_has_bf16():
        warn(
            "%s: this CPU has no bf16 units (AVX512-BF16 / AMX): bf16 weights run emulated, "
            "slower than float32; set %s=false here",
            setting.split(".")[0],
            setting,
        )
    return model.to(torch.bfloat16)
