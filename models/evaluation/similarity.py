"""Sentence similarities over token embeddings: cosine of mean-pooled vectors and RCMD.

* Cosine of mean-pooled last-layer token vectors is the surrogate's similarity (Sun et al. 2022,
  Sec. 3.4; Lee et al. 2022, Sec. 3.1.1).
* RCMD (Lee et al. 2022, Eq. 4 and Sec. 3.3): every token of one sentence is matched to its most
  similar token of the other (relaxed optimal transport with one marginal dropped), the matched
  cosines are averaged, and both directions are averaged:
  ``s = 1/2 (1/L1 sum_i max_j cos(x_i, y_j) + 1/L2 sum_j max_i cos(x_i, y_j))``.

Two pairwise (B1 x B2, for in-batch contrastive training) forms are given with equal values and
gradients: a dense one that holds the (B1, B2, L1, L2) cosine tensor in the autograd graph, and a
memory-saving one (CLRCMD's RCMD_sparse, Sec. 4.5.1) that finds the alignments blockwise without
gradient and backpropagates through the aligned token pairs only, so what the graph keeps is
O(B1 B2 L) indices instead of O(B1 B2 L^2) floats.

Pure torch: tensors in, tensors out. Masks are bool tensors, True on real tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "cosine_paired",
    "mean_pool",
    "rcmd_contributions",
    "rcmd_paired",
    "rcmd_pairwise",
    "rcmd_pairwise_dense",
    "rcmd_pairwise_sparse",
    "token_cosine",
    "avg_contributions",
]

_NEG = -1e4  # below any cosine: padded positions never win a max


def mean_pool(tokens: Tensor, mask: Tensor) -> Tensor:
    """Masked mean over the token axis: (B, L, D), (B, L) -> (B, D)."""
    m = mask.to(tokens.dtype).unsqueeze(-1)
    return (tokens * m).sum(-2) / m.sum(-2).clamp_min(1.0)


def cosine_paired(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise cosine of two (B, D) matrices -> (B,)."""
    return F.cosine_similarity(a, b, dim=-1, eps=1e-8)


def token_cosine(x: Tensor, y: Tensor) -> Tensor:
    """Cosine of every token pair: (..., L1, D), (..., L2, D) -> (..., L1, L2)."""
    return F.normalize(x, dim=-1, eps=1e-8) @ F.normalize(y, dim=-1, eps=1e-8).transpose(-1, -2)


def _masked_mean(v: Tensor, mask: Tensor) -> Tensor:
    m = mask.to(v.dtype)
    return (v * m).sum(-1) / m.sum(-1).clamp_min(1.0)


def rcmd_paired(x: Tensor, mx: Tensor, y: Tensor, my: Tensor) -> Tensor:
    """RCMD similarity of pair b = (x[b], y[b]): (B, L1, D), (B, L2, D) -> (B,)."""
    cos = token_cosine(x.float(), y.float())
    cos = cos.masked_fill(~my.unsqueeze(-2), _NEG).masked_fill(~mx.unsqueeze(-1), _NEG)
    s1 = _masked_mean(cos.max(-1).values, mx)
    s2 = _masked_mean(cos.max(-2).values, my)
    return 0.5 * (s1 + s2)


def rcmd_contributions(x: Tensor, y: Tensor) -> Tensor:
    """Token-pair contributions T * (1 - M) of one pair (Lee et al. Sec. 4.3): (L1, D), (L2, D).

    T = (T1 + T2) / 2 with T1[i, argmax_j cos] = 1/L1 and T2[argmax_i cos, j] = 1/L2, and 1 - M is
    the cosine, so the contributions sum to the RCMD similarity (the heatmaps of Fig. 2).
    """
    cos = token_cosine(x.float(), y.float())
    l1, l2 = cos.shape
    t = torch.zeros_like(cos)
    t[torch.arange(l1), cos.argmax(1)] += 0.5 / l1
    t[cos.argmax(0), torch.arange(l2)] += 0.5 / l2
    return t * cos


def avg_contributions(x: Tensor, y: Tensor) -> Tensor:
    """Contributions T^AVG * (1 - M^AVG) of mean-pooled cosine (Lee et al. Eq. 3), summing to it."""
    x, y = x.float(), y.float()
    s1, s2 = x.mean(0), y.mean(0)
    return (x @ y.T) / (x.shape[0] * y.shape[0] * s1.norm() * s2.norm()).clamp_min(1e-12)


# ---- pairwise (B1 x B2) forms for in-batch contrastive training ---------------------------------


