"""Stage `train`: the Siamese surrogate of Sun et al. (2022), Sec. 3.4.

A transformers backbone with mean pooling over its last layer; predicted similarity = cosine of
the two sentence vectors; the objective is the L2 distance to the generated labels
(sentence-transformers' ``CosineSimilarityLoss``), optimised with Adam (lr 1e-4, betas 0.9/0.999,
Sec. 4.1 "Implementation Details"; AdamW with weight decay 0 is Adam). Optionally the CLRCMD
contrastive loss over RCMD similarities (Lee et al. 2022, Sec. 3.3) instead, or the rank-aware
``CoSENTLoss`` / ``AnglELoss``. ``objective`` swaps the labels for a peer on the same sentences,
steps, batch size and seed (models/training/objectives/): TF-IDF cosine labels, unsupervised SimCSE,
TSDAE, each sentence's real right context as its positive (``context``: reads `queries` and
`shard`), a larger encoder's cosine (``teacher``), or no training at all; ``train_cpu_seconds``
in the metrics is what each cost.

sentence-transformers' trainer brings evaluation on STSb dev every ``eval_steps`` (or the label
dev split when no STSb dev is found), keeping the best checkpoint, and mid-epoch resume from the
checkpoints in ``ctx.cache_dir`` (a checkpoint whose save was cut short is dropped; each complete
one is sealed with a sha256 of its files (store/checked.py) and checked before a resume loads it:
a mismatch is moved aside with a warning and the resume takes the latest good one, or starts
over; all of them are deleted once the model is saved). Output: ``files/model`` (a
sentence-transformers directory with a model card), ``files/metrics.json``, and a table with the
evaluation history.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator

from ctxsim.models.registry import check_model_name
from ctxsim.models.training.objectives import (
    MODULES,
    OBJECTIVES,
    LossName,
    ObjectiveContext,
    TrainingPairs,
    get_objective,
    has_dropout,
    steps_for,
)
from ctxsim.models.training.sentence_encoder import build_model
from ctxsim.store.checked import seal, sidecar, verified
from ctxsim.store.cost_model import CostModel, InputRowsPerQuery, OptimizerSteps
from ctxsim.store.stage import Stage, StageContext, StageParams

__all__ = ["TINY", "TrainParams", "TrainStage", "build_model", "build_tiny_backbone"]

TINY = "tiny-random"

HISTORY_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("epoch", pa.float64()),
        ("train_loss", pa.float64()),
        ("dev_spearman", pa.float64()),
        ("dev_pearson", pa.float64()),
    ]
)


class TrainParams(StageParams):
    """The `train` config section."""

    backbone: str = Field(
        TINY,
        description=(
            "The encoder to fine-tune: a registry name (minilm, gemma-270m, ...), a local path, or "
            "tiny-random (a from-scratch model for tests and the quickstart)."
        ),
    )
    objective: str = Field(
        "ctxsim",
        description=f"what the encoder learns from: one of {', '.join(OBJECTIVES)} "
        "(models/training/objectives/: ctxsim = Eq. 4 labels, the others its peers on the same "
        "sentences)",
    )
    teacher: str = Field(
        "mpnet",
        description=(
            "Objectives that label the pairs themselves: the encoder whose cosine labels them (a "
            "registry name or path)."
        ),
    )
    context_width: int = Field(
        1,
        ge=1,
        le=8,
        description=(
            "Objectives that read contexts: sentences after the centre taken as its context."
        ),
    )
    context_corpus_sentences: int = Field(
        0,
        ge=0,
        description=(
            "Objectives that read contexts: also this many corpus sentences (seeded sample) with "
            "their contexts; they cost no labels, so the data can grow past the labelled pairs' few"
            " hundred sentences."
        ),
    )
    loss: LossName = Field(
        "cosine",
        description=(
            "Training loss: cosine (the paper's L2 between the cosine and the label), cosent or "
            "angle (use only the labels' order), clrcmd (token-level alignment, CLRCMD)."
        ),
    )
    label_column: str = Field(
        "label",
        description=(
            "The label column trained on: label, or label_disc / label_fwd / ... for the Eq. 3 "
            "ablations."
        ),
    )
    label_scale: Literal["none", "rank", "minmax"] = Field(
        "rank",
        description=(
            "How labels are mapped before training: Eq. 4 cosines crowd into ~[0.93, 1], so rank "
            "maps them to [0, 1] by rank (models.origin.rescale_labels), minmax linearly, none "
            "leaves them."
        ),
    )
    train_splits: list[str] = Field(
        default_factory=lambda: ["train"],
        description=(
            "Label splits trained on (the label stage splits pairs into train, dev and test)."
        ),
    )
    max_train_pairs: int | None = Field(
        None,
        description=(
            "Train on the first this-many eligible pairs only (None: all); for quick runs and "
            "learning curves."
        ),
    )
    max_seq_length: int = Field(
        64,
        description=(
            "Tokens per sentence; longer sentences are truncated. Raise it for long sentences at a "
            "quadratic attention cost."
        ),
    )
    batch_size: int = Field(
        16,
        description=(
            "Pairs per training step; with in-batch objectives it also sets the number of "
            "negatives."
        ),
    )
    epochs: float = Field(
        1.0,
        description=(
            "Passes over the training pairs (fractions allowed); max_steps > 0 overrides it."
        ),
    )
    max_steps: int = Field(
        30,
        description="Training steps; > 0 overrides epochs.",
    )
    lr: float = Field(
        1e-4,
        description="Peak learning rate (AdamW).",
    )
    adam_beta1: float = Field(
        0.9,
        description="AdamW's beta1.",
    )
    adam_beta2: float = Field(
        0.999,
        description="AdamW's beta2.",
    )
    weight_decay: float = Field(
        0.0,
        description="AdamW's weight decay.",
    )
    warmup_ratio: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Share of the steps spent warming the learning rate up from 0.",
    )
    lr_scheduler: str = Field(
        "constant",
        description=(
            "Learning-rate schedule after warm-up, a transformers scheduler name (constant, linear,"
            " cosine, ...)."
        ),
    )
    eval_steps: int = Field(
        10,
        description=(
            "Evaluate on the dev set (and checkpoint) every this many steps; the checkpoint with "
            "the best dev Spearman is kept."
        ),
    )
    save_total_limit: int = Field(
        2,
        description="Checkpoints kept on disk in training (with a dev set the best is kept too).",
    )
    logging_steps: int = Field(
        5,
        description="Log the training loss every this many steps.",
    )
    sts_dir: str | None = Field(
        None,
        description=(
            "Folder of STS sets where dev_set is found for model selection; None: the label "
            "artefact's dev split selects the checkpoint."
        ),
    )
    dev_set: str = Field(
        "STSb.dev",
        description="The STS set (dataset.subset) whose Spearman selects the checkpoint.",
    )
    max_dev_pairs: int | None = Field(
        None,
        description=(
            "Seeded sample of the dev set's pairs (None: all): a cheaper evaluation at each "
            "eval_steps."
        ),
    )
    freeze_embeddings: bool = Field(
        False,
        description=(
            "Keep the backbone's token embeddings fixed (fewer trained weights; for small data)."
        ),
    )
    dropout: float | None = Field(
        None,
        ge=0.0,
        lt=1.0,
        description=(
            "Every dropout probability of the backbone (None keeps its own): SimCSE's noise; "
            "Gemma-3 ships with dropout 0 (models.sentence_encoder.dropout_config)."
        ),
    )
    bf16: bool = Field(
        True,
        description=(
            "Train in bfloat16 on CUDA (ignored on CPU): about half the memory and faster on recent"
            " GPUs."
        ),
    )
    clrcmd_temperature: float = Field(
        0.05,
        description="loss clrcmd: softmax temperature of the contrastive loss.",
    )
    clrcmd_positive_threshold: float = Field(
        0.5,
        description="loss clrcmd: pairs whose label is above this act as anchors (positives).",
    )
    clrcmd_sparse: bool = Field(
        True,
        description=(
            "loss clrcmd: the memory-saving form of the pairwise RCMD (same values and gradients as"
            " the dense one, models/evaluation/similarity.py); false: the dense form."
        ),
    )
    clrcmd_chunk_size: int = Field(
        8,
        description=(
            "loss clrcmd, clrcmd_sparse: sentences per block of the memory-saving form (bounds "
            "memory)."
        ),
    )
    tiny_vocab_size: int = Field(
        2000,
        description="tiny-random backbone: size of the WordPiece vocabulary learnt from the texts.",
    )
    tiny_hidden_size: int = Field(
        32,
        description="tiny-random backbone: hidden size.",
    )
    tiny_layers: int = Field(
        2,
        description="tiny-random backbone: transformer layers.",
    )
    tiny_heads: int = Field(
        2,
        description="tiny-random backbone: attention heads.",
    )

    #: keys added after the stage's version 2, with the default that reproduces version 2's
    #: output: left out of the dump (and so the fingerprint) at that default
    added_defaults: ClassVar[dict[str, Any]] = {
        "objective": "ctxsim",
        "dropout": None,
        "teacher": "mpnet",
        "context_width": 1,
        "context_corpus_sentences": 0,
    }

    @field_validator("backbone")
    @classmethod
    def _known_backbone(cls, value: str) -> str:
        return check_model_name(value, TINY)

    @field_validator("teacher")
    @classmethod
    def _known_teacher(cls, value: str) -> str:
        return check_model_name(value)

    @field_validator("objective")
    @classmethod
    def _known_objective(cls, value: str) -> str:
        get_objective(
            value
        )  # registered (models/training/objectives/), else a ValueError naming them
        return value


def build_tiny_backbone(texts: list[str], out_dir: Path, p: TrainParams, seed: int) -> Path:
    """A randomly initialised small BERT with a WordPiece vocabulary learned from ``texts``
    (the same on every run: models/training/wordpiece.py)."""
    import torch
    from tokenizers import processors
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from ctxsim.models.training.wordpiece import BERT_SPECIALS, learn_wordpiece

    tok = learn_wordpiece(texts, p.tiny_vocab_size, BERT_SPECIALS)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    fast = BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=p.max_seq_length,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    cfg = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=p.tiny_hidden_size,
        num_hidden_layers=p.tiny_layers,
        num_attention_heads=p.tiny_heads,
        intermediate_size=4 * p.tiny_hidden_size,
        max_position_embeddings=max(64, p.max_seq_length + 2),
    )
    torch.manual_seed(seed)
    BertModel(cfg).save_pretrained(out_dir)
    return out_dir


def resolve_backbone(name: str) -> str:
    """A loadable directory or hub id for a backbone name (the registry when it knows it)."""
    from ctxsim.models.registry import resolve_model

    return str(resolve_model(name))


def _history_rows(log_history: list[dict[str, Any]], metric: str | None) -> pa.Table:
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
    ordered = [rows[k] for k in sorted(rows)]
    return pa.Table.from_pylist(ordered, schema=HISTORY_SCHEMA)


def _model_card(info: dict[str, Any]) -> str:
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
        lines.append(f"| {k} | {info.get(k)} |")
    lines += [
        "",
        "Load: `SentenceTransformer(path)`; evaluate: `ctxsim evaluate PATH --sts-dir DIR`.",
        "",
    ]
    return "\n".join(lines)


class TrainStage(Stage):
    name = "train"
    version = "2"  # 2: max_dev_pairs samples the dev set (was its first rows)
    Params = TrainParams
    inputs = ("label",)
    #: what some objectives read besides the labels (``context``: the queries, then the shard)
    optional_inputs = tuple(dict.fromkeys(i for o in OBJECTIVES.values() for i in o.inputs))
    #: training is not bitwise the same across thread counts: the count is in the fingerprint
    run_fields = ("seed", "device", "torch_threads")
    #: by labelled pairs; with a fixed step budget (max_steps), by steps (see cost_model)
    cost = InputRowsPerQuery(rows_of="label", label="labelled pairs")
    model_artefact = True
    #: every objective module (found, not imported by name: models/training/objectives/__init__.py)
    sources = MODULES

    def optional_inputs_for(self, params: TrainParams) -> tuple[str, ...]:
        """Only the inputs the objective reads: the others keep their fingerprints."""
        return get_objective(params.objective).inputs

    def cost_model(self, params: TrainParams) -> CostModel:
        """A fixed step budget is priced by steps: the pilots run a few of them."""
        if params.max_steps > 0:
            return OptimizerSteps(steps="max_steps", eval_steps="eval_steps", steps_stat="steps")
        return self.cost

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        import torch
        from sentence_transformers import SentenceTransformerTrainer

        p: TrainParams = ctx.params
        log = ctx.logger
        t0 = time.perf_counter()
        objective = get_objective(p.objective)
        label_art = ctx.input("label")
        cols = _label_columns(label_art.read_table(), p, str(label_art.path))
        pairs = training_pairs(cols, p, str(label_art.path))
        oc = ObjectiveContext(
            p, ctx.device, ctx.run.seed, log, lambda st, c: ctx.input(st).read_table(c)
        )
        examples = objective.examples(pairs, oc)
        max_steps = p.max_steps
        if objective.pair_budget and max_steps <= 0:
            max_steps = steps_for(len(pairs), p.batch_size, p.epochs)  # the pair objectives' steps

        dev = self._dev_set(ctx, p, cols)
        torch.manual_seed(ctx.run.seed)
        backbone_path = self._backbone(ctx, p, examples.texts, dev)
        model = build_model(backbone_path, p.max_seq_length, ctx.device, p.dropout)
        # the card's Hub widget examples cost a pass over the data and print their own bar
        model.model_card_data.generate_widget_examples = False
        if p.freeze_embeddings:
            model[0].auto_model.get_input_embeddings().weight.requires_grad_(False)
        loss = objective.loss(model, oc, backbone_path) if objective.trains else None
        if objective.needs_dropout and not has_dropout(model):
            log.warning(
                "train: %s has no dropout: SimCSE's positives are identical (set train.dropout)",
                p.backbone,
            )

        evaluator, metric = _evaluator(dev, p)
        ckpt_dir = ctx.cache_dir / "checkpoints"
        use_bf16 = _use_bf16(p, ctx.device)
        args = _training_args(p, ckpt_dir, max_steps, ctx, use_bf16, metric)
        trainer = None
        if objective.trains:
            trainer = SentenceTransformerTrainer(
                model=model,
                args=args,
                train_dataset=examples.data,
                loss=loss,
                evaluator=evaluator,
                callbacks=[_seal_checkpoints(), *_callbacks()],
            )
            _log_through(trainer, log)
        good = complete_checkpoints(ckpt_dir, log)
        resume = bool(good)
        # the backbone's own dev score: the bar the labels must clear (model card, stats)
        before = evaluator(model) if evaluator is not None and not resume else {}
        if resume:
            log.info("train: resuming from %s", good[-1])
        cpu0 = time.process_time()  # every thread of this process; dev evaluations included
        if trainer is not None:
            trainer.train(resume_from_checkpoint=str(good[-1]) if resume else None)
        train_cpu = time.process_time() - cpu0

        final = before if trainer is None else evaluator(model) if evaluator is not None else {}
        out_dir = ctx.files_dir / "model"
        model.save(str(out_dir))
        # the model is saved: checkpoints only served a resume, and weigh GBs per backbone
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        run = _RunOutcome(trainer, before, final, resume, use_bf16, train_cpu, time.perf_counter())
        info = _metrics(p, ctx, label_art.fingerprint, pairs, examples, dev, backbone_path, run, t0)
        (out_dir / "README.md").write_text(_model_card(info))
        (ctx.files_dir / "metrics.json").write_text(json.dumps(info, indent=2))
        history = _history_rows(trainer.state.log_history if trainer else [], metric)
        stats = {k: v for k, v in info.items() if v is not None}
        return history, stats

    @staticmethod
    def _backbone(ctx: StageContext, p: TrainParams, texts: list[str], dev: _DevSet | None) -> str:
        """The backbone's directory: a tiny one learnt from the training (and dev) sentences, the
        same vocabulary and weights for every objective, or the registry's."""
        if p.backbone != TINY:
            return resolve_backbone(p.backbone)
        if dev is not None:
            texts = texts + dev[0] + dev[1]
        return str(build_tiny_backbone(texts, ctx.files_dir / "backbone", p, ctx.run.seed))

    @staticmethod
    def _dev_set(ctx: StageContext, p: TrainParams, cols: _LabelColumns) -> _DevSet | None:
        """STSb dev from ``sts_dir`` when present, else the label artefact's dev split."""
        if p.sts_dir:
            from ctxsim.readers.sts import discover, sample_pairs

            root = Path(p.sts_dir).expanduser()
            if root.is_dir():
                for s in discover(root):
                    if s.name == p.dev_set:
                        s = sample_pairs(s, p.max_dev_pairs, ctx.run.seed)
                        return s.s1, s.s2, s.gold, s.name
                ctx.logger.warning("train: %s not found under %s", p.dev_set, root)
            else:
                ctx.logger.warning("train: sts_dir %s does not exist", root)
        dev_idx = np.flatnonzero((cols.split == "dev") & np.isfinite(cols.labels))
        if p.max_dev_pairs is not None:
            dev_idx = dev_idx[: p.max_dev_pairs]
        if len(dev_idx) < 3:
            ctx.logger.warning("train: no dev set; training without model selection")
            return None
        return (
            [cols.s1[i] for i in dev_idx],
            [cols.s2[i] for i in dev_idx],
            cols.labels[dev_idx].tolist(),
            "label.dev",
        )


