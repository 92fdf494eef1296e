"""The engine's grouped-prompt path (EngineConfig.group_prompts): each distinct prompt, or shared
beginning of prompts, runs once per group and the targets run on its keys/values in
length-sorted batches. It must give the scores of the padded path and of one pair per call,
whatever the budgets, chunking, prefetching and OOM halvings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctxsim.models.contextual.generator import (
    DIRECTIONS,
    CausalPrefixScorer,
    Seq2SeqScorer,
    TinyConfig,
    tiny_causal,
    tiny_seq2seq,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine, naive_score

TINY = TinyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
WORDS = "the cat sat on a mat while dog ran far away from home it was dark and stormy night".split()
TOL = 2e-5  # float32 rounding of the same sums in other batch shapes


@pytest.fixture(scope="module")
def tok():
    return train_wordpiece_tokenizer([], vocab=WORDS)


@pytest.fixture(scope="module")
def causal(tok):
    return CausalPrefixScorer(tiny_causal(tok, TINY), tok)


def text(rng: np.random.Generator, lo: int = 1, hi: int = 14) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(lo, hi))))


def k_windows(n_sent: int, k: int, seed: int = 0, left: bool = True):
    """Each sentence against k contexts (the books_generated shape: a sentence is the common
    prompt of its k right-term windows); contexts of very different lengths."""
    rng = np.random.default_rng(seed)
    lefts, sents, rights = [], [], []
    for _ in range(n_sent):
        s = text(rng)
        for _ in range(k):
            lefts.append(text(rng) if left else "")
            sents.append(s)
            rights.append(text(rng, 1, 30))
    return lefts, sents, rights


def scores(sc, windows, directions=DIRECTIONS, **cfg):
    eng = ScoringEngine(sc, EngineConfig(**cfg))
    return eng.score(*windows, directions), eng


def max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.max(np.abs(a[d] - b[d]))) for d in a)


@pytest.mark.parametrize("budget", [16, 96, 8192])
@pytest.mark.parametrize("head_chunk", [0, 3, 128])
def test_grouped_path_gives_the_padded_paths_scores(causal, budget, head_chunk):
    w = k_windows(6, 4)
    new, eng = scores(causal, w, token_budget=budget, head_chunk=head_chunk)
    old, _ = scores(causal, w, token_budget=8192, group_prompts=False)
    assert max_diff(new, old) < TOL
    assert eng.stats.forward_calls > 0 and eng.stats.run_tokens > 0


def test_grouped_path_equals_one_pair_per_call(causal):
    w = k_windows(3, 3, seed=1)
    new, _ = scores(causal, w, token_budget=64, head_chunk=5)
    assert max_diff(new, naive_score(causal, *w)) < TOL


@pytest.mark.parametrize("k", [1, 2, 7])
def test_k_contexts_per_sentence_and_no_left_context(causal, k):
    """K = 1 (no prompt shared) up to K = 7, with the left context empty as in generated
    continuations (the prompt is the sentence alone)."""
    w = k_windows(5, k, seed=k, left=False)
    new, _ = scores(causal, w, ["right"], token_budget=48)
    assert max_diff(new, naive_score(causal, *w, directions=["right"])) < TOL


def test_empty_slots_of_pmi_null_windows(causal):
    """Null windows leave the sentence (or everything but the target) empty: prompts that are
    only the template, or only the start token."""
    rng = np.random.default_rng(3)
    n = 8
    rights = [text(rng) for _ in range(n)]
    for lefts, sents in (([text(rng) for _ in range(n)], [""] * n), ([""] * n, [""] * n)):
        w = (lefts, sents, rights)
        new, _ = scores(causal, w, ["right"], token_budget=32)
        assert max_diff(new, naive_score(causal, *w, directions=["right"])) < TOL


def test_an_empty_target_is_an_error_in_both_paths(causal):
    w = (["the cat"], ["sat on a mat"], [""])
    for group in (True, False):
        with pytest.raises(ValueError, match="empty target"):
            scores(causal, w, ["right"], group_prompts=group)


def test_windows_longer_than_the_budget_run_one_at_a_time(causal):
    """A budget below one request's length still scores every request (one per batch)."""
    w = k_windows(3, 3, seed=4)
    new, eng = scores(causal, w, ["left", "right"], token_budget=4, max_batch=1)
    old, _ = scores(causal, w, ["left", "right"], group_prompts=False)
    assert max_diff(new, old) < TOL
    assert eng.stats.forward_calls >= len(set(w[1]))


