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
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import numpy as np
import pyarrow as pa
import torch
from pydantic import Field, field_validator, model_validator

from ctxsim.models.contextual.generator import (
    DEFAULT_TEMPLATES,
    DIRECTIONS,
    CausalPrefixScorer,
    GenerativeScorer,
    Limits,
    Seq2SeqScorer,
    TinyConfig,
    add_control_tokens,
    eq3_example,
    tiny_causal,
    tiny_seq2seq,
    train_wordpiece_tokenizer,
    warm_start_seq2seq,
)
from ctxsim.models.contextual.generator.distill import student_like, teacher_agreement
from ctxsim.models.contextual.generator_training import (
    Example,
    TrainConfig,
    train_generator,
    validation_perplexity,
)
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine
from ctxsim.models.registry import check_model_name, resolve_model
from ctxsim.scores.loading import save_scorer
from ctxsim.store.checked import seal, verified, write_checked
from ctxsim.store.cost_model import ScoredWindows
from ctxsim.store.stage import Stage, StageContext, StageParams, knob
from ctxsim.store.tables import rows_of

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


# ---- building, saving and loading scorers ---------------------------------------------------


def _limits(p: GeneratorParams) -> Limits:
    return Limits(
        max_context_tokens=p.max_context_tokens, max_sentence_tokens=p.max_sentence_tokens
    )


def build_scorer(
    p: GeneratorParams,
    train_texts: list[str],
    device: str,
    seed: int,
    tokenizer: Any = None,
    teacher: CausalPrefixScorer | None = None,
) -> tuple[GenerativeScorer, Any, str | None]:
    """(scorer, tokenizer, resolved backbone dir or None for tiny-random); with
    ``distill_from``, a student shaped after ``teacher``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if p.distill_from is not None:
        teacher = teacher if teacher is not None else build_teacher(p, device)
        cfg = TinyConfig(p.tiny_hidden, p.tiny_layers, p.tiny_heads, p.tiny_intermediate)
        student = student_like(teacher, cfg, seed, p.distill_svd_init)
        return student, student.tokenizer, None
    if p.backbone == TINY:
        tok = tokenizer or train_wordpiece_tokenizer(train_texts, p.tokenizer_vocab)
        cfg = TinyConfig(p.tiny_hidden, p.tiny_layers, p.tiny_heads, p.tiny_intermediate)
        if p.backend == "causal":
            return (
                CausalPrefixScorer(
                    tiny_causal(tok, cfg, seed), tok, p.templates, _limits(p), device
                ),
                tok,
                None,
            )
        models: Any = (
            tiny_seq2seq(tok, cfg, seed)
            if p.shared
            else {d: tiny_seq2seq(tok, cfg, seed + i) for i, d in enumerate(DIRECTIONS)}
        )
        return Seq2SeqScorer(models, tok, _limits(p), device), tok, None
    path = str(resolve_model(p.backbone, p.model_cache_dir))
    if p.backend == "causal":
        tok = tokenizer or AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        return CausalPrefixScorer(model, tok, p.templates, _limits(p), device), tok, path
    tok = tokenizer or AutoTokenizer.from_pretrained(path)
    add_control_tokens(tok)
    models = (
        warm_start_seq2seq(path, tok, seed)
        if p.shared
        else {d: warm_start_seq2seq(path, tok, seed + i) for i, d in enumerate(DIRECTIONS)}
    )
    return Seq2SeqScorer(models, tok, _limits(p), device), tok, path


def build_teacher(p: GeneratorParams, device: str) -> CausalPrefixScorer:
    """The distillation teacher: a pretrained causal LM with this config's templates."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert p.distill_from is not None
    path = str(resolve_model(p.distill_from, p.model_cache_dir))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return CausalPrefixScorer(model, tok, p.templates, _limits(p), device)


# ---- data -----------------------------------------------------------------------------------


def _join_text(texts: np.ndarray, rows: list[list[int]]) -> list[str]:
    return [" ".join(texts[r] for r in row) for row in rows]


