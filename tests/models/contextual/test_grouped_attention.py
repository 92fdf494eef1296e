"""Attention as two products per key/value head group (models/contextual/grouped_attention.py):
the logits of transformers' own sdpa path on tiny Llama and Gemma 3 models with grouped heads,
padding and sliding windows; switched on for the duration only, on CPU, for the architectures
it reproduces."""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

from ctxsim.models.contextual.generator import (
    CausalPrefixScorer,
    TinyConfig,
    tiny_causal,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.grouped_attention import (
    GROUPED_MATMUL,
    grouped_matmul,
    grouped_matmul_attention,
)
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine
from tests.models.contextual.tiny_scoring import WORDS


def llama() -> torch.nn.Module:
    torch.manual_seed(0)
    conf = LlamaConfig(
        vocab_size=60,
        hidden_size=96,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        intermediate_size=128,
    )
    return LlamaForCausalLM(conf).eval()


def gemma3() -> torch.nn.Module:
    torch.manual_seed(0)
    conf = Gemma3TextConfig(
        vocab_size=60,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=5,
    )
    return Gemma3ForCausalLM(conf).eval()


@pytest.mark.parametrize("make", [llama, gemma3])
def test_logits_of_the_sdpa_path_with_padding_and_grouped_heads(make) -> None:
    model = make()
    ids = torch.randint(1, 60, (3, 14), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 14, dtype=torch.long)
    mask[0, :5] = 0  # left padding, as the engine's prefix passes have it
    mask[1, :2] = 0
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        with grouped_matmul(model, "cpu"):
            assert model.config._attn_implementation == GROUPED_MATMUL
            got = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert model.config._attn_implementation == "sdpa"  # its own again
    real = mask.bool()
    assert float((got - want)[real].abs().max()) < 1e-5


def test_switched_only_on_cpu_for_known_architectures_and_back_after_an_error() -> None:
    model = llama()
    with grouped_matmul(model, "cuda"):  # CUDA: the fused kernels stay
        assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError), grouped_matmul(model, "cpu"):
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"

    class Other:  # an architecture it does not reproduce (e.g. relative position biases)
        config = type("C", (), {"model_type": "t5", "_attn_implementation": "sdpa"})()

    other = Other()
    with grouped_matmul(other, "cpu"):
        assert other.config._attn_implementation == "sdpa"


def test_what_it_does_not_reproduce_is_an_error() -> None:
    q = torch.zeros(1, 2, 3, 4)
    kv = torch.zeros(1, 1, 3, 4)
    module = torch.nn.Module().eval()
    with pytest.raises(ValueError, match="position_bias"):
        grouped_matmul_attention(module, q, kv, kv, None, position_bias=torch.zeros(1))
    with pytest.raises(ValueError, match="inference only"):
        grouped_matmul_attention(module.train(), q, kv, kv, None, dropout=0.1)


def test_the_engine_attends_with_it_on_cpu_and_restores_the_model(monkeypatch) -> None:
    tok = train_wordpiece_tokenizer([], vocab=WORDS)
    sc = CausalPrefixScorer(
        tiny_causal(
            tok,
            TinyConfig(hidden_size=32, num_layers=2, num_heads=4, extra={"num_key_value_heads": 2}),
        ),
        tok,
    )
    seen: list[str] = []
    real = sc.model.base_model.forward

    def spy(*args, **kw):
        seen.append(sc.model.config._attn_implementation)
        return real(*args, **kw)

    monkeypatch.setattr(sc.model.base_model, "forward", spy)
    lefts, sents = ["", ""], ["the cat sat on a mat", "it was dark"]
    ScoringEngine(sc, EngineConfig()).score(
        lefts, sents, ["a dog ran far", "and stormy"], ["right"]
    )
    assert seen and set(seen) == {GROUPED_MATMUL}
    assert sc.model.config._attn_implementation == "sdpa"