def test_shared_beginnings_of_left_term_prompts(causal):
    """Left-term prompts ("Passage: ___ {sentence} {right}") of one sentence share their
    beginning; the grouped path runs it once (prefix_groups) and the rest on its cache."""
    w = k_windows(4, 5, seed=5)
    new, eng = scores(causal, w, ["left"], token_budget=256)
    assert max_diff(new, naive_score(causal, *w, directions=["left"])) < TOL
    assert eng.stats.encoder_sources < len(set(zip(w[1], w[2], strict=True)))


def test_prefetch_and_batch_order_do_not_change_scores(causal):
    w = k_windows(5, 4, seed=6)
    a, _ = scores(causal, w, token_budget=40, prefetch=True)
    b, _ = scores(causal, w, token_budget=40, prefetch=False)
    assert max_diff(a, b) < TOL
    perm = np.random.default_rng(0).permutation(len(w[0]))
    c, _ = scores(causal, tuple([x[i] for i in perm] for x in w), token_budget=40)
    assert max_diff({d: a[d][perm] for d in a}, c) < TOL


@pytest.mark.parametrize("fail_above", [1, 3])
def test_oom_halves_prefix_groups_and_batches_and_keeps_every_pair(causal, fail_above):
    w = k_windows(6, 4, seed=7)
    calls = []

    def hook(n: int) -> None:
        calls.append(n)
        if n > fail_above:
            raise torch.OutOfMemoryError("simulated")

    eng = ScoringEngine(causal, EngineConfig(token_budget=4096), oom_hook=hook)
    got = eng.score(*w)
    ref, _ = scores(causal, w, group_prompts=False)
    assert max_diff(got, ref) < TOL
    assert eng.stats.oom_retries > 0
    assert max(calls) > fail_above  # the first tries were bigger than what fits


def test_fewer_tokens_run_than_the_padded_path_on_shared_prompts(causal):
    """The point of the path: on K windows per sentence the model runs fewer tokens (prompts
    once, targets sorted by length) than the padded path, and close to the targets alone."""
    w = k_windows(12, 8, seed=8, left=False)
    _, new = scores(causal, w, ["right"], token_budget=512)
    _, old = scores(causal, w, ["right"], token_budget=512, group_prompts=False)
    assert new.stats.run_tokens < old.stats.run_tokens
    assert new.stats.target_tokens == old.stats.target_tokens
    assert new.stats.run_tokens / new.stats.target_tokens < 1.5


def test_a_targets_last_token_is_not_run(causal, monkeypatch):
    """A target's last token predicts nothing scored: the grouped path runs each window's prompt
    rest and target but that token (one-token targets: nothing past the prefix pass), and the
    scores stay those of one pair per call."""
    w = k_windows(4, 3, seed=3, left=False)
    one = (w[0], w[1], [r.split()[0] for r in w[2]])  # every target one word, one token
    base = causal.model.base_model
    real = base.forward
    widths: list[tuple[int, bool]] = []  # (columns run, on a prefix's keys/values)

    def spy(*args, **kw):
        cached = kw.get("past_key_values", kw.get("cache")) is not None
        widths.append((int(kw["input_ids"].shape[1]), cached))
        return real(*args, **kw)

    monkeypatch.setattr(base, "forward", spy)
    for windows in (w, one):
        widths.clear()
        got, _ = scores(causal, windows, ["right"], token_budget=256)
        runs = [n for n, cached in widths if cached]
        if windows is one:
            assert runs == []
        else:
            longest = max(len(t) for t in causal.tokenize(windows[2]))
            assert max(runs) == longest - 1
        monkeypatch.setattr(base, "forward", real)
        want = naive_score(causal, *windows, ["right"])
        monkeypatch.setattr(base, "forward", spy)
        assert float(np.max(np.abs(got["right"] - want["right"]))) < TOL


def test_tokenised_once_across_calls(causal, monkeypatch):
    eng = ScoringEngine(causal, EngineConfig())
    w = k_windows(2, 2, seed=9)
    eng.score(*w, ["right"])
    seen: list[str] = []
    orig = causal.tokenize

    def spy(texts):
        seen.extend(texts)
        return orig(texts)

    monkeypatch.setattr(causal, "tokenize", spy)
    eng.score(*w, ["right"])
    assert seen == []


