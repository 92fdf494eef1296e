"""A small causal scorer distilled from a large one.

The student shares the teacher's tokenizer and prompt templates, so both see the very same
token ids and the student can match the teacher's next-token distribution at every target
token (Hinton et al. 2015: KL at temperature T, scaled by T^2, mixed with the usual
cross-entropy on the text). Its tied embedding starts from the teacher's embedding projected
on its top singular directions, so the vocabulary geometry is not learnt again from scratch.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from ctxsim.models.contextual.generator.build import TinyConfig, tiny_causal
from ctxsim.models.contextual.generator.causal import CausalPrefixScorer


def teacher_embedding_projection(teacher_embedding: torch.Tensor, dim: int) -> torch.Tensor:
    """(vocab, dim) rows whose inner products best keep the teacher's (rank-``dim`` SVD),
    rescaled to the teacher's mean row norm."""
    w = teacher_embedding.detach().float()
    if dim >= w.shape[1]:
        return w[:, :dim].clone()
    u, s, _ = torch.linalg.svd(w, full_matrices=False)
    proj = u[:, :dim] * s[:dim]
    scale = w.norm(dim=1).mean() / proj.norm(dim=1).mean().clamp(min=1e-12)
    return proj * scale


def student_like(
    teacher: CausalPrefixScorer, cfg: TinyConfig, seed: int = 0, svd_init: bool = True
) -> CausalPrefixScorer:
    """A randomly initialised Llama-style student with the teacher's tokenizer, templates and
    limits (tied input/output embedding, sized by ``cfg``)."""
    tied = replace(cfg, extra={**cfg.extra, "tie_word_embeddings": True})
    model = tiny_causal(teacher.tokenizer, tied, seed, vocab_size=teacher.vocab_size)
    if svd_init:
        emb = teacher.model.get_input_embeddings().weight
        with torch.no_grad():
            model.get_input_embeddings().weight.copy_(
                teacher_embedding_projection(emb, cfg.hidden_size)
            )
    model.tie_weights()
    return CausalPrefixScorer(
        model, teacher.tokenizer, teacher.templates, teacher.limits, device=teacher.device
    )


def distill_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    alpha: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss summed over tokens, the student's cross-entropy summed over tokens).

    loss = alpha * T^2 * KL(teacher_T || student_T) + (1 - alpha) * CE(student, text), per
    target token; the second value is the plain NLL the training log reports."""
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student logits {tuple(student_logits.shape)} vs teacher "
            f"{tuple(teacher_logits.shape)}: the two must share a vocabulary"
        )
    t = float(temperature)
    ce = F.cross_entropy(student_logits, labels, reduction="sum")
    if alpha == 0.0:
        return ce, ce.detach()
    s_log = F.log_softmax(student_logits / t, -1)
    t_log = F.log_softmax(teacher_logits.detach() / t, -1)
    kl = F.kl_div(s_log, t_log, log_target=True, reduction="sum") * (t * t)
    return alpha * kl + (1.0 - alpha) * ce, ce.detach()


def teacher_agreement(student: Any, teacher: Any, examples: list, batch_size: int = 32) -> float:
    """Spearman correlation of student and teacher mean target log-probs over ``examples``
    ((direction, prompt ids, target ids)): how well the student ranks windows as the teacher
    does, whatever the difference in scale."""
    from scipy.stats import spearmanr

    order = sorted(examples, key=lambda e: e[0])  # one direction per batch, same for both

    def means(scorer: Any) -> list[float]:
        out: list[float] = []
        was = any(m.training for m in scorer.modules())
        scorer.train(False)
        with torch.inference_mode():
            for i in range(0, len(order), batch_size):
                chunk = order[i : i + batch_size]
                for d in dict.fromkeys(e[0] for e in chunk):
                    part = [e for e in chunk if e[0] == d]
                    lp, n = scorer.token_logprobs(d, [e[1] for e in part], [e[2] for e in part])
                    out.extend((lp / n.clamp(min=1)).double().cpu().tolist())
        scorer.train(was)
        return out

    if len(examples) < 3:
        return float("nan")
    return float(spearmanr(means(student), means(teacher)).statistic)
