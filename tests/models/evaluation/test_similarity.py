"""Cosine and RCMD by hand; dense and memory-saving RCMD agree in value and gradient."""

from __future__ import annotations

import math

import pytest
import torch

from ctxsim.models.evaluation.similarity import (
    avg_contributions,
    cosine_paired,
    mean_pool,
    rcmd_contributions,
    rcmd_paired,
    rcmd_pairwise_dense,
    rcmd_pairwise_sparse,
)


def test_mean_pool_and_cosine_by_hand():
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]]])
    m = torch.tensor([[True, True, False]])
    pooled = mean_pool(x, m)
    assert torch.allclose(pooled, torch.tensor([[0.5, 0.5]]))
    c = cosine_paired(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]]))
    assert c.item() == pytest.approx(1 / math.sqrt(2))


def test_rcmd_by_hand():
    # s1 tokens: e1, e2; s2 tokens: e1, (e1+e2)/sqrt2, -e2
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    y = torch.tensor([[[1.0, 0.0], [1.0, 1.0], [0.0, -1.0]]])
    mx = torch.ones(1, 2, dtype=torch.bool)
    my = torch.ones(1, 3, dtype=torch.bool)
    r = 1 / math.sqrt(2)
    # direction 1: e1 -> max(1, r, 0) = 1 ; e2 -> max(0, r, -1) = r  => (1 + r)/2
    # direction 2: e1 -> 1 ; (e1+e2)/sqrt2 -> r ; -e2 -> max(0, -1) = 0  => (1 + r + 0)/3
    want = 0.5 * ((1 + r) / 2 + (1 + r) / 3)
    assert rcmd_paired(x, mx, y, my).item() == pytest.approx(want, abs=1e-6)
    # padding must not change the value
    yp = torch.cat([y, torch.full((1, 2, 2), 5.0)], dim=1)
    myp = torch.tensor([[True, True, True, False, False]])
    assert rcmd_paired(x, mx, yp, myp).item() == pytest.approx(want, abs=1e-6)
    # contributions sum to RCMD; the avg ones sum to the pooled cosine
    assert rcmd_contributions(x[0], y[0]).sum().item() == pytest.approx(want, abs=1e-6)
    cos = cosine_paired(x[0].mean(0, keepdim=True), y[0].mean(0, keepdim=True)).item()
    assert avg_contributions(x[0], y[0]).sum().item() == pytest.approx(cos, abs=1e-6)


def _batch(seed: int, b: int, lmax: int, d: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, lmax, d, generator=g, dtype=torch.float64)
    lens = torch.randint(1, lmax + 1, (b,), generator=g)
    m = torch.arange(lmax)[None, :] < lens[:, None]
    return x, m


@pytest.mark.parametrize("chunk", [1, 3, 8])
def test_sparse_equals_dense_values_and_grads(chunk):
    x, mx = _batch(0, 5, 7, 6)
    y, my = _batch(1, 4, 9, 6)
    x1, y1 = x.clone().requires_grad_(), y.clone().requires_grad_()
    x2, y2 = x.clone().requires_grad_(), y.clone().requires_grad_()
    d = rcmd_pairwise_dense(x1, mx, y1, my)
    s = rcmd_pairwise_sparse(x2, mx, y2, my, chunk=chunk)
    assert d.shape == (5, 4)
    assert torch.allclose(d, s, atol=1e-10)
    w = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    (d * w).sum().backward()
    (s * w).sum().backward()
    assert torch.allclose(x1.grad, x2.grad, atol=1e-10)
    assert torch.allclose(y1.grad, y2.grad, atol=1e-10)
    # diagonal of the pairwise form = the paired form
    for i in range(4):
        pr = rcmd_paired(x[i : i + 1], mx[i : i + 1], y[i : i + 1], my[i : i + 1])
        assert pr.item() == pytest.approx(d[i, i].item(), abs=1e-6)  # paired runs in float32


def test_sparse_gradcheck():
    x, mx = _batch(3, 3, 4, 3)
    y, my = _batch(4, 2, 5, 3)
    x.requires_grad_()
    y.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: rcmd_pairwise_sparse(a, mx, b, my, chunk=2), (x, y), eps=1e-6, atol=1e-5
    )
