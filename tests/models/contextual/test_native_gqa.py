"""On CPU the score engine and the sampler hand grouped key/value heads to torch's attention
uncopied (models/contextual/native_gqa.py): the same scores and the same samples as the
copying path, and no ``repeat_kv`` on the way."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import transformers.integrations.sdpa_attention as sdpa

from ctxsim.models.contextual.context_sampling import SamplingSettings, sample_texts
from ctxsim.models.contextual.generator import (
    CausalPrefixScorer,
    TinyConfig,
    tiny_causal,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.native_gqa import GQA_ENV, native_gqa
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine

WORDS = "the cat sat on a mat while dog ran far away from home it was dark and stormy night".split()


@pytest.fixture(scope="module")
def gqa_lm():
    """Six query heads on two key/value heads, as SmolLM2's nine on three."""
    tok = train_wordpiece_tokenizer([], vocab=WORDS)
    extra = {"num_key_value_heads": 2, "attn_implementation": "sdpa"}
    cfg = TinyConfig(hidden_size=48, num_heads=6, intermediate_size=64, extra=extra)
    return tiny_causal(tok, cfg).eval(), tok


@pytest.fixture
def repeats(monkeypatch) -> list[int]:
    """Every ``repeat_kv`` call transformers' sdpa path makes (the copies this avoids)."""
    calls: list[int] = []
    real = sdpa.repeat_kv

    def spy(x: torch.Tensor, n_rep: int) -> torch.Tensor:
        calls.append(n_rep)
        return real(x, n_rep)

    monkeypatch.setattr(sdpa, "repeat_kv", spy)
    monkeypatch.delenv(GQA_ENV, raising=False)
    return calls


def test_the_switch_is_scoped_to_cpu_and_leaves_a_users_value(monkeypatch) -> None:
    monkeypatch.delenv(GQA_ENV, raising=False)
    with native_gqa("cpu"):
        assert os.environ[GQA_ENV] == "1"
    assert GQA_ENV not in os.environ
    with native_gqa(torch.device("cuda")):  # masked grouped heads would leave CUDA's flash
        assert GQA_ENV not in os.environ
    monkeypatch.setenv(GQA_ENV, "0")
    with native_gqa("cpu"):
        assert os.environ[GQA_ENV] == "0"
    assert os.environ[GQA_ENV] == "0"


def _windows(n_sent: int = 4, k: int = 3) -> tuple[list[str], list[str], list[str]]:
    rng = np.random.default_rng(0)
    lefts, sents, rights = [], [], []
    for _ in range(n_sent):
        s = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 12))))
        for _ in range(k):
            lefts.append("")
            sents.append(s)
            rights.append(" ".join(rng.choice(WORDS, size=int(rng.integers(1, 20)))))
    return lefts, sents, rights


def test_engine_scores_equal_the_copying_path(gqa_lm, repeats, monkeypatch) -> None:
    """The engine's sdpa path (architectures grouped_matmul leaves alone: switched off here)."""
    import contextlib

    from ctxsim.models.contextual import grouped_attention  # the engine imports it per call

    monkeypatch.setattr(grouped_attention, "grouped_matmul", lambda *_: contextlib.nullcontext())
    model, tok = gqa_lm
    sc = CausalPrefixScorer(model, tok)
    w = _windows()
    got = ScoringEngine(sc, EngineConfig(token_budget=64)).score(*w, ["right"])["right"]
    assert repeats == []
    monkeypatch.setenv(GQA_ENV, "0")  # the user's switch: transformers copies the heads again
    ref = ScoringEngine(sc, EngineConfig(token_budget=64)).score(*w, ["right"])["right"]
    assert repeats and set(repeats) == {3}
    np.testing.assert_array_equal(got, ref)
    assert GQA_ENV in os.environ  # the user's value stayed


def test_sampler_draws_the_samples_of_the_copying_path(gqa_lm, repeats, monkeypatch) -> None:
    model, tok = gqa_lm
    prompts = ["the cat sat on a mat", "a dog", "it was a dark and stormy night", "home"] * 2
    seeds = list(range(len(prompts)))
    s = SamplingSettings(max_new_tokens=6, top_k=50)
    switch: list[str | None] = []  # the variable at each forward: prompt pass, then the steps
    real = model.forward

    def spy(*args, **kw):
        switch.append(os.environ.get(GQA_ENV))
        return real(*args, **kw)

    monkeypatch.setattr(model, "forward", spy)
    got = sample_texts(model, tok, prompts, seeds, s, batch_size=8)
    assert repeats == []  # the prompt pass (padded) uncopied; decoding takes one query
    # only the prompt pass: a decoding step keeps transformers' own one-query path, whose bf16
    # rounding (and so bf16 samples) the switch would otherwise change
    assert switch[0] == "1" and len(switch) > 1 and set(switch[1:]) == {None}
    monkeypatch.setenv(GQA_ENV, "0")
    ref = sample_texts(model, tok, prompts, seeds, s, batch_size=8)
    assert repeats
    assert got == ref