#: (first sentences, second sentences, gold, name) of the dev set that selects the checkpoint
_DevSet = tuple[list[str], list[str], list[float], str]


class _LabelColumns(NamedTuple):
    """The label artefact's columns the stage reads (``labels``: ``train.label_column``)."""

    table: pa.Table
    s1: list[str | None]
    s2: list[str | None]
    labels: np.ndarray
    split: np.ndarray


def _label_columns(table: pa.Table, p: TrainParams, source: str) -> _LabelColumns:
    for col in ("s1", "s2", p.label_column, "split"):
        if col not in table.column_names:
            raise ValueError(f"label artefact {source} has no column {col!r}")
    return _LabelColumns(
        table,
        table.column("s1").to_pylist(),
        table.column("s2").to_pylist(),
        np.asarray(table.column(p.label_column).to_pylist(), dtype=np.float64),
        np.asarray(table.column("split").to_pylist(), dtype=object),
    )


def training_pairs(cols: _LabelColumns, p: TrainParams, source: str) -> TrainingPairs:
    """The pairs every objective starts from: split in ``train_splits``, a finite label, both
    sentences; the first ``max_train_pairs`` of them."""
    ok = np.isin(cols.split, p.train_splits) & np.isfinite(cols.labels)
    ok &= np.array(
        [a is not None and b is not None for a, b in zip(cols.s1, cols.s2, strict=True)],
        dtype=bool,
    )
    idx = np.flatnonzero(ok)
    if p.max_train_pairs is not None:
        idx = idx[: p.max_train_pairs]
    if len(idx) == 0:
        raise ValueError(f"no labelled pairs with split in {p.train_splits} in {source}")
    s1 = [cols.s1[i] for i in idx]
    s2 = [cols.s2[i] for i in idx]
    return TrainingPairs(s1, s2, cols.labels[idx], idx, cols.table, source)  # type: ignore[arg-type]


