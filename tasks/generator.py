"""Stage `generator`: the generative context scorers of Sec. 3.2.2 (Eq. 2), trained on the corpus.

Training windows ``[c<, s, c>]`` come from the `contexts` artefact (w sentences per side, inside
one section); documents are split into train and held-out sets, so validation never sees a
training document. Each window gives one example per Eq. (3) direction (fwd, left, right).

``backbone``: ``tiny-random`` (a from-scratch model: WordPiece vocabulary learnt from the training
windows + a small BERT2BERT or Llama-style config sized by ``tiny_*``), or a registry short name /
path / hub id (models/registry.py): ``minilm`` warm-starts BERT2BERT, ``gemma-270m`` and
``smollm2-135m`` are causal prefix LMs. ``train_steps: 0`` packages a pretrained backbone as is.

Published files (``files/``): ``generator.json`` (backend, templates, limits, where the weights
are) and, unless a pretrained backbone is used untouched, the weights as safetensors
(``model/`` or ``model_<direction>/``) with the tokenizer. Training checkpoints live in the
stage's cache dir, so a crash resumes mid-epoch.

Rows: one per held-out evaluation sentence — its own context and a random held-out context of
similar length, each Eq. (3) generative term for both, and S_gen (lambda-weighted sum); the stats
say how often the own context wins, per term, for S_gen and for the left and right terms as
PMI (``score.pmi``: minus the target's log-prob without the sentence), and the validation
perplexity per direction.

Files: ``generator_scorers.py`` (building the scorer: tiny, pretrained or a distilled student),
``generator_data.py`` (the windows, their split, the examples), ``generator_train.py`` (the
checkpointed training, the loss curve, the teacher's stats), ``generator_eval.py`` (own vs random
context on held-out sentences).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from ctxsim.models.contextual.generator import DEFAULT_TEMPLATES, DIRECTIONS
from ctxsim.models.contextual.generator_training import validation_perplexity
from ctxsim.models.registry import check_model_name
from ctxsim.scores.loading import save_scorer
from ctxsim.store.checked import seal, verified
from ctxsim.store.cost_model import ScoredWindows
from ctxsim.store.stage import Stage, StageContext, StageParams, knob
from ctxsim.tasks.generator_data import load_windows, make_examples, split_windows
from ctxsim.tasks.generator_eval import true_context_wins
from ctxsim.tasks.generator_scorers import TINY, build_scorer, build_teacher
from ctxsim.tasks.generator_train import plot_loss, teacher_stats, train, train_stats

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


EVAL_SCHEMA = pa.schema(
    [("sent_id", pa.int64()), ("own_context_id", pa.int64()), ("random_context_id", pa.int64())]
    + [
        (f"{t}_{w}", pa.float32())
        for t in ("gen_fwd", "gen_left", "gen_right", "S_gen")
        for w in ("own", "random")
    ]
    # the left and right terms' pmi baselines (tasks/score.py): the target without the sentence
    + [(f"null_{t}_{w}", pa.float32()) for t in ("left", "right") for w in ("own", "random")]
)


class GeneratorStage(Stage):
    name = "generator"
    # 2: the evaluation also scores the pmi baselines (wins_pmi_left/right); 3: distillation;
    # 4: a target's last token not run (training's gradients move by float32 rounding)
    version = "4"
    Params = GeneratorParams
    inputs = ("shard", "contexts")
    #: the trained weights depend on the thread count (float sums split over threads)
    run_fields = ("seed", "torch_threads")
    #: windows scored in validation (3 each: both directions and the mean) and evaluation (10
    #: each: own and random context, 3 terms and 2 nulls); the build as is, training by steps
    cost = ScoredWindows(
        per_val=3,
        per_eval=10,
        val_stat="val_windows",
        eval_stat="eval_sentences",
        val_cap="max_val_windows",
        eval_param="n_eval",
        val_per_eval=3,
        steps_param="train_steps",
        build_stat="build_seconds",
        train_stat="train_seconds",
        steps_stat="train_steps",
    )
    model_artefact = True
    labelling = True

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: GeneratorParams = ctx.params
        seed, device = ctx.run.seed, ctx.device
        w = load_windows(ctx)
        tr, va, unit = split_windows(w, p.val_fraction, seed)
        rng = np.random.default_rng(seed)
        tr = np.sort(rng.permutation(tr)[: p.max_train_windows])
        va_all = va
        va = np.sort(rng.permutation(va)[: p.max_val_windows])
        stats: dict[str, Any] = {
            "backend": p.backend,
            "backbone": p.backbone,
            "split_unit": unit,
            "train_windows": len(tr),
            "val_windows": len(va),
        }
        tok_dir = ctx.cache_dir / "tokenizer"
        tokenizer = None
        teacher = build_teacher(p, device) if p.distill_from is not None else None
        if p.backbone == TINY and teacher is None and verified(tok_dir, "tokenizer", ctx.logger):
            # resume with the very same vocabulary
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
        texts = [t for i in tr for t in (w["left"][i], w["sentence"][i], w["right"][i])]
        t0 = time.perf_counter()
        scorer, tok, backbone_dir = build_scorer(p, texts, device, seed, tokenizer, teacher)
        if p.backbone == TINY and teacher is None and not tok_dir.exists():
            tok.save_pretrained(str(tok_dir))
            seal(tok_dir)  # its files' sha256, checked before a resume uses it
        stats["build_seconds"] = round(time.perf_counter() - t0, 2)
        stats["n_params"] = sum(x.numel() for m in scorer.modules() for x in m.parameters())
        val_ex = make_examples(scorer, w, va)
        trained = p.train_steps > 0
        if trained:
            train_ex = make_examples(scorer, w, tr, p.train_directions)
            before = validation_perplexity(scorer, val_ex)
            stats |= {f"val_ppl_{d}_before": round(before[f"ppl_{d}"], 3) for d in DIRECTIONS}
            summary = train(ctx, p, scorer, train_ex, teacher)
            stats |= train_stats(summary)
            plot_loss(ctx, summary["history"])
        after = validation_perplexity(scorer, val_ex)
        stats |= {f"val_ppl_{d}": round(after[f"ppl_{d}"], 3) for d in DIRECTIONS}
        if teacher is not None:
            stats |= teacher_stats(p, scorer, teacher, val_ex)
        meta = self._meta(p, trained, backbone_dir, after)
        save_scorer(scorer, ctx.files_dir, meta, weights=meta["weights"] == "artefact")
        cols, wins = true_context_wins(p, scorer, w, va_all, rng)
        stats |= wins
        table = EVAL_SCHEMA.empty_table() if cols is None else pa.table(cols, schema=EVAL_SCHEMA)
        return table, stats

    @staticmethod
    def _meta(
        p: GeneratorParams, trained: bool, backbone_dir: str | None, after: dict[str, float]
    ) -> dict[str, Any]:
        """``files/generator.json``: backend, templates, limits, where the weights are (the
        artefact, or the pretrained backbone's folder when it is used untouched) and the
        validation perplexity per direction."""
        meta = {
            "backend": p.backend,
            "backbone": p.backbone,
            "shared": p.shared,
            "templates": p.templates,
            "limits": {
                "max_context_tokens": p.max_context_tokens,
                "max_sentence_tokens": p.max_sentence_tokens,
            },
            "weights": "artefact"
            if (trained or p.copy_pretrained or backbone_dir is None)
            else backbone_dir,
            "val_ppl": {d: after[f"ppl_{d}"] for d in DIRECTIONS},
            "distilled_from": p.distill_from,
        }
        if p.backend == "seq2seq" and meta["weights"] != "artefact":
            meta["weights"] = "artefact"  # the control-token embeddings are new: always save
        return meta
