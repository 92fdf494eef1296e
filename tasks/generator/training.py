"""Training the `generator` stage's scorer: the training loop's config from the stage's, a
checkpoint in the stage's cache dir (sealed with a sha256) to resume mid-run, the loss curve,
and how a distilled student agrees with its teacher."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxsim.models.contextual.generator import GenerativeScorer
from ctxsim.models.contextual.generator.distill import teacher_agreement
from ctxsim.models.contextual.generator_training import (
    Example,
    TrainConfig,
    train_generator,
    validation_perplexity,
)
from ctxsim.store.checked import torch_checkpoint
from ctxsim.store.stage import StageContext

if TYPE_CHECKING:
    from ctxsim.tasks.generator.params import GeneratorParams


def train(
    ctx: StageContext,
    p: GeneratorParams,
    scorer: GenerativeScorer,
    train_ex: list[Example],
    teacher: GenerativeScorer | None = None,
) -> dict[str, Any]:
    """Train ``scorer`` on ``train_ex`` (distilling from ``teacher`` when given), resuming from
    the checkpoint in the cache dir when its seal matches; returns the loop's summary."""
    cfg = TrainConfig(
        steps=p.train_steps,
        batch_size=p.batch_size,
        grad_accum=p.grad_accum,
        lr=p.lr,
        weight_decay=p.weight_decay,
        warmup_steps=p.warmup_steps,
        max_grad_norm=p.max_grad_norm,
        checkpoint_every=p.checkpoint_every,
        max_seconds=p.max_train_seconds,
        bf16_on_cpu=p.bf16_on_cpu,
        seed=ctx.run.seed,
        distill_alpha=p.distill_alpha,
        distill_temperature=p.distill_temperature,
    )
    ckpt = ctx.cache_dir / "checkpoint.pt"  # sealed: a sha256 beside it
    state, save = torch_checkpoint(ckpt, "generator checkpoint", ctx.logger)
    if state is not None:
        ctx.logger.info(f"generator: resuming from step {state['step']} ({ckpt})")
    return train_generator(scorer, train_ex, cfg, state, save, ctx.logger.info, teacher)


def train_stats(summary: dict[str, Any]) -> dict[str, Any]:
    """The training loop's summary as the stage's stats."""
    return {
        "train_steps": summary["steps"],
        "train_epochs": round(summary["epochs"], 3),
        "train_seconds": round(summary["seconds"], 1),
        "train_tokens_per_s": round(summary["train_tokens_per_s"], 1),
        "train_final_loss": round(summary["final_loss"], 4),
        "train_stopped_early": summary["stopped_early"],
    }


def teacher_stats(
    p: GeneratorParams,
    student: GenerativeScorer,
    teacher: GenerativeScorer,
    val_ex: list[Example],
) -> dict[str, Any]:
    """The teacher's held-out perplexity, its size, and how well the student ranks the
    held-out windows as the teacher does (Spearman of mean target log-probs), per trained
    direction."""
    ppl = validation_perplexity(teacher, val_ex)
    out: dict[str, Any] = {
        "teacher": p.distill_from,
        "teacher_n_params": sum(x.numel() for x in teacher.parameters()),
    }
    for d in p.train_directions:
        out[f"teacher_val_ppl_{d}"] = round(ppl[f"ppl_{d}"], 3)
        ex = [e for e in val_ex if e[0] == d]
        out[f"teacher_spearman_{d}"] = round(teacher_agreement(student, teacher, ex), 4)
    return out


def plot_loss(ctx: StageContext, history: list[dict[str, Any]]) -> None:
    """``files/train_loss.png``: the training loss per step (nothing without a history)."""
    if not history:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([h["step"] for h in history], [h["loss"] for h in history])
    ax.set_xlabel("step")
    ax.set_ylabel("train NLL / target token")
    fig.tight_layout()
    fig.savefig(ctx.files_dir / "train_loss.png", dpi=100)
    plt.close(fig)
