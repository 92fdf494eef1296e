"""models/training/dropout.py: masks drawn from the bits of 64-bit words keep each element with
torch's dropout probability, independently and reproducibly; the dropout scales and routes the
gradient as torch's does; a backbone gets it in every dropout module and in BERT's eager
attention, computes what it computed, and saves as it did."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from ctxsim.models.training.dropout import (
    ATTENTION_NAME,
    CheapDropout,
    cheap_dropout,
    eager_attention,
    keep_mask,
    use_cheap_dropout,
)

TEXTS = ["a man plays the guitar .", "the dog runs in the park .", "a woman eats red food ."]


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.train import TrainParams

    p = TrainParams(tiny_vocab_size=120, max_seq_length=16)
    return build_tiny_backbone(TEXTS * 4, tmp_path_factory.mktemp("bb") / "backbone", p, 0)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.03])
def test_the_mask_keeps_each_element_with_one_minus_p_independently(p: float) -> None:
    torch.manual_seed(0)
    keep = keep_mask((400, 1000), p).numpy()
    assert keep.dtype == bool and keep.shape == (400, 1000)
    n = keep.size
    assert abs(keep.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)  # five standard errors
    # neighbours (the four 16-bit numbers of one 64-bit draw among them) are independent
    flat = keep.ravel().astype(float)
    for lag in (1, 2, 3, 4, 1000):
        r = np.corrcoef(flat[:-lag], flat[lag:])[0, 1]
        assert abs(r) < 5 / np.sqrt(n), (lag, r)
    # the drop probability is exact to 1/65,536: none dropped at 0; 1 or more is refused
    assert keep_mask((5, 7), 0.0).all()
    with pytest.raises(ValueError, match="dropout probability"):
        keep_mask((5, 7), 1.0)


def test_the_mask_follows_torchs_seed_so_a_resume_draws_alike() -> None:
    torch.manual_seed(3)
    a = keep_mask((64, 33), 0.1)
    state = torch.get_rng_state()
    b = keep_mask((64, 33), 0.1)
    torch.manual_seed(3)
    assert torch.equal(keep_mask((64, 33), 0.1), a)
    torch.set_rng_state(state)
    assert torch.equal(keep_mask((64, 33), 0.1), b) and not torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_zeroes_scales_and_routes_the_gradient_like_torchs(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.rand(50, 40, dtype=dtype) + 0.5
    x.requires_grad_(True)
    y = cheap_dropout(x, 0.2)
    assert y.dtype == dtype
    kept = y != 0
    assert 0.7 < kept.float().mean() < 0.9
    assert torch.allclose(y[kept].float(), (x[kept] / 0.8).float(), rtol=1e-2)
    y.sum().backward()
    grad = x.grad.float()
    assert torch.allclose(grad[kept], torch.full_like(grad[kept], 1 / 0.8), rtol=1e-2)
    assert (grad[~kept] == 0).all()
    # the kept values are torch's own to the last bit (its mask is scaled in x's dtype too)
    ones = torch.ones(2000, dtype=dtype)
    ours, torchs = cheap_dropout(ones, 0.1), torch.nn.functional.dropout(ones, 0.1, True)
    assert torch.equal(ours.unique(), torchs.unique())
    # off: the input itself; a bad probability is refused
    assert cheap_dropout(x, 0.2, training=False) is x and cheap_dropout(x, 0.0) is x
    with pytest.raises(ValueError, match="dropout probability"):
        cheap_dropout(x, 1.0)
    module = CheapDropout(0.2)
    assert module.eval()(x) is x


def test_a_backbone_gets_it_everywhere_computes_the_same_and_saves_as_before(
    backbone, tmp_path
) -> None:
    """Every dropout module and BERT's eager attention draw bytes; with dropout off (eval) the
    vectors are the eager model's; in training the masks vary the vectors; the saved model
    names no ctxsim kernel and loads anywhere."""
    from ctxsim.models.training.sentence_encoder import (
        build_model,
        build_student,
        training_dropout_masks,
    )

    assert training_dropout_masks("auto", "cpu") == "bytes"
    assert training_dropout_masks("auto", "cuda:0") == "torch"
    assert training_dropout_masks("torch", "cpu") == "torch"
    plain = build_student(str(backbone), 16, "cpu", attention="eager")
    cheap = build_student(str(backbone), 16, "cpu", attention="eager", dropout_masks="auto")
    auto_model = cheap[0].auto_model
    assert auto_model.config._attn_implementation == ATTENTION_NAME
    assert not [m for m in auto_model.modules() if type(m) is torch.nn.Dropout]
    assert len([m for m in auto_model.modules() if isinstance(m, CheapDropout)]) >= 4
    a = plain.encode(TEXTS, convert_to_numpy=True)
    b = cheap.encode(TEXTS, convert_to_numpy=True)
    assert np.allclose(a, b, atol=1e-6)
    cheap.train()
    feats = cheap.tokenize(TEXTS)
    torch.manual_seed(0)
    one = cheap(dict(feats))["sentence_embedding"]
    two = cheap(dict(feats))["sentence_embedding"]
    assert not torch.allclose(one, two)  # dropout is on: two draws differ
    assert use_cheap_dropout(auto_model) == 0  # nothing left to swap
    cheap.save(str(tmp_path / "st"))
    saved = json.loads((tmp_path / "st" / "config.json").read_text())
    assert ATTENTION_NAME not in json.dumps(saved)
    again = build_model(str(tmp_path / "st"), 16, "cpu")
    assert again[0].auto_model.config._attn_implementation == "sdpa"
    assert np.allclose(again.encode(TEXTS, convert_to_numpy=True), a, atol=1e-5)


def test_the_train_stage_draws_its_masks_as_the_config_says(tmp_path, monkeypatch) -> None:
    """train.dropout_masks reaches the stage's backbone (bytes on this CPU under auto), the run
    trains through it, and the key at torch's draw stays out of the fingerprint."""
    import ctxsim.models.training.dropout as dropout_module
    from ctxsim.tasks.train import TrainParams
    from tests.models.training.test_context_objective import train_on_context

    assert "dropout_masks" not in TrainParams().model_dump()
    assert TrainParams(dropout_masks="auto").model_dump()["dropout_masks"] == "auto"
    seen: list[int] = []
    swap = dropout_module.use_cheap_dropout
    monkeypatch.setattr(dropout_module, "use_cheap_dropout", lambda m: seen.append(swap(m)))
    art = train_on_context(
        tmp_path / "run", objective="context", dropout_masks="auto", attention="eager", max_steps=3
    )
    assert seen and seen[0] >= 4 and (art.files_dir / "model").is_dir()
    saved = json.loads((art.files_dir / "model" / "config.json").read_text())
    assert ATTENTION_NAME not in json.dumps(saved)


