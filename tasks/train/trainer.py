"""sentence-transformers' trainer as the `train` stage drives it: the dev evaluator, the
arguments (the optimizer of Sec. 4.1), checkpoints sealed with a sha256 and checked before a
resume, the trainer's log as stage log lines, and the fit itself with its CPU cost."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxsim.store.checked import seal, sidecar, verified
from ctxsim.tasks.train.data import DevSet

if TYPE_CHECKING:
    from ctxsim.tasks.train.params import TrainParams


def use_bf16(p: TrainParams, device: str) -> bool:
    """bf16 when asked for and the device has it: ``bf16`` on a CUDA device that supports it,
    ``bf16_cpu`` on a CPU whose oneDNN has bf16 kernels (AVX512-BF16 or AMX)."""
    import torch

    if device.startswith("cuda"):
        return bool(p.bf16 and torch.cuda.is_bf16_supported())
    return bool(p.bf16_cpu and cpu_has_bf16())


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bf16 matrix products natively (models/encoders.py)."""
    from ctxsim.models.encoders import bf16_available

    return bf16_available("cpu")


def dev_evaluator(dev: DevSet | None, p: TrainParams) -> tuple[Any, str | None]:
    """Spearman of the cosines on the dev set (None without one) and its metric's name."""
    if dev is None:
        return None, None
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    evaluator = EmbeddingSimilarityEvaluator(
        dev[0],
        dev[1],
        dev[2],
        batch_size=max(p.batch_size, 32),
        name="dev",
        similarity_fn_names=["cosine"],
        write_csv=False,
    )
    return evaluator, "eval_dev_spearman_cosine"


def training_args(
    p: TrainParams,
    ckpt_dir: Path,
    max_steps: int,
    device: str,
    seed: int,
    bf16: bool,
    metric: str | None,
    label_share: float | None = None,
    part_sizes: tuple[int, ...] = (),
) -> Any:
    """The trainer's arguments: the optimizer of Sec. 4.1, checkpoints every ``eval_steps`` (the
    best dev Spearman kept when there is a dev set), the run's seed and device; ``label_share``
    is the objective's own share for the labels' batches (``Examples.label_share``), which
    ``train.label_share`` overrides; ``part_sizes`` are the rows of its datasets, in order."""
    from sentence_transformers import SentenceTransformerTrainingArguments

    sampler: Any = "batch_sampler"  # the library's default: shuffled rows
    if p.context_batches == "document":
        from ctxsim.models.training.batches import document_batch_sampler as sampler
    elif p.context_batches == "length":
        from ctxsim.models.training.batches import length_batch_sampler

        sampler = length_batch_sampler(p.max_seq_length)
    parts: Any = "proportional"  # the library's default: each part by its size
    share = p.label_share if p.label_share is not None else label_share
    if share is not None:  # the labels' dataset comes first (TrainParams checks it)
        from ctxsim.models.training.batches import SharedBatches

        others = list(part_sizes[1:]) or [1]  # the other parts share the rest by their sizes
        parts = SharedBatches((share, *[(1.0 - share) * n / sum(others) for n in others]))
    return SentenceTransformerTrainingArguments(
        output_dir=str(ckpt_dir),
        num_train_epochs=p.epochs,
        max_steps=max_steps if max_steps > 0 else -1,
        per_device_train_batch_size=p.batch_size,
        per_device_eval_batch_size=max(p.batch_size, 32),
        learning_rate=p.lr,
        adam_beta1=p.adam_beta1,
        adam_beta2=p.adam_beta2,
        weight_decay=p.weight_decay,
        warmup_steps=p.warmup_ratio,  # a float in [0, 1) is a ratio (transformers >= 5)
        lr_scheduler_type=p.lr_scheduler,
        optim=p.optimizer,
        bf16=bf16,
        eval_strategy="steps" if metric is not None else "no",
        eval_steps=p.eval_steps,
        save_strategy="steps",
        save_steps=p.eval_steps,
        save_total_limit=p.save_total_limit,
        load_best_model_at_end=metric is not None,
        metric_for_best_model=metric,
        greater_is_better=True,
        logging_steps=p.logging_steps,
        seed=seed,
        data_seed=seed,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        batch_sampler=sampler,
        multi_dataset_batch_sampler=parts,
        use_cpu=not device.startswith("cuda"),
    )


def make_trainer(
    model: Any, args: Any, data: Any, loss: Any, evaluator: Any, log: Any, progress: bool = False
) -> Any:
    """The trainer over ``data``: checkpoints sealed as they are saved, its log lines through
    the stage's logger, a progress bar with ETA when ``progress``, and any ``extra_callbacks``."""
    from sentence_transformers import SentenceTransformerTrainer

    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=data,
        loss=loss,
        evaluator=evaluator,
        callbacks=[seal_checkpoints(), *extra_callbacks()],
    )
    keep_loss_log(trainer)
    log_through(trainer, log)
    if progress:
        trainer.add_callback(step_bar())
    return trainer


def step_bar() -> Any:
    """A trainer callback showing steps done of ``max_steps`` with an ETA (the trainer's own
    bars are off: they print a line per update into Prefect's log); a resumed run starts the
    bar at its checkpoint's step."""
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class StepBar(TrainerCallback):
        bar: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,
                desc="train",
                unit="step",
                mininterval=30.0,
                disable=False,  # shown when asked (run.no_progress decides), as embed's bars
            )

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.bar is not None:
                self.bar.update(state.global_step - self.bar.n)

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    return StepBar()


