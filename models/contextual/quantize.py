"""Cheaper precisions of a causal scorer's linear layers, for CPU inference: bf16 weights,
torch's dynamic int8 (``quantize_int8``), and int8 products on bf16 weights with per-token
activation scales (``Int8Linear``, ``smooth_quantize_scorer``: score.w8a8_on_cpu).

Why: on CPU the scorer's matrix work is the whole cost of a label (bench/results/pipeline_books.md:
`score` is 92% of the marginal CPU time). torch's dynamic quantisation stores every ``nn.Linear``
weight as int8 (per-tensor scale) and quantises activations per batch at run time, so the
matmuls run in int8 (fbgemm/x86 kernels); embeddings, norms and attention's softmax stay float32.
No hand-written kernels. Scores move slightly: bench/bench_int8.py measures how far (Spearman of
S against float32) and how much CPU time it saves. Its one activation scale per batch costs most
of the agreement with float32; ``Int8Linear`` scales each token's row instead
(bench/results/score_lm_route_w8a8.md).
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from pathlib import Path
from typing import Any

import torch

from ctxsim.models.contextual.generator import CausalPrefixScorer, GenerativeScorer

#: SmoothQuant's migration strength: 0.5 measured closest to float32 on SmolLM2 (0.8 further)
SMOOTH_ALPHA = 0.5
#: the calibration text: original paragraphs of the bundled sample corpus, one per document
CALIBRATION_FILE = Path(__file__).with_name("int8_calibration.txt")


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
    _require_causal_on_cpu(scorer)
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


def _require_causal_on_cpu(scorer: GenerativeScorer) -> None:
    """Both int8 paths quantise a causal scorer's layers for CPU inference only."""
    if not isinstance(scorer, CausalPrefixScorer):
        raise ValueError(
            f"int8 quantisation supports the causal backend, not {type(scorer).__name__}"
        )
    if scorer.device.type != "cpu":
        raise ValueError(
            f"int8 quantisation is for CPU inference, the scorer is on {scorer.device}"
        )


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


