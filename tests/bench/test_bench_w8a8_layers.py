"""bench_w8a8_layers: every layer kind kept bf16 in turn, agreement with float32 per variant
(tiny causal model, no run)."""

from __future__ import annotations

import copy

import torch

from bench.bench_w8a8_layers import layer_kinds, sensitivity, slice_calls, variants
from ctxsim.models.contextual.generator import (
    CausalPrefixScorer,
    tiny_causal,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.score_engine import EngineConfig
from tests.models.contextual.tiny_scoring import TINY, WORDS, windows

KINDS = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


def test_each_kind_kept_bf16_in_turn_against_float32() -> None:
    tok = train_wordpiece_tokenizer([], vocab=WORDS)
    fp32 = CausalPrefixScorer(tiny_causal(tok, TINY, seed=0), tok)
    assert layer_kinds(fp32.model) == KINDS  # the head is not a kind
    plan = variants(layer_kinds(fp32.model), ["down_proj+up_proj"])
    assert plan["bf16"] is None and plan["int8 all"] == ()
    assert plan["keep down_proj"] == ("down_proj",)
    assert plan["keep down_proj+up_proj"] == ("down_proj", "up_proj")
    lefts, sents, rights = windows(30, seed=2)
    rights = [r or "the end" for r in rights]
    call = {"windows": (lefts, sents, rights), "directions": ("right",)}
    call["config"] = EngineConfig(token_budget=512)
    calls = slice_calls([call, call], 20)
    assert [len(c["windows"][0]) for c in calls] == [10, 10]

    def bf16() -> CausalPrefixScorer:
        return CausalPrefixScorer(copy.deepcopy(fp32.model).to(torch.bfloat16), tok)

    rows = sensitivity(calls, fp32, bf16, plan, fused=False)
    by = {r["variant"]: r for r in rows}
    assert list(by) == ["bf16", "int8 all", *(f"keep {k}" for k in KINDS), "keep down_proj+up_proj"]
    assert by["bf16"]["kept_bf16"] == "all" and by["int8 all"]["kept_bf16"] == "none"
    assert all(r["windows"] == 20 and r["engine_cpu_s"] > 0 for r in rows)
    # int8 products move the scores further from float32 than bf16 weights alone do
    assert 0 < by["bf16"]["fp32_mean_abs"] < by["int8 all"]["fp32_mean_abs"]
    assert all(r["fp32_spearman"] > 0.9 for r in rows)
    assert len({r["fp32_mean_abs"] for r in rows}) > len(rows) // 2  # really other variants