def rcmd_pairwise_dense(x: Tensor, mx: Tensor, y: Tensor, my: Tensor) -> Tensor:
    """RCMD of every (x[a], y[b]) pair -> (B1, B2), holding the full (B1, B2, L1, L2) cosines."""
    xn, yn = F.normalize(x, dim=-1, eps=1e-8), F.normalize(y, dim=-1, eps=1e-8)
    cos = torch.einsum("aid,bjd->abij", xn, yn)
    cos = cos.masked_fill(~my[None, :, None, :], _NEG).masked_fill(~mx[:, None, :, None], _NEG)
    s1 = _masked_mean(cos.max(-1).values, mx[:, None, :])
    s2 = _masked_mean(cos.max(-2).values, my[None, :, :])
    return 0.5 * (s1 + s2)


def _block_argmax(a: Tensor, b: Tensor, mb: Tensor, chunk: int) -> Tensor:
    """idx[p, q, i] = argmax_j a[p, i] . b[q, j] over unmasked j, computed in blocks, no grad."""
    with torch.no_grad():
        idx = torch.empty(a.shape[0], b.shape[0], a.shape[1], dtype=torch.long, device=a.device)
        for p in range(0, a.shape[0], chunk):
            for q in range(0, b.shape[0], chunk):
                cos = torch.einsum("aid,bjd->abij", a[p : p + chunk], b[q : q + chunk])
                cos = cos.masked_fill(~mb[None, q : q + chunk, None, :], _NEG)
                idx[p : p + chunk, q : q + chunk] = cos.argmax(-1)
    return idx


class _AlignedCosine(torch.autograd.Function):
    """out[p, q, i] = a[p, i] . b[q, idx[p, q, i]] with a gradient that gathers block by block.

    Saves only a, b and the integer alignments; neither the forward nor the backward ever holds
    more than one (chunk, B2, L1, D) block of gathered vectors.
    """

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, idx: Tensor, chunk: int) -> Tensor:  # type: ignore[override]
        out = torch.empty(idx.shape, dtype=a.dtype, device=a.device)
        bq = torch.arange(b.shape[0], device=a.device)[None, :, None]
        for p in range(0, a.shape[0], chunk):
            g = b[bq, idx[p : p + chunk]]  # (c, B2, L1, D)
            out[p : p + chunk] = (a[p : p + chunk, None] * g).sum(-1)
        ctx.save_for_backward(a, b, idx)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        a, b, idx = ctx.saved_tensors
        chunk = ctx.chunk
        ga = torch.zeros_like(a) if ctx.needs_input_grad[0] else None
        gb = torch.zeros_like(b) if ctx.needs_input_grad[1] else None
        b2, l2, d = b.shape
        bq = torch.arange(b2, device=a.device)[None, :, None]
        for p in range(0, a.shape[0], chunk):
            gp, ip = grad[p : p + chunk], idx[p : p + chunk]  # (c, B2, L1)
            if ga is not None:
                ga[p : p + chunk] = (gp.unsqueeze(-1) * b[bq, ip]).sum(1)
            if gb is not None:
                src = gp.unsqueeze(-1) * a[p : p + chunk, None]  # (c, B2, L1, D)
                flat = (bq * l2 + ip).reshape(-1)
                gb.view(b2 * l2, d).index_add_(0, flat, src.reshape(-1, d))
        return ga, gb, None, None


def _directional(a: Tensor, ma: Tensor, b: Tensor, mb: Tensor, chunk: int) -> Tensor:
    """1/La sum_i max_j cos(a_i, b_j) for every (p, q) -> (B_a, B_b); inputs already normalised."""
    idx = _block_argmax(a, b, mb, chunk)
    return _masked_mean(_AlignedCosine.apply(a, b, idx, chunk), ma[:, None, :])


def rcmd_pairwise_sparse(x: Tensor, mx: Tensor, y: Tensor, my: Tensor, chunk: int = 8) -> Tensor:
    """Memory-saving RCMD of every (x[a], y[b]) pair -> (B1, B2); same values and gradients."""
    xn, yn = F.normalize(x, dim=-1, eps=1e-8), F.normalize(y, dim=-1, eps=1e-8)
    s1 = _directional(xn, mx, yn, my, chunk)
    s2 = _directional(yn, my, xn, mx, chunk).T
    return 0.5 * (s1 + s2)


def rcmd_pairwise(
    x: Tensor, mx: Tensor, y: Tensor, my: Tensor, sparse: bool = True, chunk: int = 8
) -> Tensor:
    """Pairwise RCMD in the memory-saving (default) or the dense form."""
    if sparse:
        return rcmd_pairwise_sparse(x, mx, y, my, chunk=chunk)
    return rcmd_pairwise_dense(x, mx, y, my)
