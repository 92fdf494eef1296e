"""What a `train` run reports: ``files/metrics.json`` (also the stage's stats), the model card
beside the saved model, and the rows of the evaluation-history table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ctxsim.models.training.objectives import TrainingPairs, get_objective
from ctxsim.models.training.tiny_backbone import TINY
from ctxsim.store.stage import StageContext
from ctxsim.tasks.train.data import DevSet

if TYPE_CHECKING:
    from ctxsim.tasks.train.params import TrainParams


class RunOutcome(NamedTuple):
    """What training left: the trainer (None: no training), the dev scores before and after,
    whether it resumed, bf16, its CPU-seconds and when it ended."""

    trainer: Any
    before: dict[str, Any]
    final: dict[str, Any]
    resumed: bool
    bf16: bool
    train_cpu: float
    ended: float


def run_metrics(
    p: TrainParams,
    ctx: StageContext,
    label_run: str,
    pairs: TrainingPairs,
    examples: Any,
    dev: DevSet | None,
    backbone_path: str,
    run: RunOutcome,
    t0: float,
) -> dict[str, Any]:
    """``files/metrics.json`` (and the stage's stats): what was trained on what, how it scored
    on dev before and after, and what it cost."""
    trainer, before, final = run.trainer, run.before, run.final
    best = trainer.state.best_metric if trainer is not None else None
    if trainer is None and before:
        best = before["dev_spearman_cosine"]
    trains = get_objective(p.objective).trains
    info = {
        "backbone": p.backbone,
        "backbone_path": "files/backbone" if p.backbone == TINY else backbone_path,
        "init_from": p.init_from,
        "loss": p.loss if trains else "none",
        "objective": p.objective,
        "label_scale": p.label_scale,
        "label_run": label_run,
        "label_column": p.label_column,
        "n_train_pairs": len(pairs),
        "n_train_examples": len(examples),
        "n_dev_pairs": int(len(dev[2])) if dev is not None else 0,
        "dev_set": dev[3] if dev is not None else None,
        "steps": int(trainer.state.global_step) if trainer is not None else 0,
        "best_dev_spearman": float(best) * 100 if best is not None else None,
        "final_dev_spearman": float(final["dev_spearman_cosine"]) * 100 if final else None,
        "backbone_dev_spearman": float(before["dev_spearman_cosine"]) * 100 if before else None,
        "resumed": bool(run.resumed),
        "bf16": run.bf16,
        "device": ctx.device,
        "seconds": round(run.ended - t0, 2),
        "label_cpu_seconds": round(examples.label_cpu_seconds, 3),
        "train_cpu_seconds": round(run.train_cpu, 3),
    }
    before_dev, best_dev = info["backbone_dev_spearman"], info["best_dev_spearman"]
    info["beats_backbone"] = (
        None
        if before_dev is None or best_dev is None or not trains
        else bool(best_dev > before_dev)
    )
    if info["beats_backbone"] is False:
        ctx.logger.warning(
            "train: the surrogate's best %s Spearman %.2f is below its untrained backbone's "
            "%.2f: the labels (or the learning rate) hurt this backbone",
            info["dev_set"],
            best_dev,
            before_dev,
        )
    return info


def model_card(info: dict[str, Any]) -> str:
    """The saved model's README.md: what it is, how it was trained (from ``run_metrics``) and
    how to load and evaluate it."""
    lines = [
        "---",
        "library_name: sentence-transformers",
        "tags: [sentence-similarity, ctxsim]",
        "---",
        "",
        "# ctxsim surrogate",
        "",
        "Siamese encoder trained on sentence-pair similarities generated from contexts",
        "(Sun et al., TACL 2022, Sec. 3.4): mean pooling over the last layer, cosine similarity,",
        f"loss `{info['loss']}`.",
        "",
        "| field | value |",
        "| --- | --- |",
    ]
    for k in (
        "backbone",
        "backbone_path",
        "init_from",
        "label_run",
        "label_column",
        "n_train_pairs",
        "n_dev_pairs",
        "dev_set",
        "steps",
        "backbone_dev_spearman",
        "best_dev_spearman",
        "final_dev_spearman",
        "seconds",
    ):
        if k != "init_from" or info.get(k) is not None:  # a start other than the backbone
            lines.append(f"| {k} | {info.get(k)} |")
    lines += [
        "",
        "Load: `SentenceTransformer(path)`; evaluate: `ctxsim evaluate PATH --sts-dir DIR`.",
        "",
    ]
    return "\n".join(lines)


def history_rows(log_history: list[dict[str, Any]], metric: str | None) -> list[dict[str, Any]]:
    """One row per logged step of the trainer's history (the stage's table, HISTORY_SCHEMA):
    its train loss and, at evaluation steps, the dev Spearman and Pearson x100."""
    rows: dict[int, dict[str, Any]] = {}
    for e in log_history:
        step = int(e.get("step", 0))
        r = rows.setdefault(
            step,
            {
                "step": step,
                "epoch": e.get("epoch"),
                "train_loss": None,
                "dev_spearman": None,
                "dev_pearson": None,
            },
        )
        if "loss" in e:
            r["train_loss"] = float(e["loss"])
        if metric and metric in e:
            r["dev_spearman"] = float(e[metric]) * 100
            pkey = metric.replace("spearman", "pearson")
            if pkey in e:
                r["dev_pearson"] = float(e[pkey]) * 100
    return [rows[k] for k in sorted(rows)]