def test_attention_under_bf16_autocast_keeps_bf16_probabilities_and_masks_padding() -> None:
    """Scores, mask and probabilities stay bf16 under autocast (no float32 round trip); padded
    keys get no weight; the outputs are the float32-mask path's within bf16's rounding; a row
    whose every key is masked gets equal weights, as in float32, not NaN."""
    torch.manual_seed(0)
    module = nn.Module().eval()  # no dropout: the two paths compare element by element
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    mask = torch.zeros(2, 1, 6, 6).masked_fill(
        pad[:, None, None, :], torch.finfo(torch.float32).min
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, probs = eager_attention(module, q, k, v, mask)
    assert probs.dtype == torch.bfloat16
    assert (probs[1, :, :, 4:] == 0).all()
    reference = torch.softmax(q @ k.transpose(2, 3) / 8**0.5 + mask, -1) @ v
    assert torch.allclose(out.float().transpose(1, 2), reference, atol=3e-2)
    assert not torch.allclose(
        out.float().transpose(1, 2), torch.softmax(q @ k.transpose(2, 3), -1) @ v, atol=3e-2
    )
    every = torch.full((1, 1, 6, 6), torch.finfo(torch.float32).min)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, flat = eager_attention(module, q[:1], k[:1], v[:1], every)
    assert torch.allclose(flat.float(), torch.full_like(flat.float(), 1 / 6), atol=2e-3)
    # float32 (no autocast): the float32 computation itself
    out32, probs32 = eager_attention(module, q, k, v, mask)
    assert probs32.dtype == torch.float32
    assert torch.allclose(out32.transpose(1, 2), reference, atol=1e-5)
