"""The sampler runs each distinct prompt of a batch once (a sentence's K samples share it) and
the vocabulary head only on the last prompt position: the samples must be those of each
(prompt, seed) sampled alone, in a batch of other prompts or in none."""

from __future__ import annotations

import pytest
import torch

from ctxsim.models.contextual.context_sampling import SamplingSettings, sample_texts
from ctxsim.models.contextual.generator import TinyConfig, tiny_causal, train_wordpiece_tokenizer

TINY = TinyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
WORDS = "the cat sat on a mat while dog ran far away from home it was dark and stormy night".split()


@pytest.fixture(scope="module")
def lm():
    tok = train_wordpiece_tokenizer([], vocab=WORDS)
    torch.manual_seed(0)
    return tiny_causal(tok, TINY), tok


@pytest.mark.parametrize("k", [1, 4])
def test_k_samples_of_a_prompt_equal_each_sampled_alone(lm, k) -> None:
    model, tok = lm
    sents = ["the cat sat on a mat", "a dog ran far away from home", "it was dark", "night"]
    prompts = [s for s in sents for _ in range(k)]
    seeds = list(range(100, 100 + len(prompts)))
    s = SamplingSettings(max_new_tokens=8, top_k=50)
    batched = sample_texts(model, tok, prompts, seeds, s, batch_size=len(prompts))
    alone = [
        sample_texts(model, tok, [p], [x], s, batch_size=1)[0]
        for p, x in zip(prompts, seeds, strict=True)
    ]
    assert batched == alone
    # the K samples of one prompt differ (their seeds do): the rows were not collapsed into one
    if k > 1:
        assert len(set(batched[:k])) > 1


def test_prompt_pass_runs_each_distinct_prompt_once(lm, monkeypatch) -> None:
    model, tok = lm
    rows: list[int] = []
    real = model.forward

    def spy(*args, **kw):
        if kw.get("cache", kw.get("past_key_values")) is None:  # the prompt pass
            rows.append(int(kw["input_ids"].shape[0]))
            assert kw.get("logits_to_keep") == 1
        return real(*args, **kw)

    monkeypatch.setattr(model, "forward", spy)
    prompts = ["the cat sat", "the cat sat", "a dog ran", "a dog ran", "a dog ran"]
    sample_texts(model, tok, prompts, [1, 2, 3, 4, 5], SamplingSettings(max_new_tokens=4))
    assert rows == [2]


def test_finished_rows_leave_the_batch_and_the_rest_sample_as_alone(monkeypatch) -> None:
    """Rows that reached a sentence end stop costing decoding steps; the others' samples are
    those each (prompt, seed) draws alone."""
    from ctxsim.models.contextual import context_sampling

    tok = train_wordpiece_tokenizer([], vocab=[*WORDS, "."])
    torch.manual_seed(0)
    model = tiny_causal(tok, TINY)
    monkeypatch.setattr(context_sampling, "MIN_DECODE_ROWS", 1)  # the tiny model is row-exact
    rows: list[int] = []
    real = model.forward

    def spy(*args, **kw):
        if kw.get("cache", kw.get("past_key_values")) is not None:  # a decoding step
            rows.append(int(kw["input_ids"].shape[0]))
        return real(*args, **kw)

    monkeypatch.setattr(model, "forward", spy)
    sents = ["the cat sat on a mat", "a dog ran far", "it was dark", "night"]
    prompts = [s for s in sents for _ in range(4)]
    seeds = list(range(200, 200 + len(prompts)))
    s = SamplingSettings(max_new_tokens=20, top_k=50, min_new_tokens=1)
    batched = sample_texts(model, tok, prompts, seeds, s, batch_size=len(prompts))
    assert rows[0] == len(prompts) and min(rows) < len(prompts) // 2, rows  # it shrank
    assert rows == sorted(rows, reverse=True)
    monkeypatch.setattr(model, "forward", real)
    alone = [
        sample_texts(model, tok, [p], [x], s, batch_size=1)[0]
        for p, x in zip(prompts, seeds, strict=True)
    ]
    assert batched == alone
    assert any(t.endswith(".") for t in batched)  # rows did end early


def test_no_decoding_step_after_the_last_token_is_drawn(monkeypatch) -> None:
    """max_new_tokens tokens take the prompt pass and max_new_tokens - 1 decoding steps: the
    logits after the last draw would go unused."""
    tok = train_wordpiece_tokenizer([], vocab=[*WORDS, "."])
    torch.manual_seed(0)
    model = tiny_causal(tok, TINY)
    steps: list[int] = []
    real = model.forward

    def spy(*args, **kw):
        if kw.get("cache", kw.get("past_key_values")) is not None:
            steps.append(int(kw["input_ids"].shape[0]))
        return real(*args, **kw)

    monkeypatch.setattr(model, "forward", spy)
    s = SamplingSettings(max_new_tokens=6, top_k=50, min_new_tokens=6)  # no row stops early
    sample_texts(model, tok, ["the cat sat", "a dog ran"], [1, 2], s, batch_size=2)
    assert steps == [2] * 5


def test_decoding_writes_into_a_reserved_cache_and_samples_as_concatenation(
    lm, monkeypatch
) -> None:
    """The decoding steps' keys and values go into buffers reserved after the prompt pass, not
    transformers' concatenation; the samples are the same either way."""
    from ctxsim.models.contextual import context_sampling

    model, tok = lm
    kinds: set[str] = set()
    real = model.forward

    def spy(*args, **kw):
        past = kw.get("cache", kw.get("past_key_values"))
        if past is not None:
            kinds.update(type(layer).__name__ for layer in past.layers)
        return real(*args, **kw)

    monkeypatch.setattr(model, "forward", spy)
    prompts = ["the cat sat on a mat", "a dog ran far away", "it was dark", "night"] * 2
    seeds = list(range(300, 300 + len(prompts)))
    s = SamplingSettings(max_new_tokens=10, top_k=50)
    reserved = sample_texts(model, tok, prompts, seeds, s, batch_size=len(prompts))
    assert kinds == {"ReservedLayer"}
    monkeypatch.setattr(context_sampling, "RESERVE_CACHE", False)
    kinds.clear()
    assert sample_texts(model, tok, prompts, seeds, s, batch_size=len(prompts)) == reserved
    assert kinds == {"DynamicLayer"}
