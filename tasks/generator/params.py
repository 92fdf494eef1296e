"""The `generator` config section (docs/stages.md lists its keys)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ctxsim.models.contextual.generator import DEFAULT_TEMPLATES, DIRECTIONS
from ctxsim.models.registry import check_model_name
from ctxsim.store.stage import StageParams, knob

#: the backbone name of a model built from scratch (scorers.py: WordPiece vocabulary learnt from
#: the training windows, a config sized by ``tiny_*``)
TINY = "tiny-random"

#: fields naming a model, resolved when the config is loaded (flows/config.py: names_model lists
#: the values that are built-in choices, not models)
TinyOrModel = Annotated[str, Field(json_schema_extra={"names_model": [TINY]})]
ModelOrNone = Annotated[str | None, Field(json_schema_extra={"names_model": []})]


class GeneratorParams(StageParams):
    backend: Literal["seq2seq", "causal"] = Field(
        "seq2seq",
        description=(
            "The generative scorer's kind: seq2seq (an encoder-decoder fine-tuned to fill the gaps)"
            " or causal (a decoder-only LM prompted with templates)."
        ),
    )
    backbone: TinyOrModel = Field(
        TINY,
        description=(
            "The model to start from: tiny-random (from scratch, tests and quickstart), minilm, "
            "gemma-270m, smollm2-135m, a path or a hub id (resolved at config load)."
        ),
    )
    shared: bool = Field(
        True,
        description=(
            "seq2seq: one model for the three directions (else one per direction: three times the "
            "training)."
        ),
    )
    templates: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_TEMPLATES),
        description=(
            "causal: the prompt of each Eq. 3 direction (fwd, left, right), with {left}, {right}, "
            "{sentence} and {target} slots."
        ),
    )
    max_context_tokens: int = Field(
        96,
        ge=1,
        description=(
            "Tokens per context side; the left side keeps its last tokens. Longer contexts cost "
            "more per window."
        ),
    )
    max_sentence_tokens: int = Field(
        64,
        ge=1,
        description="Tokens of the target sentence at most.",
    )
    tiny_hidden: int = Field(
        64,
        ge=8,
        description=(
            "tiny-random: hidden size of the from-scratch model (also the distilled student's)."
        ),
    )
    tiny_layers: int = Field(
        2,
        ge=1,
        description="tiny-random: layers.",
    )
    tiny_heads: int = Field(
        2,
        ge=1,
        description="tiny-random: attention heads.",
    )
    tiny_intermediate: int = Field(
        128,
        ge=8,
        description="tiny-random: MLP width.",
    )
    tokenizer_vocab: int = Field(
        4000,
        ge=100,
        description="tiny-random: size of the WordPiece vocabulary learnt from the corpus.",
    )
    max_train_windows: int = Field(
        20_000,
        ge=1,
        description="Training windows sampled from the corpus at most.",
    )
    val_fraction: float = Field(
        0.1,
        gt=0.0,
        lt=1.0,
        description=(
            "Share of documents (of sections if there is one document) held out for validation and "
            "the evaluation."
        ),
    )
    max_val_windows: int = Field(
        300,
        ge=1,
        description="Validation windows evaluated at most.",
    )
    train_steps: int = Field(
        300,
        ge=0,
        description=(
            "Optimiser steps; 0 packages the backbone untrained (zero-shot scoring with a "
            "pretrained LM)."
        ),
    )
    batch_size: int = Field(
        16,
        ge=1,
        description="Windows per training step (times grad_accum).",
    )
    grad_accum: int = Field(
        1,
        ge=1,
        description=(
            "Steps whose gradients are accumulated before an update: a larger effective batch in "
            "the same memory."
        ),
    )
    lr: float = Field(
        5e-4,
        gt=0,
        description="Peak learning rate (AdamW).",
    )
    weight_decay: float = Field(
        0.01,
        ge=0,
        description="AdamW's weight decay.",
    )
    warmup_steps: int = Field(
        30,
        ge=0,
        description="Steps of linear learning-rate warm-up.",
    )
    max_grad_norm: float = Field(
        1.0,
        gt=0,
        description="Gradient-norm clip.",
    )
    checkpoint_every: int = Field(
        100,
        ge=0,
        description=(
            "Save a resumable checkpoint every this many optimiser steps (0: only at the end); "
            "training resumes from the last one after a crash."
        ),
    )
    max_train_seconds: float = Field(
        0.0,
        ge=0,
        description="Wall-clock cap on training, in seconds (0: none).",
    )
    copy_pretrained: bool = Field(
        False,
        description=(
            "train_steps 0: copy the backbone's weights into the artefact (else it records where "
            "they are), so the artefact stands alone."
        ),
    )
    model_cache_dir: str | None = Field(
        None,
        description="Where registry models are assembled (default ~/.cache).",
    )
    n_eval: int = Field(
        200,
        ge=0,
        description='Held-out sentences of the "does the true context win" evaluation (0: none).',
    )
    length_tolerance: float = Field(
        0.2,
        ge=0,
        description=(
            "Evaluation: the random rival context is within this relative length of the true one "
            "(0.2: +-20%), so length does not give it away."
        ),
    )
    lambda_fwd: float = Field(
        1.0,
        description=(
            "Evaluation: weight of the forward term in the S that must prefer the true context."
        ),
    )
    lambda_left: float = Field(
        1.0,
        description="Evaluation: weight of the left term.",
    )
    lambda_right: float = Field(
        1.0,
        description="Evaluation: weight of the right term.",
    )
    token_budget: int = knob(
        8192,
        ge=1,
        description=(
            "Evaluation: padded tokens per forward call of the scoring engine. Speed and memory "
            "only: out of the fingerprint."
        ),
    )
    bf16_on_cpu: bool = Field(
        False,
        description=(
            "bf16 matmuls on CPU in training and the evaluation's engine (faster on CPUs with "
            "AVX512-BF16/AMX; values differ slightly)."
        ),
    )
    distill_from: ModelOrNone = Field(
        None,
        description=(
            "Distillation: train a tiny-random causal student on this teacher's next-token "
            "distributions (registry short name, path or hub id); it takes the teacher's tokenizer "
            "and templates, tiny_* size it. None: no distillation."
        ),
    )
    distill_alpha: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description=(
            "Distillation: weight of the KL to the teacher (1 - alpha: plain cross-entropy)."
        ),
    )
    distill_temperature: float = Field(
        1.0,
        gt=0.0,
        description="Distillation: softmax temperature of teacher and student distributions.",
    )
    distill_svd_init: bool = Field(
        True,
        description=(
            "Distillation: start the student's embeddings from the teacher's, projected to rank "
            "tiny_hidden."
        ),
    )
    train_directions: list[Literal["fwd", "left", "right"]] = Field(
        default_factory=lambda: list(DIRECTIONS),
        min_length=1,
        description=(
            "Eq. 3 directions trained on (e.g. [right] when only the right term is scored)."
        ),
    )

    @field_validator("backbone")
    @classmethod
    def _known_backbone(cls, value: str) -> str:
        return check_model_name(value, TINY)

    @field_validator("distill_from")
    @classmethod
    def _known_teacher(cls, value: str | None) -> str | None:
        return None if value is None else check_model_name(value)

    @model_validator(mode="after")
    def _check(self) -> GeneratorParams:
        if self.backbone == TINY and self.train_steps == 0:
            raise ValueError("generator: backbone tiny-random needs train_steps > 0")
        if self.tiny_hidden % self.tiny_heads:
            raise ValueError("generator: tiny_hidden must be a multiple of tiny_heads")
        missing = set(DIRECTIONS) - set(self.templates)
        if self.backend == "causal" and missing:
            raise ValueError(f"generator.templates lacks directions {sorted(missing)}")
        if self.distill_from is not None and (
            self.backend != "causal" or self.backbone != TINY or self.train_steps == 0
        ):
            raise ValueError(
                "generator.distill_from needs backend: causal, backbone: tiny-random (the "
                "student) and train_steps > 0"
            )
        return self