def load_windows(ctx: StageContext) -> dict[str, Any]:
    """Every context window as texts, with its document and section (for the split)."""
    sh = (
        ctx.input("shard")
        .read_table(["sent_id", "doc_id", "section_id", "text"])
        .sort_by("sent_id")
    )
    sent_ids = sh.column("sent_id").to_numpy()
    texts = np.asarray(sh.column("text").to_pylist(), dtype=object)
    docs = sh.column("doc_id").to_numpy()
    secs = sh.column("section_id").to_numpy()
    co = ctx.input("contexts").read_table(
        ["context_id", "centre_sent_id", "left_sent_ids", "right_sent_ids"]
    )
    if co.num_rows == 0:
        raise ValueError("generator: the contexts artefact is empty (no window has both sides)")

    def rows(ids: np.ndarray, what: str) -> np.ndarray:
        return rows_of(sent_ids, ids, f"generator: contexts.{what} names sent_ids")

    centre = rows(co.column("centre_sent_id").to_numpy(), "centre_sent_id")
    left = [
        rows(np.asarray(x, np.int64), "left_sent_ids").tolist()
        for x in co.column("left_sent_ids").to_pylist()
    ]
    right = [
        rows(np.asarray(x, np.int64), "right_sent_ids").tolist()
        for x in co.column("right_sent_ids").to_pylist()
    ]
    return {
        "context_id": co.column("context_id").to_numpy().astype(np.int64),
        "sent_id": sent_ids[centre],
        "doc": docs[centre],
        "section": secs[centre],
        "left": _join_text(texts, left),
        "sentence": texts[centre].tolist(),
        "right": _join_text(texts, right),
    }


