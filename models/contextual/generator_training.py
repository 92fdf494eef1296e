"""Training loop for the generative scorers of Sec. 3.2.2 (all three Eq. (3) directions).

Teacher-forced token-level cross-entropy over (direction, source ids, target ids) examples:
AdamW, linear warmup then linear decay, gradient accumulation, gradient clipping, bf16 autocast
on CUDA (optionally on CPU), and a checkpoint state (model, optimiser, scheduler, RNG, position
inside the epoch) that the caller persists, so a crash resumes mid-epoch and reaches the same
weights as an uninterrupted run. No file I/O here: ``on_checkpoint(state)`` hands the state to
the caller.

With a ``teacher`` (a causal scorer sharing the student's tokenizer) the loss is token-level
distillation instead (``distill_loss``: KL to the teacher's next-token distribution, optionally
mixed with the cross-entropy); the logged loss stays the student's NLL per target token.

Each micro-batch holds one direction (so per-direction models and control tokens see coherent
batches); the epoch plan is a seeded shuffle of those micro-batches.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from ctxsim.models.contextual.generator import DIRECTIONS, GenerativeScorer, Ids

Example = tuple[str, Ids, Ids]  # (direction, source ids, target ids)


@dataclass
class TrainConfig:
    steps: int = 200  # optimiser steps in total
    batch_size: int = 16  # examples per micro-batch
    grad_accum: int = 1  # micro-batches per optimiser step
    lr: float = 3e-4
    weight_decay: float = 0.01
    warmup_steps: int = 20
    max_grad_norm: float = 1.0
    checkpoint_every: int = 50  # optimiser steps; 0 = only at the end
    max_seconds: float = 0.0  # wall-clock cap (0 = none); stops after the current step
    eval_batch_size: int = 32
    bf16_on_cuda: bool = True
    bf16_on_cpu: bool = False  # mixed precision on CPUs with bf16 units (weights stay float32)
    seed: int = 0
    # with a teacher (models/contextual/generator/distill.py): the KL term's weight and temperature
    distill_alpha: float = 1.0
    distill_temperature: float = 1.0


def _epoch_plan(examples: Sequence[Example], batch_size: int, seed: int) -> list[list[int]]:
    """Single-direction micro-batches of a seeded permutation, in a seeded order."""
    rng = np.random.default_rng(seed)
    batches: list[list[int]] = []
    for d in DIRECTIONS:
        idx = np.asarray([i for i, e in enumerate(examples) if e[0] == d], dtype=np.int64)
        idx = idx[rng.permutation(len(idx))]
        batches += [idx[i : i + batch_size].tolist() for i in range(0, len(idx), batch_size)]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def _autocast(scorer: GenerativeScorer, cfg: TrainConfig) -> Any:
    if scorer.device.type == "cuda" and cfg.bf16_on_cuda:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if scorer.device.type == "cpu" and cfg.bf16_on_cpu:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def validation_perplexity(
    scorer: GenerativeScorer, examples: Sequence[Example], batch_size: int = 32
) -> dict[str, float]:
    """exp(mean target-token NLL) per direction (token-weighted), plus ``n_tokens_<dir>``."""
    was_training = any(m.training for m in scorer.modules())
    scorer.train(False)
    out: dict[str, float] = {}
    with torch.inference_mode():
        for d in DIRECTIONS:
            ex = sorted((e for e in examples if e[0] == d), key=lambda e: len(e[1]) + len(e[2]))
            tot, cnt = 0.0, 0.0
            for i in range(0, len(ex), batch_size):
                chunk = ex[i : i + batch_size]
                lp, n = scorer.token_logprobs(d, [e[1] for e in chunk], [e[2] for e in chunk])
                tot += float(lp.double().sum())
                cnt += float(n.double().sum())
            if cnt:
                out[f"ppl_{d}"] = float(math.exp(-tot / cnt))
                out[f"n_tokens_{d}"] = cnt
    scorer.train(was_training)
    return out


def _distill_step(
    student: Any, teacher: Any, src: list[Ids], tgt: list[Ids], cfg: TrainConfig
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(distillation loss summed over target tokens, student NLL sum, target tokens)."""
    from ctxsim.models.contextual.generator.distill import distill_loss

    with torch.inference_mode(), _autocast(teacher, cfg):
        t_logits, _, _ = teacher.target_logits(src, tgt)
    t_logits = t_logits.clone()  # out of inference mode, so autograd may read it
    with _autocast(student, cfg):
        s_logits, labels, _ = student.target_logits(src, tgt)
    loss, nll = distill_loss(
        s_logits.float(), t_logits, labels, cfg.distill_temperature, cfg.distill_alpha
    )
    return loss, nll, int(labels.numel())


def _check_teacher(scorer: GenerativeScorer, teacher: GenerativeScorer) -> None:
    """Token-level distillation needs a causal student and teacher sharing a vocabulary."""
    if scorer.backend != "causal" or teacher.backend != "causal":
        raise ValueError("distillation needs a causal student and a causal teacher")
    if teacher.vocab_size != scorer.vocab_size:
        raise ValueError(
            f"teacher vocabulary {teacher.vocab_size} != student {scorer.vocab_size}: "
            "token-level distillation needs the teacher's tokenizer"
        )


def _optimizer(params: list[torch.nn.Parameter], cfg: TrainConfig) -> tuple[Any, Any]:
    """AdamW (no weight decay on biases and norms) and its linear warmup-then-decay schedule."""
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
    )

    def lr_lambda(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / max(1, cfg.warmup_steps)
        return max(0.0, (cfg.steps - step) / max(1, cfg.steps - cfg.warmup_steps))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)