def test_seq2seq_keeps_its_own_path(tok):
    """Only causal scorers have prefix caches; a seq2seq scorer scores as before."""
    sc = Seq2SeqScorer(tiny_seq2seq(tok, TINY), tok)
    sc.train(False)
    w = k_windows(3, 3, seed=10)
    a, _ = scores(sc, w, token_budget=64)
    b, _ = scores(sc, w, token_budget=64, group_prompts=False)
    assert max_diff(a, b) == 0.0


def test_a_failed_continuation_frees_its_memory_before_the_halves_run(causal, monkeypatch):
    """The halves run after the except block: inside it, the traceback would keep the failed
    forward's activations alive (seen on an H200 for the padded path)."""
    import weakref

    real = causal.run_continuation
    alive_at_retry: list[bool] = []
    failed: list[weakref.ref] = []

    def run_continuation(enc, batch, head_chunk=0):
        if failed:
            alive_at_retry.append(failed[-1]() is not None)
        if len(batch.row) > 3:
            activations = torch.zeros(1024)  # what the failed forward had allocated
            failed.append(weakref.ref(activations))
            raise torch.OutOfMemoryError("simulated CUDA out of memory")
        return real(enc, batch, head_chunk)

    monkeypatch.setattr(causal, "run_continuation", run_continuation)
    eng = ScoringEngine(causal, EngineConfig(token_budget=100_000))
    got = eng.score(*k_windows(4, 4, seed=11), ("right",))
    assert eng.stats.oom_retries > 0 and alive_at_retry
    assert not any(alive_at_retry)
    assert np.isfinite(got["right"]).all()


def test_gemma3_sliding_window_and_softcap_on_the_grouped_path(tok):
    """Gemma-3 layers keep a sliding window of keys/values (shorter than the prompts here) and
    soft-cap the logits: the gathered cache copies must keep both right."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    conf = Gemma3TextConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=6,
        pad_token_id=tok.pad_token_id,
        final_logit_softcapping=30.0,
    )
    sc = CausalPrefixScorer(Gemma3ForCausalLM(conf), tok)
    w = k_windows(4, 3, seed=12)
    new, _ = scores(sc, w, token_budget=48, head_chunk=4)
    assert max_diff(new, naive_score(sc, *w)) < TOL


def test_int8_scorers_keep_the_padded_path_unless_asked(tok):
    """Dynamic int8 takes one activation scale per batch, so its scores depend on the batching:
    by default (group_prompts None) such a scorer keeps the padded path, and its scores, exactly;
    group_prompts=True still runs it grouped."""
    from ctxsim.models.contextual.quantize import quantize_int8

    sc = quantize_int8(CausalPrefixScorer(tiny_causal(tok, TINY), tok))
    w = k_windows(4, 4, seed=13, left=False)
    auto, eng_auto = scores(sc, w, ["right"], token_budget=64)
    padded, eng_pad = scores(sc, w, ["right"], token_budget=64, group_prompts=False)
    assert max_diff(auto, padded) == 0.0
    assert eng_auto.stats.padded_tokens == eng_pad.stats.padded_tokens
    _, eng_grouped = scores(sc, w, ["right"], token_budget=64, group_prompts=True)
    assert eng_grouped.stats.padded_tokens == eng_grouped.stats.run_tokens
    assert eng_grouped.stats.padded_tokens != eng_pad.stats.padded_tokens
    # a float32 scorer is grouped by default
    _, eng_fp32 = scores(CausalPrefixScorer(tiny_causal(tok, TINY), tok), w, ["right"])
    assert eng_fp32.stats.padded_tokens == eng_fp32.stats.run_tokens


def test_the_vocabulary_head_chunk_follows_the_device_unless_set() -> None:
    """None: chunks of 128 on a CPU (the logits stay in its caches), the whole head at once on
    CUDA (one large product); a chunk the user sets is kept on both."""
    from ctxsim.models.contextual.score_batching import head_chunk_for

    assert head_chunk_for(EngineConfig(), "cpu") == 128
    assert head_chunk_for(EngineConfig(), "cuda") == 0
    assert head_chunk_for(EngineConfig(head_chunk=64), "cuda") == 64
    assert head_chunk_for(EngineConfig(head_chunk=0), "cpu") == 0


def test_cache_keyword_follows_the_models_forward(causal) -> None:
    """transformers renamed ``past_key_values`` to ``cache`` (the old name warns on every run):
    the keys/values go under whichever name the model's forward takes, and come back either way."""
    import inspect

    from transformers.modeling_outputs import BaseModelOutputWithPast

    from ctxsim.models.contextual.generator.protocol import output_cache, with_cache

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None):  # noqa: ANN001, ANN202
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None):  # noqa: ANN001, ANN202
            return input_ids

    assert with_cache(Old(), "kv") == {"past_key_values": "kv"}
    assert with_cache(New(), "kv") == {"cache": "kv"}
    model = causal.model.base_model
    (key,) = with_cache(model, None)
    assert key in inspect.signature(model.forward).parameters
    out = model(input_ids=torch.tensor([[4, 5, 6]]), use_cache=True, return_dict=True)
    assert output_cache(out) is not None
    assert output_cache(BaseModelOutputWithPast(last_hidden_state=torch.zeros(1))) is None