def split_windows(w: dict[str, Any], frac: float, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(train rows, held-out rows, unit) with whole documents held out (sections if one doc)."""
    unit_name = "doc" if len(np.unique(w["doc"])) >= 2 else "section"
    units = np.unique(w[unit_name])
    if len(units) < 2:
        raise ValueError("generator: need at least two sections to hold some out for validation")
    rng = np.random.default_rng(seed)
    n_val = min(len(units) - 1, max(1, round(frac * len(units))))
    val_units = rng.choice(units, size=n_val, replace=False)
    is_val = np.isin(w[unit_name], val_units)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val), unit_name


def make_examples(
    scorer: GenerativeScorer,
    w: dict[str, Any],
    rows: np.ndarray,
    directions: tuple[str, ...] | list[str] = DIRECTIONS,
) -> list[Example]:
    cache: dict[str, Any] = {}
    out: list[Example] = []
    for i in rows:
        for d in directions:
            src, tgt = eq3_example(d, w["left"][i], w["sentence"][i], w["right"][i])
            out.append((d, *scorer.example_ids(d, src, tgt, cache)))
    return out


def random_partners(
    lengths: np.ndarray, section: np.ndarray, tol: float, rng: np.random.Generator
) -> np.ndarray:
    """For each row, another row of a different section whose context length is within
    ``tol`` (relative) — chosen at random among those, else the closest in length."""
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


# ---- the stage ------------------------------------------------------------------------------

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
    # 2: the evaluation also scores the pmi baselines (wins_pmi_left/right); 3: distillation
    version = "3"
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
            summary = self._train(ctx, p, scorer, train_ex, teacher)
            stats |= {
                "train_steps": summary["steps"],
                "train_epochs": round(summary["epochs"], 3),
                "train_seconds": round(summary["seconds"], 1),
                "train_tokens_per_s": round(summary["train_tokens_per_s"], 1),
                "train_final_loss": round(summary["final_loss"], 4),
                "train_stopped_early": summary["stopped_early"],
            }
            self._plot(ctx, summary["history"])
        after = validation_perplexity(scorer, val_ex)
        stats |= {f"val_ppl_{d}": round(after[f"ppl_{d}"], 3) for d in DIRECTIONS}
        if teacher is not None:
            stats |= self._teacher_stats(p, scorer, teacher, val_ex)
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
        save_scorer(scorer, ctx.files_dir, meta, weights=meta["weights"] == "artefact")
        table, wins = self._true_context_wins(p, scorer, w, va_all, rng)
        stats |= wins
        return table, stats

    def _train(
        self,
        ctx: StageContext,
        p: GeneratorParams,
        scorer: GenerativeScorer,
        train_ex: list[Example],
        teacher: GenerativeScorer | None = None,
    ) -> dict[str, Any]:
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
        ckpt = ctx.cache_dir / "checkpoint.pt"
        state = None
        if verified(ckpt, "generator checkpoint", ctx.logger):  # sha256 beside it
            state = torch.load(ckpt, map_location="cpu", weights_only=True)
            ctx.logger.info(f"generator: resuming from step {state['step']} ({ckpt})")

        def save(s: dict[str, Any]) -> None:
            write_checked(ckpt, lambda tmp: torch.save(s, tmp))

        return train_generator(scorer, train_ex, cfg, state, save, ctx.logger.info, teacher)

    @staticmethod
    def _teacher_stats(
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

    def _plot(self, ctx: StageContext, history: list[dict[str, Any]]) -> None:
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

    def _true_context_wins(
        self,
        p: GeneratorParams,
        scorer: GenerativeScorer,
        w: dict[str, Any],
        va: np.ndarray,
        rng: np.random.Generator,
    ) -> tuple[pa.Table, dict[str, Any]]:
        """Held-out sentences: own context vs a random held-out context of similar length."""
        n = min(p.n_eval, len(va))
        if n == 0 or len(np.unique(w["section"][va])) < 2:
            return EVAL_SCHEMA.empty_table(), {"eval_sentences": 0}
        lengths = np.asarray([len(w["left"][i]) + len(w["right"][i]) for i in va], np.float64)
        partner = random_partners(lengths, w["section"][va], p.length_tolerance, rng)
        pick = np.sort(rng.permutation(len(va))[:n])
        own, rand = va[pick], va[partner[pick]]
        sents = [w["sentence"][i] for i in own]
        lefts = [w["left"][i] for i in own] + [w["left"][i] for i in rand]
        rights = [w["right"][i] for i in own] + [w["right"][i] for i in rand]
        eng = ScoringEngine(
            scorer, EngineConfig(token_budget=p.token_budget, bf16_on_cpu=p.bf16_on_cpu)
        )
        t0 = time.perf_counter()
        res = eng.score(lefts, sents + sents, rights)
        secs = time.perf_counter() - t0  # eval_pairs_per_s: the Eq. 3 terms, as before
        null = eng.score(lefts, [""] * (2 * n), rights, ("left", "right"))
        lam = {"fwd": p.lambda_fwd, "left": p.lambda_left, "right": p.lambda_right}
        s_gen = sum(lam[d] * res[d].astype(np.float64) for d in DIRECTIONS).astype(np.float32)
        cols: dict[str, Any] = {
            "sent_id": w["sent_id"][own],
            "own_context_id": w["context_id"][own],
            "random_context_id": w["context_id"][rand],
        }
        stats: dict[str, Any] = {"eval_sentences": n}
        for name, v in [*((f"gen_{d}", res[d]) for d in DIRECTIONS), ("S_gen", s_gen)]:
            cols[f"{name}_own"], cols[f"{name}_random"] = v[:n], v[n:]
            stats[f"wins_{name}"] = round(float(np.mean(v[:n] > v[n:])), 4)
        # as score.pmi takes them: does s raise its own context more than a random one? (fwd's
        # baseline, log p(s), is the same for both contexts, so its wins do not change)
        for d in ("left", "right"):
            cols[f"null_{d}_own"], cols[f"null_{d}_random"] = null[d][:n], null[d][n:]
            pmi = res[d].astype(np.float64) - null[d]
            stats[f"wins_pmi_{d}"] = round(float(np.mean(pmi[:n] > pmi[n:])), 4)
        stats["eval_pairs_per_s"] = round(2 * n / secs, 2) if secs > 0 else 0.0
        return pa.table(cols, schema=EVAL_SCHEMA), stats
