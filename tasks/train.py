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

Files: ``train_data.py`` (the label columns, the training pairs, the dev set),
``train_trainer.py`` (sentence-transformers' trainer: arguments, checkpoints, resume, the fit),
``train_report.py`` (metrics, model card, history rows); the tiny backbone is built by
models/training/tiny_backbone.py, the objectives live in models/training/objectives/.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field, field_validator

from ctxsim.models.registry import check_model_name
from ctxsim.models.training.objectives import (
    MODULES,
    OBJECTIVES,
    LossName,
    ObjectiveContext,
    get_objective,
    has_dropout,
    steps_for,
)
from ctxsim.models.training.sentence_encoder import build_model
from ctxsim.models.training.tiny_backbone import TINY, build_tiny_bert
from ctxsim.store.cost_model import CostModel, InputRowsPerQuery, OptimizerSteps
from ctxsim.store.stage import Stage, StageContext, StageParams
from ctxsim.tasks.train_data import DevSet, dev_set, label_columns, training_pairs
from ctxsim.tasks.train_report import RunOutcome, history_rows, model_card, run_metrics
from ctxsim.tasks.train_trainer import (
    dev_evaluator,
    fit,
    make_trainer,
    training_args,
    use_bf16,
)

__all__ = [
    "TINY",
    "TrainParams",
    "TrainStage",
    "build_model",
    "build_tiny_backbone",
    "objective_examples",
]

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
    """A randomly initialised small BERT sized by ``p.tiny_*`` with a WordPiece vocabulary
    learned from ``texts`` (models/training/tiny_backbone.py), in ``out_dir``."""
    return build_tiny_bert(
        texts,
        out_dir,
        vocab_size=p.tiny_vocab_size,
        hidden_size=p.tiny_hidden_size,
        layers=p.tiny_layers,
        heads=p.tiny_heads,
        max_seq_length=p.max_seq_length,
        seed=seed,
    )


def resolve_backbone(name: str) -> str:
    """A loadable directory or hub id for a backbone name (the registry when it knows it)."""
    from ctxsim.models.registry import resolve_model

    return str(resolve_model(name))


def objective_examples(cols: Any, oc: ObjectiveContext, source: str) -> tuple[Any, Any, Any, int]:
    """The objective ``oc.params`` names, its training pairs, its examples and its step budget:
    what the stage trains on, also packed by bench/bench_student_grid.py to train elsewhere."""
    p = oc.params
    objective = get_objective(p.objective)
    pairs = training_pairs(cols, p, source)
    examples = objective.examples(pairs, oc)
    max_steps = p.max_steps
    if objective.pair_budget and max_steps <= 0:
        max_steps = steps_for(len(pairs), p.batch_size, p.epochs)  # the pair objectives' steps
    return objective, pairs, examples, max_steps


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
            return OptimizerSteps(
                steps="max_steps",
                eval_steps="eval_steps",
                steps_stat="steps",
                per_query=("context_corpus_sentences",),
            )
        return self.cost

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        import torch

        p: TrainParams = ctx.params
        log = ctx.logger
        t0 = time.perf_counter()
        label_art = ctx.input("label")
        cols = label_columns(label_art.read_table(), p, str(label_art.path))
        oc = ObjectiveContext(
            p, ctx.device, ctx.run.seed, log, lambda st, c: ctx.input(st).read_table(c)
        )
        objective, pairs, examples, max_steps = objective_examples(cols, oc, str(label_art.path))

        dev = dev_set(ctx, p, cols)
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

        evaluator, metric = dev_evaluator(dev, p)
        ckpt_dir = ctx.cache_dir / "checkpoints"
        bf16 = use_bf16(p, ctx.device)
        args = training_args(p, ckpt_dir, max_steps, ctx, bf16, metric)
        trainer = None
        if objective.trains:
            trainer = make_trainer(model, args, examples.data, loss, evaluator, log)
        before, final, resumed, train_cpu = fit(model, trainer, evaluator, ckpt_dir, log)

        out_dir = ctx.files_dir / "model"
        model.save(str(out_dir))
        # the model is saved: checkpoints only served a resume, and weigh GBs per backbone
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        run = RunOutcome(trainer, before, final, resumed, bf16, train_cpu, time.perf_counter())
        info = run_metrics(
            p, ctx, label_art.fingerprint, pairs, examples, dev, backbone_path, run, t0
        )
        (out_dir / "README.md").write_text(model_card(info))
        (ctx.files_dir / "metrics.json").write_text(json.dumps(info, indent=2))
        rows = history_rows(trainer.state.log_history if trainer else [], metric)
        history = pa.Table.from_pylist(rows, schema=HISTORY_SCHEMA)
        stats = {k: v for k, v in info.items() if v is not None}
        return history, stats

    @staticmethod
    def _backbone(ctx: StageContext, p: TrainParams, texts: list[str], dev: DevSet | None) -> str:
        """The backbone's directory: a tiny one learnt from the training (and dev) sentences, the
        same vocabulary and weights for every objective, or the registry's."""
        if p.backbone != TINY:
            return resolve_backbone(p.backbone)
        if dev is not None:
            texts = texts + dev[0] + dev[1]
        return str(build_tiny_backbone(texts, ctx.files_dir / "backbone", p, ctx.run.seed))