def _use_bf16(p: TrainParams, device: str) -> bool:
    import torch

    return bool(p.bf16 and device.startswith("cuda") and torch.cuda.is_bf16_supported())


def _evaluator(dev: _DevSet | None, p: TrainParams) -> tuple[Any, str | None]:
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


def _training_args(
    p: TrainParams,
    ckpt_dir: Path,
    max_steps: int,
    ctx: StageContext,
    use_bf16: bool,
    metric: str | None,
) -> Any:
    """The trainer's arguments: the optimizer of Sec. 4.1, checkpoints every ``eval_steps`` (the
    best dev Spearman kept when there is a dev set), the run's seed and device."""
    from sentence_transformers import SentenceTransformerTrainingArguments

    device, seed = ctx.device, ctx.run.seed
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
        optim="adamw_torch",
        bf16=use_bf16,
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
        use_cpu=not device.startswith("cuda"),
    )


class _RunOutcome(NamedTuple):
    """What training left: the trainer (None: no training), the dev scores before and after,
    whether it resumed, bf16, its CPU-seconds and when it ended."""

    trainer: Any
    before: dict[str, Any]
    final: dict[str, Any]
    resumed: bool
    bf16: bool
    train_cpu: float
    ended: float


def _metrics(
    p: TrainParams,
    ctx: StageContext,
    label_run: str,
    pairs: TrainingPairs,
    examples: Any,
    dev: _DevSet | None,
    backbone_path: str,
    run: _RunOutcome,
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


def complete_checkpoints(ckpt_dir: Path, log: Any) -> list[Path]:
    """The checkpoints a resume can load, oldest first (by step). The trainer writes
    ``trainer_state.json`` last, so a save cut short (a full disk, a kill) leaves a folder
    without it, which the trainer would still pick as the latest and fail to load: such folders
    are removed, and named in the log. A complete one must match the sha256 sealed beside it
    when it was saved (``_seal_checkpoints``): one that does not, or has no seal (cut short
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


def _seal_checkpoints() -> Any:
    """A trainer callback that seals each checkpoint once it is saved (``on_save`` follows the
    whole save and the rotation of older ones): the sha256 of its files beside it."""
    from transformers import TrainerCallback

    class SealCheckpoints(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            d = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if d.is_dir():
                seal(d)

    return SealCheckpoints()


def _log_through(trainer: Any, log: Any) -> None:
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


def _callbacks() -> list:
    """Extra trainer callbacks (a hook for tests that interrupt training to test resume)."""
    return []
