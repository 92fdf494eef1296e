"""bench_lm_route's replay: every engine on the same captured calls, a bfloat16-weights scorer
beside the stage's, the profile per engine (tiny causal model, no run)."""

from __future__ import annotations

import copy

import numpy as np
import torch
from scipy.stats import spearmanr

from bench.bench_lm_route import ENGINES, flash_attention, profile, run_engine
from ctxsim.models.contextual.generator import (
    CausalPrefixScorer,
    tiny_causal,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.score_engine import EngineConfig
from tests.models.contextual.tiny_scoring import TINY, WORDS, windows


def test_replay_of_the_stage_and_bf16_weights_engines() -> None:
    tok = train_wordpiece_tokenizer([], vocab=WORDS)
    fp32 = CausalPrefixScorer(tiny_causal(tok, TINY, seed=0), tok)
    bf16 = copy.deepcopy(fp32)
    bf16.model.to(torch.bfloat16)
    lefts, sents, rights = windows(40, seed=1)
    rights = [r or "the end" for r in rights]  # every continuation has a target
    calls = [
        {
            "windows": (lefts, sents, rights),
            "directions": ("right",),
            "config": EngineConfig(token_budget=512),
            "scorer": fp32,
        }
    ]
    got = {}
    for name, (_, group, which) in ENGINES.items():
        got[name] = run_engine(calls, group, bf16 if which == "bf16" else None)
        assert got[name]["scores"].shape == (40,) and got[name]["cpu_s"] > 0
    # the float32 engines agree to rounding; bf16 weights move the values, not the order
    np.testing.assert_allclose(got["old"]["scores"], got["new"]["scores"], atol=1e-4)
    assert not np.allclose(got["bf16w"]["scores"], got["new"]["scores"], atol=1e-6)
    assert spearmanr(got["bf16w"]["scores"], got["new"]["scores"]).statistic > 0.95
    # grouping runs each distinct sentence once: fewer tokens than padded batches
    old, new = got["old"]["stats"], got["new"]["stats"]
    assert new.target_tokens == old.target_tokens
    assert new.run_tokens < old.padded_tokens
    # int8 products on the bf16 weights (the w8a8b engine's scorer): near bf16, not equal
    from ctxsim.models.contextual.quantize import smooth_quantize_scorer

    w8a8 = smooth_quantize_scorer(copy.deepcopy(bf16), fused=False)
    got["w8"] = run_engine(calls, True, w8a8)
    assert not np.allclose(got["w8"]["scores"], got["bf16w"]["scores"], atol=1e-6)
    assert spearmanr(got["w8"]["scores"], got["bf16w"]["scores"]).statistic > 0.95
    # torch's attention kernel instead of the engine's grouped products: the same to rounding
    seen: list[str] = []
    real = fp32.model.base_model.forward

    def spy(*args, **kw):
        seen.append(fp32.model.config._attn_implementation)
        return real(*args, **kw)

    fp32.model.base_model.forward = spy
    with flash_attention(True):
        flash = run_engine(calls, True)
    del fp32.model.base_model.forward
    assert set(seen) == {"sdpa"}
    np.testing.assert_allclose(flash["scores"], got["new"]["scores"], atol=1e-5)
    rows = profile(calls, True, 20, top=3, scorer=bf16, engine="bf16w")
    assert len(rows) == 3 and {r["engine"] for r in rows} == {"bf16w"}