def _quantize_rows(x: torch.Tensor, inv_smooth: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """(int8 rows, float32 scale per row) of ``x`` (2-D), symmetric, after the smoothing."""
    x = x.float()
    if inv_smooth is not None:
        x = x * inv_smooth
    scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 127.0
    return (x / scale).round().clamp(-127, 127).to(torch.int8), scale


def _dequantize(
    acc: torch.Tensor,
    row_scale: torch.Tensor,
    col_scale: torch.Tensor,
    bias: torch.Tensor | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    y = acc.float() * row_scale * col_scale
    if bias is not None:
        y = y + bias
    return y.to(dtype)


class Int8Linear(torch.nn.Module):
    """``linear`` with int8 matrix products (``torch._int_mm``: AVX512-VNNI / AMX-INT8 kernels):
    weights per output channel, activations per token (row) at run time, both symmetric, with
    a per-input-channel smoothing (SmoothQuant, Xiao et al. 2023) that moves activation outliers
    into the weights. Per-token scales keep a row's output independent of its batch (torch's
    dynamic quantisation takes one activation scale per batch) and are what brings the scores
    close to float32's. Output in the input's dtype. ``fused``: the element-wise work around the
    product under torch.compile (eager where it cannot compile, with a warning)."""

    def __init__(
        self, linear: torch.nn.Linear, smooth: torch.Tensor | None = None, fused: bool = True
    ) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        if smooth is not None:
            w = w * smooth[None, :]
        scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        q = (w / scale[:, None]).round_().clamp_(-127, 127).to(torch.int8)
        self.register_buffer("qweight", q)  # (out, in), used transposed: _int_mm's faster side
        self.register_buffer("wscale", scale)
        inv = None if smooth is None else (1.0 / smooth).float()
        self.register_buffer("inv_smooth", inv)
        bias = linear.bias
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().float(), False)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        quantize, dequantize = _quantize_rows, _dequantize
        if self.fused and not torch.compiler.is_compiling():
            quantize, dequantize = _kernels_or_eager()
        xq, xs = quantize(x.reshape(-1, shape[-1]), self.inv_smooth)
        acc = torch._int_mm(xq, self.qweight.t())
        y = dequantize(acc, xs, self.wscale, self.bias, x.dtype)
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        smooth = self.inv_smooth is not None
        return f"in={self.in_features}, out={self.out_features}, smoothed={smooth}"


@functools.cache
def _kernels_or_eager() -> tuple[Any, Any]:
    """``_quantize_rows`` and ``_dequantize`` under torch.compile, chosen once: each one pass
    over the activations instead of five and four eager ones (eager, they cost about as much as
    the int8 product they surround), with the same values; the eager functions (warned once)
    where nothing compiles."""
    try:
        quantize = torch.compile(_quantize_rows, dynamic=True)
        dequantize = torch.compile(_dequantize, dynamic=True)
        probe = torch.ones(2, 4)
        xq, xs = quantize(probe, None)
        dequantize(torch._int_mm(xq, xq.t().contiguous()), xs, torch.ones(2), None, probe.dtype)
    except Exception as e:  # noqa: BLE001 - no compiler here: the same values, eager
        warnings.warn(
            f"torch.compile unavailable ({type(e).__name__}: {e}); int8 layers run eager",
            stacklevel=3,
        )
        return _quantize_rows, _dequantize
    return quantize, dequantize


@torch.no_grad()
def activation_maxima(
    model: torch.nn.Module, batches: list[dict[str, torch.Tensor]], names: list[str]
) -> dict[str, torch.Tensor]:
    """The largest |activation| per input channel of each linear layer named, over ``batches``
    (the model's keyword inputs), float32."""
    mods = dict(model.named_modules())
    amax: dict[str, torch.Tensor] = {}

    def hook(name: str):  # noqa: ANN202
        def fn(_m: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0].detach().reshape(-1, args[0].shape[-1]).float().abs().amax(dim=0)
            amax[name] = x if name not in amax else torch.maximum(amax[name], x)

        return fn

    handles = [mods[n].register_forward_pre_hook(hook(n)) for n in names]
    try:
        for b in batches:
            model(**b)
    finally:
        for h in handles:
            h.remove()
    return amax


def smooth_quantize_int8(
    model: torch.nn.Module,
    calibration: list[dict[str, torch.Tensor]],
    alpha: float = SMOOTH_ALPHA,
    head: bool = False,
    fused: bool = True,
    skip: tuple[str, ...] = (),
) -> torch.nn.Module:
    """``model`` with its linear layers (the vocabulary head too with ``head``) replaced in place
    by ``Int8Linear``, smoothed with SmoothQuant's s_j = max|X_j|^alpha / max|W_j|^(1-alpha) from
    the activations of ``calibration`` (the model's keyword inputs, run as the model is now).
    Layers whose name ends with one of ``skip`` keep their precision: on SmolLM2 the MLP down
    projections (a quarter of the linear work) hold most of int8's distance from float32
    (bench/results/w8a8_layers.md)."""
    out_head = model.get_output_embeddings()
    linear = [
        n
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and (head or m is not out_head)
    ]
    unmatched = [k for k in skip if not any(n.endswith(k) for n in linear)]
    if unmatched:
        raise ValueError(
            f"int8 layers to keep {unmatched} name no linear layer of "
            f"{type(model).__name__} (its layers end with e.g. "
            f"{sorted({n.rpartition('.')[2] for n in linear})})"
        )
    names = [n for n in linear if not any(n.endswith(k) for k in skip)]
    amax = activation_maxima(model.eval(), calibration, names)
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        lin = getattr(parent, child)
        wmax = lin.weight.detach().float().abs().amax(dim=0).clamp(min=1e-5)
        smooth = amax[name].clamp(min=1e-5) ** alpha / wmax ** (1.0 - alpha)
        setattr(parent, child, Int8Linear(lin, smooth, fused=fused))
    return model


def calibration_batches(
    tokenizer: Any, max_tokens: int = 64, path: Path = CALIBRATION_FILE
) -> list[dict[str, torch.Tensor]]:
    """One batch per paragraph of ``path``, cut at ``max_tokens`` tokens (no padding to mask)."""
    paragraphs = [p.strip() for p in path.read_text(encoding="utf-8").splitlines() if p.strip()]
    if not paragraphs:
        raise ValueError(f"int8 calibration: no text in {path}")
    return [
        {"input_ids": torch.tensor([tokenizer(p)["input_ids"][:max_tokens]], dtype=torch.long)}
        for p in paragraphs
    ]


def smooth_int8_identity(
    alpha: float = SMOOTH_ALPHA, path: Path = CALIBRATION_FILE, skip: tuple[str, ...] = ()
) -> str:
    """What decides ``smooth_quantize_scorer``'s scores besides the model (score-cache key);
    without ``skip`` the key of the scores written before layers could be kept."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    kept = f"-keep-{'+'.join(sorted(set(skip)))}" if skip else ""
    return f"w8a8-a{alpha:g}-cal{digest}{kept}"


def smooth_quantize_scorer(
    scorer: GenerativeScorer,
    alpha: float = SMOOTH_ALPHA,
    fused: bool = True,
    skip: tuple[str, ...] = (),
) -> GenerativeScorer:
    """The causal scorer with its linear layers but the vocabulary head (and those ending with
    one of ``skip``) as ``Int8Linear`` (in place), smoothed from the calibration text run
    through the model as it is (bf16 weights: bf16 activations). CPU only; the causal backend
    only."""
    _require_causal_on_cpu(scorer)
    batches = [
        {k: v.to(scorer.device) for k, v in b.items()}
        for b in calibration_batches(scorer.tokenizer)
    ]
    smooth_quantize_int8(scorer.model, batches, alpha=alpha, fused=fused, skip=skip)
    return scorer
