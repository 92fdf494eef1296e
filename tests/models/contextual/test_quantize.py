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


def test_int8_replaces_every_linear_and_keeps_scores_in_rank(tok):
    fp32 = CausalPrefixScorer(tiny_causal(tok, TINY, seed=0), tok)
    int8 = quantize_int8(copy.deepcopy(fp32))
    linear = [m for m in int8.model.modules() if type(m) is torch.nn.Linear]
    assert linear == [int8.model.get_output_embeddings()]  # the head alone stays float32
    every = quantize_int8(copy.deepcopy(fp32), per_channel=False, head=True)
    assert not [m for m in every.model.modules() if type(m) is torch.nn.Linear]
    assert every.vocab_size == int8.vocab_size == fp32.vocab_size == len(tok)
    left, sent, right = _windows(60)
    a = ScoringEngine(fp32, EngineConfig()).score(left, sent, right)
    b = ScoringEngine(int8, EngineConfig()).score(left, sent, right)
    for d in a:
        assert not np.allclose(a[d], b[d])  # really a different computation
        assert np.max(np.abs(a[d] - b[d])) < 0.1  # nats per token
        assert spearmanr(a[d], b[d])[0] > 0.9


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
