"""The batched scoring engine (models/contextual/score_engine.py): same scores as the naive way,
whatever the
batching; OOM back-off keeps every pair; sources are encoded once; Eq. (3) combination."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctxsim.models.contextual.eq3_combine import Lambdas, combine_eq3, log_sigmoid
from ctxsim.models.contextual.generator import (
    DIRECTIONS,
    CausalPrefixScorer,
    Seq2SeqScorer,
    tiny_causal,
    tiny_seq2seq,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine, naive_score
from tests.models.contextual.tiny_scoring import TINY, WORDS, windows


@pytest.fixture(scope="module")
def tok():
    return train_wordpiece_tokenizer([], vocab=WORDS)


@pytest.fixture(scope="module", params=["seq2seq", "causal"])
def scorer(request, tok):
    if request.param == "seq2seq":
        sc = Seq2SeqScorer(tiny_seq2seq(tok, TINY), tok)
    else:
        sc = CausalPrefixScorer(tiny_causal(tok, TINY), tok)
    sc.train(False)
    return sc


@pytest.mark.parametrize("budget,max_batch", [(10_000, 256), (60, 3), (1, 1)])
def test_engine_equals_naive_whatever_the_batching(scorer, budget, max_batch):
    lefts, sents, rights = windows(24)
    naive = naive_score(scorer, lefts, sents, rights)
    eng = ScoringEngine(scorer, EngineConfig(token_budget=budget, max_batch=max_batch))
    got = eng.score(lefts, sents, rights)
    for d in DIRECTIONS:
        assert got[d].shape == (24,) and got[d].dtype == np.float32
        np.testing.assert_allclose(got[d], naive[d], rtol=1e-4, atol=1e-5)
    if max_batch == 1:
        assert eng.stats.forward_calls == eng.stats.distinct_requests


def test_bf16_on_cpu_keeps_scores_close_and_their_order(scorer):
    """bf16 autocast on CPU (an option for CPUs with bf16 units) moves scores only slightly."""
    lefts, sents, rights = windows(40, seed=7)
    ref = ScoringEngine(scorer).score(lefts, sents, rights)
    got = ScoringEngine(scorer, EngineConfig(bf16_on_cpu=True)).score(lefts, sents, rights)
    for d in DIRECTIONS:
        assert got[d].dtype == np.float32 and np.isfinite(got[d]).all()
        assert not np.array_equal(got[d], ref[d])  # bf16 really ran
        np.testing.assert_allclose(got[d], ref[d], atol=0.1)
        assert np.corrcoef(got[d], ref[d])[0, 1] > 0.99


def test_padding_next_to_long_rows_does_not_change_a_score(scorer):
    short = (["a cat"], ["the dog"], ["it was"])
    alone = ScoringEngine(scorer).score(*short)
    lefts, sents, rights = windows(12, seed=3)
    mixed = ScoringEngine(scorer, EngineConfig(token_budget=100_000)).score(
        short[0] + lefts, short[1] + sents, short[2] + rights
    )
    for d in DIRECTIONS:
        assert mixed[d][0] == pytest.approx(float(alone[d][0]), abs=1e-5)


def test_simulated_oom_halves_batches_and_keeps_every_pair(scorer):
    lefts, sents, rights = windows(30, seed=5)
    ref = ScoringEngine(scorer).score(lefts, sents, rights)
    seen: list[int] = []

    def hook(batch_size: int) -> None:
        seen.append(batch_size)
        if batch_size > 3:
            raise torch.OutOfMemoryError("simulated CUDA out of memory")

    eng = ScoringEngine(scorer, EngineConfig(token_budget=100_000), oom_hook=hook)
    got = eng.score(lefts, sents, rights)
    assert eng.stats.oom_retries > 0 and max(seen) > 3
    for d in DIRECTIONS:
        np.testing.assert_allclose(got[d], ref[d], rtol=1e-4, atol=1e-5)
    assert eng.stats.distinct_requests == 3 * len(set(zip(lefts, sents, rights, strict=True)))
    assert all(np.isfinite(got[d]).all() for d in DIRECTIONS)


def test_a_failed_batch_frees_its_memory_before_the_halves_run(scorer, monkeypatch):
    """Seen on an H200: halves retried inside the except block kept the failed forward's frames
    (and its activations) alive through the traceback, until a 2 MB allocation failed."""
    import weakref

    real = scorer.token_logprobs
    alive_at_retry: list[bool] = []
    failed: list[weakref.ref] = []

    def token_logprobs(direction, srcs, tgts):
        if failed:
            alive_at_retry.append(failed[-1]() is not None)
        if len(srcs) > 3:
            activations = torch.zeros(1024)  # what the failed forward had allocated
            failed.append(weakref.ref(activations))
            raise torch.OutOfMemoryError("simulated CUDA out of memory")
        return real(direction, srcs, tgts)

    monkeypatch.setattr(scorer, "token_logprobs", token_logprobs)
    lefts, sents, rights = windows(16, seed=7)
    # the padded path (token_logprobs); the grouped path: test_score_engine_prefix.py
    eng = ScoringEngine(scorer, EngineConfig(token_budget=100_000, group_prompts=False))
    got = eng.score(lefts, sents, rights, ("fwd",))
    assert eng.stats.oom_retries > 0 and alive_at_retry
    assert not any(alive_at_retry)
    assert np.isfinite(got["fwd"]).all()


def test_oom_on_a_single_pair_is_raised(scorer):
    def hook(batch_size: int) -> None:
        raise torch.OutOfMemoryError("always")

    with pytest.raises(torch.OutOfMemoryError):
        ScoringEngine(scorer, oom_hook=hook).score(["a"], ["b"], ["c"])


def test_duplicates_computed_once_and_sources_shared(tok):
    sc = Seq2SeqScorer(tiny_seq2seq(tok, TINY), tok)
    sc.train(False)
    calls = []
    orig = sc.encode

    def counting_encode(direction, sources):
        calls.append((direction, len(sources)))
        return orig(direction, sources)

    sc.encode = counting_encode  # type: ignore[method-assign]
    lefts = ["a cat sat"] * 10 + ["the dog ran"] * 10
    rights = ["on the mat"] * 10 + ["far away"] * 10
    sents = [f"{w} was dark" for w in WORDS[:10]] * 2
    lefts, sents, rights = lefts + lefts[:5], sents + sents[:5], rights + rights[:5]  # 5 duplicates
    eng = ScoringEngine(sc)
    out = eng.score(lefts, sents, rights, directions=("fwd",))
    assert eng.stats.requests == 25 and eng.stats.distinct_requests == 20
    assert sum(n for d, n in calls if d == "fwd") == 2  # two distinct (c<, c>) sources
    np.testing.assert_array_equal(out["fwd"][20:], out["fwd"][:5])


def test_combine_eq3_and_log_sigmoid():
    disc = log_sigmoid(np.array([0.0, 40.0, -40.0]))
    np.testing.assert_allclose(disc, [np.log(0.5), 0.0, -40.0], atol=1e-6)
    s = combine_eq3(disc, np.ones(3), 2 * np.ones(3), 3 * np.ones(3), Lambdas(1.0, 0.5, 0.0, 2.0))
    np.testing.assert_allclose(s, disc + 0.5 + 6.0, rtol=1e-6)
    assert s.dtype == np.float32
