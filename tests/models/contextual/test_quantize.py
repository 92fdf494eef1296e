"""Dynamic int8 quantisation of the causal scorer (models/contextual/quantize.py) — tiny models
only."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from ctxsim.models.contextual.generator import (
    CausalPrefixScorer,
    Seq2SeqScorer,
    TinyConfig,
    tiny_causal,
    tiny_seq2seq,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.quantize import quantize_int8
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine
from ctxsim.scores import ScoreParams

TINY = TinyConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
WORDS = "the cat sat on a mat dog ran far away from home it was dark and stormy night".split()


@pytest.fixture(scope="module")
def tok():
    return train_wordpiece_tokenizer([], vocab=WORDS)


def _windows(n: int, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    rng = np.random.default_rng(seed)

    def text() -> str:
        return " ".join(rng.choice(WORDS, size=int(rng.integers(3, 9))))

    return [text() for _ in range(n)], [text() for _ in range(n)], [text() for _ in range(n)]


def _assert_near_in_rank(ref: CausalPrefixScorer, other: CausalPrefixScorer, rho: float) -> None:
    """``other`` scores 60 windows unlike ``ref`` but within 0.1 nats a token, ranks kept."""
    left, sent, right = _windows(60)
    a = ScoringEngine(ref, EngineConfig()).score(left, sent, right)
    b = ScoringEngine(other, EngineConfig()).score(left, sent, right)
    for d in a:
        assert not np.allclose(a[d], b[d])  # really a different computation
        assert np.max(np.abs(a[d] - b[d])) < 0.1  # nats per token
        assert spearmanr(a[d], b[d])[0] > rho


def test_int8_replaces_every_linear_and_keeps_scores_in_rank(tok):
    fp32 = CausalPrefixScorer(tiny_causal(tok, TINY, seed=0), tok)
    int8 = quantize_int8(copy.deepcopy(fp32))
    linear = [m for m in int8.model.modules() if type(m) is torch.nn.Linear]
    assert linear == [int8.model.get_output_embeddings()]  # the head alone stays float32
    every = quantize_int8(copy.deepcopy(fp32), per_channel=False, head=True)
    assert not [m for m in every.model.modules() if type(m) is torch.nn.Linear]
    assert every.vocab_size == int8.vocab_size == fp32.vocab_size == len(tok)
    _assert_near_in_rank(fp32, int8, 0.9)


def test_int8_refuses_other_backends(tok):
    with pytest.raises(ValueError, match="causal backend"):
        quantize_int8(Seq2SeqScorer(tiny_seq2seq(tok, TINY), tok))


def test_score_params_int8_switch_defaults_off():
    assert ScoreParams().int8_on_cpu is False
    assert ScoreParams(int8_on_cpu=True).int8_on_cpu is True


def test_int8_skip_keeps_named_layers_float32(tok):
    fp32 = CausalPrefixScorer(tiny_causal(tok, TINY, seed=0), tok)
    part = quantize_int8(copy.deepcopy(fp32), skip=("down_proj",))
    kept = {n for n, m in part.model.named_modules() if type(m) is torch.nn.Linear}
    assert kept and all(n.endswith("down_proj") or n == "lm_head" for n in kept)
    assert any(n.endswith("down_proj") for n in kept)


def test_cpu_has_bf16_reads_torchs_probes(monkeypatch):
    from ctxsim.models.contextual import quantize

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert quantize.cpu_has_bf16() is False
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert quantize.cpu_has_bf16() is True
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert quantize.cpu_has_bf16() is True  # cannot tell: no warning


def _outlier_inputs(rows: int, width: int, seed: int = 0) -> torch.Tensor:
    """Activations with a few channels 30x the others (what per-token int8 handles badly)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g)
    x[:, :3] *= 30.0
    return x