def fit(
    model: Any, trainer: Any, evaluator: Any, ckpt_dir: Path, log: Any
) -> tuple[dict[str, Any], dict[str, Any], bool, float]:
    """Train (``trainer`` None: no training), resuming from the latest good checkpoint in
    ``ckpt_dir``; returns (dev scores before, dev scores after, resumed, CPU-seconds of every
    thread of this process, dev evaluations included). The backbone's own dev score is the bar
    the labels must clear (model card, stats); a resume does not measure it."""
    good = complete_checkpoints(ckpt_dir, log)
    resume = bool(good)
    before = evaluator(model) if evaluator is not None and not resume else {}
    if resume:
        log.info("train: resuming from %s", good[-1])
    cpu0 = time.process_time()
    if trainer is not None:
        trainer.train(resume_from_checkpoint=str(good[-1]) if resume else None)
    train_cpu = time.process_time() - cpu0
    final = before if trainer is None else evaluator(model) if evaluator is not None else {}
    return before, final, resume, train_cpu


def complete_checkpoints(ckpt_dir: Path, log: Any) -> list[Path]:
    """The checkpoints a resume can load, oldest first (by step). The trainer writes
    ``trainer_state.json`` last, so a save cut short (a full disk, a kill) leaves a folder
    without it, which the trainer would still pick as the latest and fail to load: such folders
    are removed, and named in the log. A complete one must match the sha256 sealed beside it
    when it was saved (``seal_checkpoints``): one that does not, or has no seal (cut short
    between the save and the seal), is moved aside to ``checkpoint-N.corrupt-<id>`` with a
    warning (store/checked.py), and the resume takes an earlier good one, or starts over."""
    if not ckpt_dir.exists():
        return []
    dirs = [d for d in ckpt_dir.glob("checkpoint-*") if d.is_dir() and d.name[11:].isdigit()]
    good = []
    for d in sorted(dirs, key=lambda d: int(d.name[11:])):
        try:
            json.loads((d / "trainer_state.json").read_text())
        except (OSError, ValueError):
            log.warning("train: removing the incomplete checkpoint %s (its save was cut short)", d)
            shutil.rmtree(d, ignore_errors=True)
            sidecar(d).unlink(missing_ok=True)
            continue
        if verified(d, "train: checkpoint", log):
            good.append(d)
    for s in ckpt_dir.glob("checkpoint-*.sha256"):  # seals of checkpoints the trainer rotated out
        if not s.with_name(s.name[: -len(".sha256")]).exists():
            s.unlink(missing_ok=True)
    return good


def seal_checkpoints() -> Any:
    """A trainer callback that seals each checkpoint once it is saved (``on_save`` follows the
    whole save and the rotation of older ones): the sha256 of its files beside it. A trainer
    whose ``keep_loss_log`` left a writer adds its loss accumulator to the checkpoint first."""
    from transformers import TrainerCallback

    class SealCheckpoints(TrainerCallback):
        writer: Any = None

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            d = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if d.is_dir():
                if self.writer is not None:
                    self.writer(d)
                seal(d)

    return SealCheckpoints()


#: the trainer's loss accumulator at a checkpoint (``keep_loss_log``), inside the checkpoint
LOSS_LOG_FILE = "ctxsim_loss_log.json"


def keep_loss_log(trainer: Any) -> None:
    """A resumed run logs the losses an uninterrupted one logs. The trainer logs the mean loss
    since its last log every ``logging_steps``; the sum it keeps for that (and for the final
    train loss) is not in its checkpoint, so a resume from a checkpoint between two logs (an
    ``eval_steps`` that is not a multiple of ``logging_steps``) logged the mean of the steps
    since the resume alone (3.51 against 1.68 at step 5). Each checkpoint now holds that sum
    (:data:`LOSS_LOG_FILE`, sealed with it), and a resume restores it: the same float32 sum, so
    the logged history is byte-identical. A checkpoint without the file (written before) resumes
    as before."""
    import torch
    from transformers import TrainerCallback

    def write(d: Path) -> None:
        acc = getattr(trainer, "_tr_loss", None)
        if acc is None:  # a transformers without the accumulator: nothing to keep
            return
        state = {
            "tr_loss": float(acc.detach().float().cpu().item()),
            "total_loss": float(trainer._total_loss_scalar),
            "last_logged": int(trainer._globalstep_last_logged),
        }
        (d / LOSS_LOG_FILE).write_text(json.dumps(state))

    class RestoreLossLog(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step <= 0 or getattr(trainer, "_tr_loss", None) is None:
                return
            f = Path(args.output_dir) / f"checkpoint-{state.global_step}" / LOSS_LOG_FILE
            try:
                saved = json.loads(f.read_text())
            except (OSError, ValueError):
                return
            acc = trainer._tr_loss
            acc.copy_(torch.tensor(saved["tr_loss"], dtype=acc.dtype, device=acc.device))
            trainer._total_loss_scalar = float(saved["total_loss"])
            trainer._globalstep_last_logged = int(saved["last_logged"])

    for cb in trainer.callback_handler.callbacks:
        if hasattr(cb, "writer"):
            cb.writer = write
    trainer.add_callback(RestoreLossLog())


def log_through(trainer: Any, log: Any) -> None:
    """The trainer's log dicts as stage log lines (its PrinterCallback prints raw dicts)."""
    from transformers import PrinterCallback, TrainerCallback

    class _StageLog(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs:
                items = ", ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in logs.items()
                )
                log.info("train: step %d: %s", state.global_step, items)

    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(_StageLog())


def extra_callbacks() -> list:
    """Extra trainer callbacks (a hook for tests that interrupt training to test resume)."""
    return []