def test_compiled_scorer_gives_the_eager_scores_and_can_be_undone(tok):
    """Each layer's MLP and norms under torch.compile (``blocks``, the engine's ``compile``;
    dynamic shapes: batches of other lengths reuse the graph) score as eager does, and
    ``uncompiled`` gives the eager modules back (a FLOP counter or training needs them); the
    ``decoder`` scope wraps the whole stack instead (scored through in bench_gpu and
    bench_lm_route: tracing it here would cost the suite seconds)."""
    sc = CausalPrefixScorer(tiny_causal(tok, TINY), tok)
    w = k_windows(4, 3, seed=5, left=False)
    eager, _ = scores(sc, w, ["right"], token_budget=48)
    assert sc.compile(backend="eager")  # traced by dynamo as for inductor, no kernels built
    got, _ = scores(sc, w, ["right"], token_budget=48, compile=True)
    layer = sc.model.model.layers[0]
    assert sc.compiled == "blocks" and hasattr(layer.mlp, "_orig_mod")
    assert max_diff(got, eager) < 1e-4
    assert sc.compile("decoder", backend="eager") and sc.compiled == "decoder"
    assert hasattr(sc.model.model, "_orig_mod") and not hasattr(layer.mlp, "_orig_mod")
    sc.uncompiled()
    assert sc.compiled is None and not hasattr(sc.model.model, "_orig_mod")
    assert max_diff(scores(sc, w, ["right"], token_budget=48)[0], eager) == 0.0


def test_a_machine_that_cannot_compile_scores_eager_with_a_warning(tok, monkeypatch):
    sc = CausalPrefixScorer(tiny_causal(tok, TINY), tok)

    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.warns(UserWarning, match="no C.. compiler"):
        assert not sc.compile()
    assert sc.compiled is None and not hasattr(sc.model.model.layers[0].mlp, "_orig_mod")
    with pytest.raises(ValueError, match="scope"):
        sc.compile("everything")


def test_build_requests_lays_out_what_build_ids_does(causal):
    """The causal scorer lays out each distinct source's prompt once for many targets; the
    result is ``build_ids``' for every example, cuts of long parts included."""
    w = k_windows(4, 3, seed=7)
    texts = sorted(set(w[0]) | set(w[1]) | set(w[2]))
    ids = dict(zip(texts, causal.tokenize(texts), strict=True))
    for d, slot in (("fwd", 1), ("left", 0), ("right", 2)):
        srcs = [
            tuple(None if k == slot else ids[p] for k, p in enumerate(win))
            for win in zip(*w, strict=True)
        ]
        tgts = [ids[win[slot]] for win in zip(*w, strict=True)]
        want = [causal.build_ids(d, s, t) for s, t in zip(srcs, tgts, strict=True)]
        assert causal.build_requests(d, srcs, tgts) == want


def test_engine_tokenises_with_the_tokenizer_threads_only_when_asked(causal, monkeypatch):
    """EngineConfig.tokenizer_threads: the Rust tokenizer's threads on while the engine
    tokenises (None: on CUDA only), the environment as it was afterwards."""
    import os

    seen: list[str | None] = []
    real = causal.tokenize

    def spy(texts):
        seen.append(os.environ.get("TOKENIZERS_PARALLELISM"))
        return real(texts)

    monkeypatch.setattr(causal, "tokenize", spy)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    w = k_windows(2, 2, seed=8)
    scores(causal, w, ["right"], tokenizer_threads=True)
    scores(causal, w, ["right"])  # None on a CPU scorer: off
    assert seen == ["true", "false"]
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