def test_int8_linear_is_near_float_and_a_row_does_not_depend_on_its_batch():
    from ctxsim.models.contextual.quantize import Int8Linear, activation_maxima

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    x = _outlier_inputs(40, 64)
    ref = lin(x).detach()
    plain = Int8Linear(lin, fused=False)
    amax = activation_maxima(torch.nn.Sequential(lin), [{"input": x}], ["0"])["0"]
    smooth = amax**0.5 / lin.weight.detach().abs().amax(dim=0) ** 0.5
    smoothed = Int8Linear(lin, smooth, fused=False)
    assert plain.qweight.dtype == torch.int8
    errors = {}
    for name, layer in (("plain", plain), ("smoothed", smoothed)):
        y = layer(x)
        assert y.shape == ref.shape and y.dtype == x.dtype
        errors[name] = float((y - ref).norm() / ref.norm())
        # per-token scales: a row alone gives the same bits as inside the batch
        torch.testing.assert_close(layer(x[7:8]), y[7:8], rtol=0, atol=0)
    assert errors["smoothed"] < 0.02
    assert errors["smoothed"] < errors["plain"] / 1.5  # the outlier channels moved to weights
    assert smoothed(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_int8_linear_fused_kernels_give_the_eager_values():
    """The shipped path: the element-wise work around the product under torch.compile
    (inductor) gives the same values as the eager functions."""
    from ctxsim.models.contextual.quantize import Int8Linear

    torch.manual_seed(1)
    lin = torch.nn.Linear(64, 40)
    smooth = torch.rand(64) + 0.5
    x = _outlier_inputs(33, 64, seed=1).to(torch.bfloat16)
    fused = Int8Linear(lin, smooth, fused=True)(x)
    eager = Int8Linear(lin, smooth, fused=False)(x)
    torch.testing.assert_close(fused, eager, rtol=0, atol=0)


def test_smooth_quantize_scorer_keeps_the_head_and_the_ranks(tok):
    from ctxsim.models.contextual.quantize import (
        Int8Linear,
        calibration_batches,
        smooth_int8_identity,
        smooth_quantize_scorer,
    )

    model = tiny_causal(tok, TINY, seed=0).to(torch.bfloat16)
    bf16 = CausalPrefixScorer(model, tok)
    w8a8 = smooth_quantize_scorer(CausalPrefixScorer(copy.deepcopy(model), tok), fused=False)
    linear = [m for m in w8a8.model.modules() if type(m) is torch.nn.Linear]
    assert linear == [w8a8.model.get_output_embeddings()]  # the head alone stays bf16
    n_int8 = sum(isinstance(m, Int8Linear) for m in w8a8.model.modules())
    assert n_int8 == 7 * TINY.num_layers  # q k v o gate up down
    assert all(m.inv_smooth is not None for m in w8a8.model.modules() if isinstance(m, Int8Linear))
    assert len(calibration_batches(tok)) == 32
    _assert_near_in_rank(bf16, w8a8, 0.95)
    assert smooth_int8_identity().startswith("w8a8-a0.5-cal")
    with pytest.raises(ValueError, match="causal backend"):
        smooth_quantize_scorer(Seq2SeqScorer(tiny_seq2seq(tok, TINY), tok))


def test_smooth_quantize_keeps_the_named_layers_bf16(tok):
    from ctxsim.models.contextual.quantize import (
        Int8Linear,
        smooth_int8_identity,
        smooth_quantize_scorer,
    )

    model = tiny_causal(tok, TINY, seed=0).to(torch.bfloat16)
    bf16 = CausalPrefixScorer(model, tok)
    kept = smooth_quantize_scorer(
        CausalPrefixScorer(copy.deepcopy(model), tok), fused=False, skip=("down_proj",)
    )
    plain = {n for n, m in kept.model.named_modules() if type(m) is torch.nn.Linear}
    assert plain == {"lm_head"} | {f"model.layers.{i}.mlp.down_proj" for i in range(2)}
    assert all(
        n.rpartition(".")[2] in {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"}
        for n, m in kept.model.named_modules()
        if isinstance(m, Int8Linear)
    )
    assert kept.model.model.layers[0].mlp.down_proj.weight.dtype == torch.bfloat16
    _assert_near_in_rank(bf16, kept, 0.95)
    # its own score-cache key; without kept layers the key of the scores written before
    assert smooth_int8_identity(skip=("down_proj",)).endswith("-keep-down_proj")
    assert smooth_int8_identity() == smooth_int8_identity(skip=())
    assert "keep" not in smooth_int8_identity()
    with pytest.raises(ValueError, match=r"\['down_projection'\] name no linear layer"):
        smooth_quantize_scorer(
            CausalPrefixScorer(copy.deepcopy(model), tok), skip=("down_projection",)
        )


def test_score_params_w8a8_needs_bf16_weights():
    assert ScoreParams().w8a8_on_cpu is False
    with pytest.raises(ValueError, match="bf16_weights_on_cpu too"):
        ScoreParams(w8a8_on_cpu=True)
    assert ScoreParams(w8a8_on_cpu=True, bf16_weights_on_cpu=True).w8a8_on_cpu
    with pytest.raises(ValueError, match="set score.w8a8_on_cpu too"):
        ScoreParams(bf16_weights_on_cpu=True, w8a8_bf16_layers=["down_proj"])
    kept = ScoreParams(w8a8_on_cpu=True, bf16_weights_on_cpu=True, w8a8_bf16_layers=["down_proj"])
    assert kept.w8a8_bf16_layers == ["down_proj"]
    both = ["v_proj", "down_proj", "v_proj"]
    again = ScoreParams(w8a8_on_cpu=True, bf16_weights_on_cpu=True, w8a8_bf16_layers=both)
    assert again.w8a8_bf16_layers == ["down_proj", "v_proj"]  # one fingerprint per set
    assert "w8a8_bf16_layers" not in ScoreParams().model_dump()  # old fingerprints kept
