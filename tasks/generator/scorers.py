"""How the `generator` stage builds its generative scorer from its config: a from-scratch tiny
model (``tiny-random``), a pretrained backbone (BERT2BERT warm start or a causal prefix LM), or a
student shaped after a distillation teacher."""

from __future__ import annotations

from typing import Any

import torch

from ctxsim.models.contextual.generator import (
    DIRECTIONS,
    CausalPrefixScorer,
    GenerativeScorer,
    Limits,
    Seq2SeqScorer,
    TinyConfig,
    add_control_tokens,
    tiny_causal,
    tiny_seq2seq,
    train_wordpiece_tokenizer,
    warm_start_seq2seq,
)
from ctxsim.models.contextual.generator.distill import student_like
from ctxsim.models.registry import resolve_model
from ctxsim.tasks.generator.params import TINY, GeneratorParams


def limits(p: GeneratorParams) -> Limits:
    """The token limits of context and sentence the scorer truncates to."""
    return Limits(
        max_context_tokens=p.max_context_tokens, max_sentence_tokens=p.max_sentence_tokens
    )


def build_scorer(
    p: GeneratorParams,
    train_texts: list[str],
    device: str,
    seed: int,
    tokenizer: Any = None,
    teacher: CausalPrefixScorer | None = None,
) -> tuple[GenerativeScorer, Any, str | None]:
    """(scorer, tokenizer, resolved backbone dir or None for tiny-random); with
    ``distill_from``, a student shaped after ``teacher``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if p.distill_from is not None:
        teacher = teacher if teacher is not None else build_teacher(p, device)
        cfg = TinyConfig(p.tiny_hidden, p.tiny_layers, p.tiny_heads, p.tiny_intermediate)
        student = student_like(teacher, cfg, seed, p.distill_svd_init)
        return student, student.tokenizer, None
    if p.backbone == TINY:
        tok = tokenizer or train_wordpiece_tokenizer(train_texts, p.tokenizer_vocab)
        cfg = TinyConfig(p.tiny_hidden, p.tiny_layers, p.tiny_heads, p.tiny_intermediate)
        if p.backend == "causal":
            return (
                CausalPrefixScorer(
                    tiny_causal(tok, cfg, seed), tok, p.templates, limits(p), device
                ),
                tok,
                None,
            )
        models: Any = (
            tiny_seq2seq(tok, cfg, seed)
            if p.shared
            else {d: tiny_seq2seq(tok, cfg, seed + i) for i, d in enumerate(DIRECTIONS)}
        )
        return Seq2SeqScorer(models, tok, limits(p), device), tok, None
    path = str(resolve_model(p.backbone, p.model_cache_dir))
    if p.backend == "causal":
        tok = tokenizer or AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        return CausalPrefixScorer(model, tok, p.templates, limits(p), device), tok, path
    tok = tokenizer or AutoTokenizer.from_pretrained(path)
    add_control_tokens(tok)
    models = (
        warm_start_seq2seq(path, tok, seed)
        if p.shared
        else {d: warm_start_seq2seq(path, tok, seed + i) for i, d in enumerate(DIRECTIONS)}
    )
    return Seq2SeqScorer(models, tok, limits(p), device), tok, path


def build_teacher(p: GeneratorParams, device: str) -> CausalPrefixScorer:
    """The distillation teacher: a pretrained causal LM with this config's templates."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert p.distill_from is not None
    path = str(resolve_model(p.distill_from, p.model_cache_dir))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return CausalPrefixScorer(model, tok, p.templates, limits(p), device)
