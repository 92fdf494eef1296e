"""The `train` config section (docs/stages.md lists its keys)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from ctxsim.models.contextual.origin import check_split_ratios
from ctxsim.models.registry import check_model_name
from ctxsim.models.training.objectives import OBJECTIVES, LossName, get_objective
from ctxsim.models.training.tiny_backbone import TINY
from ctxsim.store.stage import StageParams


class TrainParams(StageParams):
    """The `train` config section."""

    backbone: str = Field(
        TINY,
        description=(
            "The encoder to fine-tune: a registry name (minilm, gemma-270m, ...), a local path, or "
            "tiny-random (a from-scratch model for tests and the quickstart)."
        ),
    )
    init_from: str | None = Field(
        None,
        description=(
            "Start from this sentence-transformers model's weights instead of the backbone's (a "
            "registry name or path; ctxsim adapt's adapt.student: scorer names its in-domain "
            "scorer, itself trained from the backbone): the backbone stays the model the card "
            "and evaluate compare against."
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
        description="Objectives reading contexts: sentences after the centre taken as its context.",
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
    context_batches: Literal["random", "document", "length"] = Field(
        "random",
        description=(
            "Objectives that read contexts: random batches, document (each batch from as few "
            "of the corpus's documents as possible, so the other right contexts of a batch, its "
            "negatives, are of the same topic; overlapping contexts never share a batch) or "
            "length (random by topic, grouped by length: a batch pads to its own longest text; "
            "1.12x cheaper context steps, but it lost economics' QA 1.0-1.5 nDCG@10: not the "
            "recipe)."
        ),
    )
    label_share: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description=(
            "Objectives that train the labels with another part (ctxsim-context, joint): the "
            "labels' share of the batches; None draws the parts in proportion to their sizes "
            "(the library's default)."
        ),
    )
    context_swap_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description=(
            "ctxsim-context: of the labelled pairs with the highest labels, this share has each "
            "sentence also take its partner's right context as a positive (the labels choosing "
            "contexts); 0 = none. They join the right contexts' part; unless train.label_share is "
            "set, the labels keep the share of the batches the parts' sizes gave them before."
        ),
    )
    context_hard_negative_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description=(
            "ctxsim-context: of the labelled nearest-neighbour pairs with the lowest labels, this "
            "share has each sentence also take its partner's right context as a hard negative "
            "(the labels choosing negatives: close to the encoder, apart by their fit profiles): a "
            "third part of (sentence, its right context, the partner's); 0 = none. The labels "
            "keep their share of the batches; the other two parts share the rest by their sizes."
        ),
    )
    context_swap_partners: Literal["all", "leads", "questions"] = Field(
        "leads",
        description=(
            "ctxsim-context with context_swap_share: which partners give their right context: "
            "leads (only a sentence that opens its section: a question gives its answer; on "
            "economics all partners cost its QA 0.52, leads 0.24), questions (leads and every "
            "sentence ending in a question mark) or all."
        ),
    )
    loss: LossName = Field(
        "cosine",
        description=(
            "Training loss: cosine (the paper's L2 between the cosine and the label), cosent or "
            "angle (use only the labels' order), clrcmd (token-level alignment, CLRCMD), margin "
            "(one query sentence's partners ranked by their labels, MarginMSE on the cosines)."
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
        description="Label splits trained on (the label stage splits pairs into train/dev/test).",
    )
    split_ratios: list[float] = Field(
        default_factory=lambda: [98.0, 1.0, 1.0],
        description=(
            "An objective that reads no labels (context) trains on the `pairs` artefact's train "
            "split, cut as the label stage cuts it: label.split_ratios when the config has a "
            "label section (filled from it), else these."
        ),
    )
    max_train_pairs: int | None = Field(
        None,
        ge=1,
        description=(
            "Train on the first this-many eligible pairs only (None: all); for quick runs and "
            "learning curves."
        ),
    )
    max_seq_length: int = Field(
        64,
        ge=1,
        description=(
            "Tokens per sentence; longer sentences are truncated. Raise it for long sentences at a "
            "quadratic attention cost."
        ),
    )
    batch_size: int = Field(
        16,
        ge=1,
        description=(
            "Pairs per training step; with in-batch objectives it also sets the number of "
            "negatives."
        ),
    )
    epochs: float = Field(
        1.0,
        description="Passes over the training pairs (fractions allowed); max_steps > 0 overrides.",
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
    optimizer: Literal["adamw_torch", "adamw_torch_fused"] = Field(
        "adamw_torch",
        description=(
            "AdamW's kernel (the same update): adamw_torch, torch's multi-tensor loop, or "
            "adamw_torch_fused, one fused kernel (transformers' own default on torch >= 2.8; "
            "on CPU a step of MiniLM's 22.7 M parameters 36.1 ms against 153.8)."
        ),
    )
    eval_steps: int = Field(
        10,
        ge=1,
        description=(
            "Evaluate on the dev set (and checkpoint) every this many steps; the checkpoint with "
            "the best dev Spearman is kept."
        ),
    )
    save_total_limit: int = Field(
        2,
        ge=1,
        description="Checkpoints kept on disk in training (with a dev set the best is kept too).",
    )
    logging_steps: int = Field(
        5,
        ge=1,
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
        description="Keep the backbone's token embeddings fixed (fewer trained weights).",
    )
    freeze_layers: int = Field(
        0,
        ge=0,
        description=(
            "Keep the embeddings and the backbone's lowest this-many transformer layers fixed: "
            "a step then skips their backward (about two thirds of each fixed layer's cost)."
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
    attention: Literal["auto", "sdpa", "eager"] = Field(
        "sdpa",
        description=(
            "The backbone's attention kernel while training (the saved model keeps its own): "
            "sdpa, torch's scaled_dot_product_attention, or eager, its plain matmuls and "
            "softmax; auto (the adapt recipe's): eager on CPU, sdpa on a GPU. On CPU eager "
            "made a bf16 context step 1.16x cheaper, and without dropout sdpa takes a fused "
            "kernel whose backward is slower still "
            "(bench/results/train_speed_attention_medquad.md)."
        ),
    )
    context_gradient: Literal["both", "sentence"] = Field(
        "both",
        description="The right-context objective's gradient: both sides, or the sentence's alone "
        "(contexts encoded without it: 0.7x a step, MedQuAD's QA -4.2; adapt_context_gradient.md).",
    )
    dropout_masks: Literal["auto", "torch", "bytes"] = Field(
        "torch",
        description=(
            "How the backbone's dropout masks are drawn while training: torch's own (one "
            "random draw per element on CPU), or bytes, four 16-bit numbers from each 64-bit "
            "draw (the same keep probability to 1/65,536; models/training/dropout.py); auto "
            "(the adapt recipe's): bytes on CPU, torch on a GPU."
        ),
    )
    unpad: bool | Literal["auto"] = Field(
        False,
        description=(
            "Run the backbone's linear layers on real tokens only while training (the same "
            "function and dropout draws; models/training/unpadded.py): true, false, or auto (the "
            "adapt recipe's): true on a CPU for a BERT-shaped backbone, false on a GPU."
        ),
    )
    bf16: bool = Field(
        True,
        description=(
            "Train in bfloat16 on CUDA (ignored on CPU): about half the memory and faster on recent"
            " GPUs."
        ),
    )
    bf16_cpu: bool = Field(
        False,
        description=(
            "Train in bfloat16 autocast on a CPU with bf16 units too (AVX512-BF16 / AMX): "
            "measured 2.7x fewer CPU-s per step of the encoder recipe on this machine's EPYC "
            "(a probe of 32 x 56 tokens; the recipe: bench/results/adapt_recipe_two_fields.md); "
            "off: float32 on CPU as before."
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
        ge=1,
        description=(
            "loss clrcmd, clrcmd_sparse: sentences per block of the memory-saving form (bounds "
            "memory)."
        ),
    )
    tiny_vocab_size: int = Field(
        2000,
        ge=1,
        description="tiny-random backbone: size of the WordPiece vocabulary learnt from the texts.",
    )
    tiny_hidden_size: int = Field(
        32,
        ge=1,
        description="tiny-random backbone: hidden size.",
    )
    tiny_layers: int = Field(
        2,
        ge=1,
        description="tiny-random backbone: transformer layers.",
    )
    tiny_heads: int = Field(
        2,
        ge=1,
        description="tiny-random backbone: attention heads.",
    )

    #: keys added after the stage's version 2, with the default that reproduces version 2's
    #: output: left out of the dump (and so the fingerprint) at that default
    added_defaults: ClassVar[dict[str, Any]] = {
        "objective": "ctxsim",
        "init_from": None,
        "dropout": None,
        "teacher": "mpnet",
        "context_width": 1,
        "context_corpus_sentences": 0,
        "context_batches": "random",
        "bf16_cpu": False,
        "split_ratios": [98.0, 1.0, 1.0],
        "attention": "sdpa",
        "freeze_layers": 0,
        "label_share": None,
        "context_swap_share": 0.0,
        "context_hard_negative_share": 0.0,
        "context_swap_partners": "leads",
        "dropout_masks": "torch",
        "optimizer": "adamw_torch",
        "context_gradient": "both",
        "unpad": False,
    }

    def link(self, sections: dict[str, StageParams]) -> None:
        """An objective that reads no labels cuts the pairs as the config's label stage does."""
        ratios = getattr(sections.get("label"), "split_ratios", None)
        if ratios is not None and not get_objective(self.objective).needs_labels:
            self.split_ratios = list(ratios)

    @model_validator(mode="after")
    def _share_of_parts(self) -> TrainParams:
        parts = get_objective(self.objective).parts
        if self.label_share is not None and parts[:1] != ("ctxsim",):
            mixed = [n for n, o in OBJECTIVES.items() if o.parts[:1] == ("ctxsim",)]
            raise ValueError(
                f"train.label_share: objective {self.objective} trains no labels beside another "
                f"part (it applies to {', '.join(mixed)})"
            )
        if self.context_gradient != "both" and "context" not in (self.objective, *parts):
            raise ValueError(
                f"train.context_gradient: objective {self.objective} trains no right contexts (it "
                "applies to context and ctxsim-context)"
            )
        for key in ("context_swap_share", "context_hard_negative_share"):
            if getattr(self, key) > 0 and parts != ("ctxsim", "context"):
                raise ValueError(
                    f"train.{key}: objective {self.objective} trains no labels beside right "
                    "contexts (it applies to ctxsim-context)"
                )
        return self

    @field_validator("split_ratios")
    @classmethod
    def _three(cls, v: list[float]) -> list[float]:
        return check_split_ratios(v, "train.split_ratios")

    @field_validator("backbone")
    @classmethod
    def _known_backbone(cls, value: str) -> str:
        return check_model_name(value, TINY)

    @field_validator("init_from")
    @classmethod
    def _known_init(cls, value: str | None) -> str | None:
        return None if value is None else check_model_name(value)

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