def _backward(
    scorer: GenerativeScorer,
    teacher: GenerativeScorer | None,
    batch: list[Example],
    cfg: TrainConfig,
) -> tuple[float, float]:
    """The gradients of one batch's loss (over ``grad_accum``): cross-entropy, or distillation
    from ``teacher``; returns (the student's NLL summed over target tokens, target tokens)."""
    d = batch[0][0]
    src, tgt = [e[1] for e in batch], [e[2] for e in batch]
    if teacher is not None:
        loss_tok, nll, n_tok = _distill_step(scorer, teacher, src, tgt, cfg)
        loss = loss_tok / max(n_tok, 1)
        (loss / cfg.grad_accum).backward()
        return float(nll), float(n_tok)
    with _autocast(scorer, cfg):
        lp, n = scorer.token_logprobs(d, src, tgt)
    loss = -lp.sum() / n.sum().clamp(min=1)
    (loss / cfg.grad_accum).backward()
    return float(-lp.detach().sum()), float(n.sum())


def _snapshot(
    modules: Sequence[torch.nn.Module],
    opt: Any,
    sched: Any,
    where: tuple[int, int, int],
    history: list[dict[str, Any]],
    cfg: TrainConfig,
) -> dict[str, Any]:
    """The checkpoint state: weights, optimiser, schedule, (step, epoch, batch in epoch), RNG,
    loss history and config; ``train_generator(state=...)`` resumes from it."""
    step, epoch, pos = where
    return {
        "models": [
            {k: v.detach().cpu().clone() for k, v in m.state_dict().items()} for m in modules
        ],
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "step": step,
        "epoch": epoch,
        "batch_in_epoch": pos,
        "torch_rng": torch.get_rng_state(),
        "history": list(history),
        "config": asdict(cfg),
    }


def train_generator(
    scorer: GenerativeScorer,
    train: Sequence[Example],
    cfg: TrainConfig,
    state: dict[str, Any] | None = None,
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
    teacher: GenerativeScorer | None = None,
) -> dict[str, Any]:
    """Train ``scorer`` in place; resume from ``state`` when given; distil from ``teacher``
    when given. Returns a summary."""
    if not train:
        raise ValueError("no training examples")
    if teacher is not None:
        _check_teacher(scorer, teacher)
        teacher.train(False)
    modules = scorer.modules()
    params = [p for m in modules for p in m.parameters() if p.requires_grad]
    opt, sched = _optimizer(params, cfg)
    step, epoch, pos, history = 0, 0, 0, []
    if state is not None:
        for m, sd in zip(modules, state["models"], strict=True):
            m.load_state_dict(sd)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step, epoch, pos = state["step"], state["epoch"], state["batch_in_epoch"]
        history = list(state.get("history", []))
        torch.set_rng_state(state["torch_rng"])
    else:
        torch.manual_seed(cfg.seed)

    scorer.train(True)
    t0 = time.perf_counter()
    plan = _epoch_plan(train, cfg.batch_size, cfg.seed + epoch)
    tokens = 0
    while step < cfg.steps:
        opt.zero_grad(set_to_none=True)
        loss_sum = tok_sum = 0.0
        for _ in range(cfg.grad_accum):
            if pos >= len(plan):
                epoch, pos = epoch + 1, 0
                plan = _epoch_plan(train, cfg.batch_size, cfg.seed + epoch)
            batch = [train[i] for i in plan[pos]]
            pos += 1
            nll, n_tok = _backward(scorer, teacher, batch, cfg)
            loss_sum += nll
            tok_sum += n_tok
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        sched.step()
        step += 1
        tokens += int(tok_sum)
        history.append({"step": step, "loss": loss_sum / max(tok_sum, 1.0), "epoch": epoch})
        if log is not None and (step % 10 == 0 or step == 1):
            log(f"step {step}/{cfg.steps} loss {history[-1]['loss']:.4f} epoch {epoch}")
        out_of_time = cfg.max_seconds > 0 and time.perf_counter() - t0 >= cfg.max_seconds
        if on_checkpoint is not None and (
            (cfg.checkpoint_every and step % cfg.checkpoint_every == 0)
            or step == cfg.steps
            or out_of_time
        ):
            on_checkpoint(_snapshot(modules, opt, sched, (step, epoch, pos), history, cfg))
        if out_of_time:
            break
    scorer.train(False)
    seconds = time.perf_counter() - t0
    return {
        "steps": step,
        "epochs": epoch + pos / max(1, len(plan)),
        "seconds": seconds,
        "train_tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "final_loss": history[-1]["loss"] if history else float("nan"),
        "history": history,
        "stopped_early": step < cfg.steps,
    }


def random_partners(
    lengths: np.ndarray, section: np.ndarray, tol: float, rng: np.random.Generator
) -> np.ndarray:
    """For each row, another row of a different section whose context length is within
    ``tol`` (relative) — chosen at random among those, else the closest in length: the random
    contexts a held-out sentence is scored in against its own (the `generator` stage's check)."""
    order = np.argsort(lengths, kind="stable")
    sl = lengths[order]
    out = np.empty(len(lengths), np.int64)
    for i, n in enumerate(lengths):
        lo = np.searchsorted(sl, n * (1 - tol), "left")
        hi = np.searchsorted(sl, n * (1 + tol), "right")
        cand = order[lo:hi]
        cand = cand[section[cand] != section[i]]
        if len(cand) == 0:
            other = np.flatnonzero(section != section[i])
            cand = other[np.argsort(np.abs(lengths[other] - n), kind="stable")[:1]]
        out[i] = cand[rng.integers(len(cand))] if len(cand) else (i + 1) % len(lengths)
    return out
