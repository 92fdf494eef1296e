"""`ctxsim adapt`: the encoder-route recipe as one command, a config underneath.

The recipe is ``configs/recipes/adapt.yaml``: its stage sections are an ordinary config (the encoder
route of docs/domain.md), its ``adapt:`` section the rules (``AdaptRules``) that size a run from
the corpus and the budget, the same for every field. ``adapt_config`` reads the corpus's shape
(readers/corpus_shape.py), applies the rules and returns the config as a mapping; the command
writes it under the root (``<root>/adapt/<run id>.yaml``), so `ctxsim run --config` on that file
reruns, resumes or plans the same run, and `inspect`, `export`, deployments work as for any run.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ctxsim.models.errors import InputError
from ctxsim.readers.corpus_shape import CorpusShape, detect_shape

RECIPE = Path("configs/recipes/adapt.yaml")


class AdaptRules(BaseModel):
    """The `adapt:` section of the recipe: how sizes follow from the corpus and the budget."""

    model_config = ConfigDict(extra="forbid")

    words_per_sentence: float = Field(
        20.0, gt=0, description="corpus words per kept sentence (economics 21, MedQuAD 19)"
    )
    max_queries: int = Field(2000, ge=1, description="labelled queries of a large corpus")
    query_share: float = Field(
        0.25, gt=0, le=1, description="at most this share of the corpus's sentences are queries"
    )
    min_queries: int = Field(
        100, ge=1, description="fewer queries than this: the corpus is refused as too small"
    )
    max_context_sentences: int = Field(
        8000, ge=0, description="extra corpus sentences trained on their right context"
    )
    context_sentence_share: float = Field(
        0.5, ge=0, le=1, description="at most this share of the corpus's sentences as those"
    )
    scorer: Literal["download", "in-domain"] = Field(
        "download",
        description="the contextual model: the encoder as downloaded, or in-domain: the same "
        "encoder trained first on the corpus's right contexts (objective context, "
        "scorer_step_share of the recipe's steps), then the recipe run with it as embed.model",
    )
    scorer_step_share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="the in-domain scorer's training steps as a share of the recipe's",
    )
    scorer_max_seq_length: int | None = Field(
        None,
        ge=8,
        description="the in-domain scorer's train.max_seq_length (none: the recipe's): it "
        "encodes the corpus's paragraphs at embed.max_seq_length, so it need not train on "
        "longer right contexts than the student does",
    )
    student: Literal["download", "scorer"] = Field(
        "download",
        description="where the recipe's training starts: the encoder as downloaded, or scorer: "
        "the in-domain scorer's weights (train.init_from), so the student keeps what the scorer "
        "learnt of the corpus's right contexts (with scorer: download, the download: a full pass)",
    )
    student_step_share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="with student: scorer, the recipe's training steps as a share of one pass "
        "over the labelled pairs (it continues from the scorer)",
    )
    min_steps: int = Field(
        0,
        ge=0,
        description="a pass is at least this many steps: a small corpus's few labelled pairs "
        "repeated (the budget, when given, still bounds it)",
    )
    words_per_embed_shard: int = Field(
        4_000_000,
        ge=1,
        description="embed shards: at least the recipe's, one more per this many corpus words "
        "(a shard holds its piece's texts and vectors; bench/results/corpus_scale_books.md)",
    )
    small_words: int = Field(
        200_000, ge=0, description="below this many words the plan warns what a run can do"
    )
    cpu_s_fixed: float = Field(60.0, ge=0, description="cost model: model loads, Prefect")
    cpu_s_per_word: float = Field(
        2.0e-4,
        ge=0,
        description="cost model: embed, pairs and label, per corpus word the embed pass reads",
    )
    cpu_s_per_read_word: float = Field(
        0.0, ge=0, description="cost model: shard, contexts and queries, per corpus word"
    )
    words_per_unit: float = Field(
        80.0,
        gt=0,
        description="corpus words per context unit (a paragraph: economics 79, MedQuAD 80): with "
        "embed.max_units the embed pass reads about max_units x this many words",
    )
    cpu_s_per_step: float = Field(
        3.0,
        ge=0,
        description="cost model: one training step of the recipe's batch (labels and right "
        "contexts), float32",
    )
    cpu_s_per_context_step: float = Field(
        3.0,
        ge=0,
        description="cost model: one step of the in-domain scorer (right contexts alone: longer "
        "texts than the labels' sentences), float32",
    )
    cpu_s_per_dev_item: float = Field(
        0.085, ge=0, description="cost model: one dev pair or question, three systems scored"
    )
    cpu_eval_cached_share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="cost model: the evaluation's CPU-s times this on a root whose evaluation "
        "cache already holds the download's encodings of the same dev tasks (a later run)",
    )
    cpu_model_work_exponent: float = Field(
        1.0,
        gt=0,
        le=1,
        description="cost model: another encoder's costs are MiniLM's times its work per token "
        "over MiniLM's (layers x hidden^2) to this power: a larger model's products run closer "
        "to the machine's peak, so 8x the work costs less than 8x the CPU-s",
    )
    cpu_bf16_factor: float = Field(
        1.0,
        gt=0,
        le=1,
        description="cost model: per-word and per-dev-item costs times this where embed "
        "(embed.bf16) and evaluate (evaluate.bf16_cpu) run in bf16 on a CPU with bf16 units",
    )
    cpu_bf16_step_factor: float = Field(
        1.0,
        gt=0,
        le=1,
        description="cost model: a training step's cost times this where it runs in bf16 "
        "(train.bf16_cpu) on a CPU with bf16 units",
    )
    cpu_no_dropout_factor: float = Field(
        1.0,
        gt=0,
        le=1,
        description="cost model: a training step's cost times this with train.dropout: 0 (no "
        "random masks to draw and apply)",
    )
    cpu_byte_masks_factor: float = Field(
        1.0,
        gt=0,
        le=1,
        description="cost model: a training step's cost times this with its dropout masks drawn "
        "from bytes (train.dropout_masks: bytes, or auto on a CPU)",
    )
    cpu_unpad_factor: float = Field(
        1.0,
        gt=0,
        le=1,
        description="cost model: a training step's cost times this with its linear layers on "
        "real tokens only (train.unpad: true, or auto on a CPU for a BERT-shaped encoder)",
    )
    cpu_sentence_gradient_factor: float = Field(
        1.0,
        gt=0,
        le=1,
        description="cost model: a training step's cost times this with "
        "train.context_gradient: sentence (the right contexts encoded without gradient)",
    )
    cpu_step_seq_length: int = Field(
        0,
        ge=0,
        description="cost model: the train.max_seq_length the per-step figures above were "
        "measured at; a run with another cap is priced by the two exponents below (0: not "
        "priced)",
    )
    cpu_step_batch_size: int = Field(
        0,
        ge=0,
        description="cost model: the train.batch_size the per-step figures were measured at; a "
        "run with another batch is priced in proportion to its size (0: not priced)",
    )
    cpu_step_seq_exponent: float = Field(
        0.0,
        ge=0,
        description="cost model: a recipe step's cost grows as (train.max_seq_length / "
        "cpu_step_seq_length) to this power (its right contexts; the labels' sentences are "
        "shorter than any cap)",
    )
    cpu_context_step_seq_exponent: float = Field(
        0.0,
        ge=0,
        description="cost model: the same for a step of the in-domain scorer (right contexts "
        "alone; above 1: the attention's work grows as the square of the length)",
    )
    probe_step_cpu_s_bf16: float = Field(
        0.0,
        ge=0,
        description="cost model: the speed probe's step (models/training/speed_probe.py) in "
        "bf16 on the machine the CPU-s above were measured on; a plan that trains in bf16 "
        "scales them by this machine's probe over it (0: not scaled)",
    )
    probe_step_cpu_s_float32: float = Field(
        0.0,
        ge=0,
        description="cost model: the same in float32, for a machine without bf16 units (0: not "
        "scaled)",
    )


#: --set keys of the recipe's training alone: the scorer trains right contexts without labels
STUDENT_ONLY = (
    "train.objective",
    "train.label_share",
    "train.context_swap_share",
    "train.context_hard_negative_share",
)

#: the plan's note for a corpus of records with a lead text (a question before its answer)
SWAP_HINT = (
    "records with a lead text: --set train.context_swap_share=0.25 lets the labels pick "
    "answers as positives (MedQuAD's QA +3.4 nDCG@10, RQE +1.2 AP on three seeds; not the "
    "default: a tie on economics, -0.2; docs/adapt-measured.md)"
)

#: the plan's note for a corpus with no lead text (no question paired with its answer)
RETRIEVAL_HINT = (
    "no records pairing a question with its answer: if your task is question -> passage "
    "retrieval alone, --set train.objective=context drops the labels (on three such corpora "
    "they cost one retrieval task 0.5-0.9 nDCG@10 and bought pair tasks 0.2-0.9 AP; "
    "docs/adapt-measured.md)"
)


@dataclass
class AdaptPlan:
    """What ``adapt_config`` decided: the shape, the sizes, the predicted cost, and why."""

    shape: CorpusShape
    queries: int
    context_sentences: int
    steps: int
    cpu_s: float
    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    #: the in-domain scorer's config (run first), or None: the encoder as downloaded scores
    scorer: dict[str, Any] | None = None
    #: the recipe's training starts from the scorer's weights (adapt.student: scorer)
    student_from_scorer: bool = False
    #: one pass over the labelled pairs (``steps`` is the student's share of it)
    pass_steps: int = 0
    #: the cost model's CPU-s besides the trainings, and a step's price: ``cpu_s`` is repriced
    #: from the configs' train sections (``reprice``) after every change of them
    fixed_cpu_s: float = 0.0
    prices: StepPrices | None = None
    #: this machine's speed probe over the cost model's machine's (1: not scaled), and why
    speed: float = 1.0
    speed_note: str = "not scaled to this machine"

    def lines(self) -> list[str]:
        """The plan as printed (sizes read from the config, so --set overrides show)."""
        queries, train = self.config["queries"], self.config["train"]
        out = [
            f"corpus: {self.shape.describe()}",
            f"sizes: {queries['n_corpus']:,} queries x {self.pairs_per_query} pairs, "
            f"{train['context_corpus_sentences']:,} extra context sentences, "
            f"{train['max_steps']} steps",
            f"predicted cost: {self.cpu_s / 3600:.2f} CPU-hours (the recipe's cost model, "
            f"{self.speed_note}; `ctxsim plan --config` on the written config pilots it)",
        ]
        if self.scorer is not None:
            out.insert(
                2,
                f"scorer: {self.scorer['train']['backbone']} trained first on the corpus's right "
                f"contexts ({self.scorer['train']['max_steps']} steps, no labels), then the "
                "contextual model of the labels"
                + (
                    ", and the recipe's training starts from it" if self.student_from_scorer else ""
                ),
            )
        notes = list(self.notes)
        leads = self.config["shard"].get("lead_fields")
        if leads and not train.get("context_swap_share"):
            notes.append(SWAP_HINT)
        elif not leads and train["objective"] == "ctxsim-context":
            notes.append(RETRIEVAL_HINT)
        return out + [f"note: {n}" for n in notes]

    @property
    def pairs_per_query(self) -> int:
        return int(self.config["pairs"]["pairs_per_query"])

    def override(self, overrides: list[str]) -> None:
        """``--set SECTION.KEY=VALUE`` on the config, as `ctxsim run --set` would (on the
        scorer's too where it runs that section); ``--set scorer.SECTION.KEY=VALUE`` on the
        in-domain scorer's alone, so its training can differ from the student's."""
        from ctxsim.flows.config import _set_dotted, parse_override

        for ov in overrides:
            key, value = parse_override(ov)
            if key.startswith("scorer."):
                if self.scorer is None:
                    raise InputError(
                        f"--set {ov}: this run has no in-domain scorer run (adapt.scorer: "
                        "download, or embed.model named)"
                    )
                inner = key.removeprefix("scorer.")
                section = inner.split(".")[0]
                if section not in self.scorer:
                    raise InputError(
                        f"--set {ov}: the scorer's run has no {section} section "
                        f"(it runs {', '.join(s for s in self.scorer if s != 'run')})"
                    )
                _set_dotted(self.scorer, inner, value, f"--set {ov}")
                continue
            _set_dotted(self.config, key, value, f"--set {ov}")
            if self.scorer is None:
                continue
            if key == "embed.model":  # the user names the scorer: no scorer run
                self.scorer = None
                if self.student_from_scorer:  # nothing to continue from: the download, a pass
                    self.student_from_scorer = False
                    self.config["train"].pop("init_from", None)
                    self.steps = self.pass_steps
                    _set_steps(self.config["train"], self.steps)
            elif key == "train.init_from":  # the user names the student's start
                self.student_from_scorer = False
            elif key == "label.split_ratios":  # the scorer cuts its pairs as label does
                _set_dotted(self.scorer, "train.split_ratios", value, f"--set {ov}")
            elif key not in STUDENT_ONLY and key.split(".")[0] in self.scorer:
                _set_dotted(self.scorer, key, value, f"--set {ov}")
        self.link_scorer()
        self.reprice()

    def reprice(self) -> None:
        """The predicted cost from the trainings the configs now hold (steps, bf16, fixed
        layers, dropout), the rest of the cost model's figure kept."""
        if self.prices is None:
            return
        trainings = [self.config["train"], *([self.scorer["train"]] if self.scorer else [])]
        self.cpu_s = self.fixed_cpu_s + sum(self.prices.training_cpu_s(t) for t in trainings)

    def link_scorer(self) -> None:
        """The recipe's embed.model: where the scorer's trained encoder will be."""
        if self.scorer is not None:
            self.config["embed"]["model"] = str(scorer_dir(self.scorer))
            if self.student_from_scorer:
                self.config["train"]["init_from"] = self.config["embed"]["model"]

    def check(self) -> None:
        """Load the config as `ctxsim run` will (a ConfigError in one line otherwise)."""
        import tempfile

        from ctxsim.flows.config import load_config

        configs = [self.config]
        if self.scorer is not None:  # the recipe's embed.model exists once the scorer ran
            ready = copy.deepcopy(self.config)
            ready["embed"]["model"] = self.scorer["train"]["backbone"]
            if self.student_from_scorer:
                ready["train"]["init_from"] = self.scorer["train"]["backbone"]
            configs = [self.scorer, ready]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "adapt.yaml"
            for cfg in configs:
                path.write_text(yaml.safe_dump(cfg, sort_keys=False))
                load_config(path)


def read_recipe(path: Path = RECIPE) -> tuple[dict[str, Any], AdaptRules]:
    """The recipe's stage sections and its rules; a missing or bad file is one line."""
    if not path.exists():
        raise InputError(
            f"recipe {path} does not exist (run from the checkout, or give --recipe PATH)"
        )
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("adapt"), dict):
        raise InputError(f"{path}: a recipe needs an `adapt:` section of rules")
    rules_raw = raw.pop("adapt")
    try:
        rules = AdaptRules(**rules_raw)
    except ValidationError as e:
        raise InputError(_rule_errors(str(path), e)) from None
    return raw, rules


def _rule_errors(
    source: str, err: ValidationError, overridden: dict[str, str] | None = None
) -> str:
    """pydantic's errors as one line, each naming the rule and where it came from."""
    from ctxsim.flows.config import error_lines

    return "; ".join(error_lines(source, "adapt", err, overridden, unknown="unknown rule"))


def override_rules(rules: AdaptRules, overrides: list[str]) -> AdaptRules:
    """``--set adapt.KEY=VALUE`` on the recipe's rules, validated (one line when bad)."""
    from ctxsim.flows.config import parse_override

    update: dict[str, Any] = {}
    overridden: dict[str, str] = {}
    for ov in overrides:
        key, value = parse_override(ov)
        name = key.removeprefix("adapt.")
        if name not in AdaptRules.model_fields:
            raise InputError(f"--set {ov}: the recipe has no rule adapt.{name}")
        update[name], overridden[f"adapt.{name}"] = value, ov
    try:
        return AdaptRules(**{**rules.model_dump(), **update})
    except ValidationError as e:
        raise InputError(_rule_errors("--set", e, overridden)) from None


def sizes(
    words: int,
    rules: AdaptRules,
    batch: int,
    pairs_per_query: int,
    budget_cpu_h: float | None,
    model_factor: float = 1.0,
    dev_items: int = 0,
    bf16: bool = False,
    trainings: float = 1.0,
    eval_bf16: bool = False,
    max_units: int = 0,
    speed: float = 1.0,
) -> tuple[int, int, int, float, list[str]]:
    """(queries, extra context sentences, steps, predicted CPU-s, notes) for a corpus of
    ``words`` words: queries and context sentences are shares of the corpus's sentences up to the
    recipe's caps; steps are one pass over the labelled pairs, at least ``rules.min_steps``; a
    budget scales both down until the cost model fits it. ``model_factor``: the encoder's cost
    per token against MiniLM's (``model_cost_factor``); ``dev_items``: dev pairs and questions
    to evaluate; ``bf16``: embed and train run in bf16 (``rules.cpu_bf16_factor``,
    ``rules.cpu_bf16_step_factor``), ``eval_bf16`` the evaluation too; ``trainings``: trainings
    priced in passes of the recipe's step (``priced_passes``); ``max_units``: embed.max_units
    (0: the embed pass reads every word); ``speed``: this machine's CPU-s per the cost
    model's (``machine_speed``)."""
    sentences = words / rules.words_per_sentence
    queries = int(min(rules.max_queries, sentences * rules.query_share))
    ctx = int(min(rules.max_context_sentences, sentences * rules.context_sentence_share))
    notes: list[str] = []

    step_speed = rules.cpu_bf16_step_factor if bf16 else 1.0
    per_step = rules.cpu_s_per_step * model_factor * step_speed * trainings * speed
    fixed = speed * fixed_cpu_s(words, rules, model_factor, dev_items, bf16, eval_bf16, max_units)

    floor = rules.min_steps
    if budget_cpu_h is not None and per_step > 0:  # the floor never outgrows the budget
        floor = min(floor, int((budget_cpu_h * 3600 - fixed) / per_step))

    def cost(q: int) -> tuple[int, float]:
        steps = max(1, math.ceil(q * pairs_per_query / batch), floor)
        return steps, fixed + per_step * steps

    steps, cpu = cost(queries)
    if budget_cpu_h is not None and cpu > budget_cpu_h * 3600:
        left = budget_cpu_h * 3600 - fixed
        fit = int(left / per_step * batch / pairs_per_query) if left > 0 else 0
        if fit < rules.min_queries:
            raise InputError(
                f"--budget-cpu-hours {budget_cpu_h:g}: reading and labelling this corpus alone "
                f"costs about {fixed / 3600:.2f} CPU-hours and {rules.min_queries} queries "
                f"(adapt.min_queries) need {cost(rules.min_queries)[1] / 3600:.2f}; raise the "
                "budget or pass a smaller corpus"
            )
        notes.append(f"the budget cut queries from {queries:,} to {fit:,}")
        ctx = int(ctx * fit / max(queries, 1))
        queries = fit
        steps, cpu = cost(queries)
    if queries < rules.min_queries:
        raise InputError(
            f"corpus too small: about {words:,} words give {queries} queries, fewer than "
            f"adapt.min_queries={rules.min_queries}; the recipe needs a larger corpus"
        )
    if words < rules.small_words:
        notes.append(
            f"a small corpus ({words:,} words): {queries} queries and few context units; "
            "measured, about 100,000 words of a field kept its own dev gains and about 50,000 "
            "gained under 1 point, interval spanning 0 (docs/adapt-measured.md): check it on "
            "your own dev task (--eval-dir)"
        )
    return queries, ctx, steps, cpu, notes


def evaluated_before(root: str, eval_dir: str, model: str) -> bool:
    """Whether a finished run on ``root`` evaluated ``eval_dir`` with ``model`` as its download
    and the evaluation cache on, so ``ROOT/_cache/evaluate`` holds the download's encodings of
    those dev tasks and this run reads them (tasks/evaluate/encoding_cache.py)."""
    from ctxsim.store.artefacts import ArtefactStore

    store = ArtefactStore(root, create=False)
    cache = store.cache_dir("evaluate", create=False)
    if not cache.is_dir() or not any(cache.iterdir()):
        return False
    want = Path(eval_dir).resolve()
    for record in store.list_runs():  # an unreadable record is skipped with a warning
        cfg = record.get("config") or {}
        ev = cfg.get("evaluate") or {}
        if (
            "evaluate" in (record.get("stages") or {})
            and ev.get("cache", True)
            and "backbone" in ev.get("baselines", ["backbone"])
            and ev.get("eval_dir")
            and Path(ev["eval_dir"]).resolve() == want
            and (cfg.get("train") or {}).get("backbone") == model
        ):
            return True
    return False


def fixed_cpu_s(
    words: int,
    rules: AdaptRules,
    model_factor: float = 1.0,
    dev_items: int = 0,
    bf16: bool = False,
    eval_bf16: bool = False,
    max_units: int = 0,
) -> float:
    """The cost model's CPU-s besides the trainings: loads, reading the corpus, embed, pairs and
    label over the words embed reads, and the evaluation of ``dev_items``."""
    speed = rules.cpu_bf16_factor if bf16 else 1.0
    return (
        rules.cpu_s_fixed
        + rules.cpu_s_per_read_word * words
        + rules.cpu_s_per_word * embed_words(words, max_units, rules) * model_factor * speed
        + rules.cpu_s_per_dev_item * dev_items * model_factor * (speed if eval_bf16 else 1.0)
    )


@dataclass(frozen=True)
class StepPrices:
    """What one training step costs in the cost model, read from a config's train section, so
    the printed estimate follows ``--set train.freeze_layers``, ``train.dropout``, steps, ..."""

    rules: AdaptRules
    model_factor: float = 1.0
    #: the encoder's transformer layers (None: unknown, fixed layers then not priced)
    layers: int | None = None
    #: this machine's CPU-s per the cost model's (``machine_speed``)
    speed: float = 1.0
    #: the encoder's config ``model_type`` (train.unpad auto applies to "bert")
    model_type: str | None = None

    def step_cpu_s(self, train: dict[str, Any]) -> float:
        from ctxsim.models.encoders import bf16_available
        from ctxsim.models.training.sentence_encoder import training_dropout_masks

        r = self.rules
        context = train.get("objective") == "context"
        cost = (r.cpu_s_per_context_step if context else r.cpu_s_per_step) * self.model_factor
        if train.get("bf16_cpu") and bf16_available("cpu"):
            cost *= r.cpu_bf16_step_factor
        if train.get("dropout") == 0:
            cost *= r.cpu_no_dropout_factor
        elif training_dropout_masks(str(train.get("dropout_masks", "torch")), "cpu") == "bytes":
            cost *= r.cpu_byte_masks_factor
        if train.get("context_gradient") == "sentence":
            cost *= r.cpu_sentence_gradient_factor
        unpad = train.get("unpad", False)
        if unpad is True or (unpad == "auto" and self.model_type == "bert"):
            cost *= r.cpu_unpad_factor
        frozen = frozen_step_share(int(train.get("freeze_layers") or 0), self.layers)
        power = r.cpu_context_step_seq_exponent if context else r.cpu_step_seq_exponent
        length = seq_length_step_factor(train.get("max_seq_length"), r.cpu_step_seq_length, power)
        batch = batch_step_factor(train.get("batch_size"), r.cpu_step_batch_size)
        return cost * frozen * length * batch * self.speed

    def training_cpu_s(self, train: dict[str, Any]) -> float:
        return int(train.get("max_steps") or 0) * self.step_cpu_s(train)


def frozen_step_share(frozen: int, layers: int | None) -> float:
    """A step's FLOPs with the lowest ``frozen`` of ``layers`` layers fixed, against none: a
    fixed layer runs forward only (1 of a trained layer's 3 units of work). Measured on
    economics' context batches: 0.81 and 0.71 of a step with 2 and 3 of MiniLM's 6 fixed
    against this 0.78 and 0.67 (bench/results/train_speed_freeze_econ.md)."""
    if not layers or frozen <= 0:
        return 1.0
    frozen = min(frozen, layers)
    return (3 * (layers - frozen) + frozen) / (3 * layers)


def batch_step_factor(batch: int | None, measured_at: int) -> float:
    """A step's cost with ``batch`` texts a side against the batch the rules were measured at:
    in proportion, as its tokens are. Half the batch took 0.46-0.60x the trainings' CPU-s on
    both fields (the step's fixed work, the optimizer's update, does not halve; the runs priced
    within 6%: bench/results/adapt_batch16.md)."""
    if not measured_at or not batch:
        return 1.0
    return int(batch) / measured_at


def seq_length_step_factor(length: int | None, measured_at: int, exponent: float) -> float:
    """A step's cost at a cap of ``length`` tokens against the cap the rules were measured at:
    (length / measured_at) ** exponent. A batch pads to its longest text, which for 8-sentence
    right contexts is about the cap; economics' context step at 192 and 256 tokens took 1.65x
    and 2.21x its 128's (exponents 1.23, 1.14: bench/results/train_speed_context_tokens_econ.md),
    its whole scorer training at 192 1.53x (1.05), its student's 1.16x (0.37): the recipe's
    exponents, 1.1 and 0.4, are the runs' (adapt_context_tokens_cost.md). At 64 the scorer's
    training took 0.52x and 0.57x on economics and MedQuAD, priced 0.47x
    (adapt_scorer_tokens.md)."""
    if not measured_at or not length:
        return 1.0
    return (int(length) / measured_at) ** exponent


def embed_words(words: int, max_units: int, rules: AdaptRules) -> float:
    """The corpus words the embed pass encodes: all, or about a sample of max_units units'."""
    return float(words) if max_units <= 0 else min(words, max_units * rules.words_per_unit)


def adapt_config(
    corpus: list[str],
    model: str,
    eval_dir: str | None,
    budget_cpu_h: float | None,
    root: str,
    fields: dict[str, Any] | None = None,
    recipe: Path = RECIPE,
    rule_overrides: list[str] | None = None,
) -> AdaptPlan:
    """The config `ctxsim adapt` runs: the recipe with the corpus's shape, the model and the
    sizes the rules give (``fields``: shard settings the user named, over the detected ones;
    ``rule_overrides``: ``--set adapt.KEY=VALUE`` on the rules)."""
    base, rules = read_recipe(recipe)
    rules = override_rules(rules, rule_overrides or [])
    shape = detect_shape(corpus)
    cfg = copy.deepcopy(base)
    shard = cfg.setdefault("shard", {})
    shard.update(shape.settings)
    shard.update(fields or {})
    shard["paths"] = list(corpus)
    for section, key in (("embed", "model"), ("pairs", "encoder"), ("train", "backbone")):
        cfg.setdefault(section, {})[key] = model
    batch = int(cfg["train"].get("batch_size", 32))
    per_query = int(cfg["pairs"].get("pairs_per_query", 4))
    dev_items, eval_note = 0, []
    if eval_dir is not None:
        from ctxsim.readers.evaluators import discover_eval_dir

        dev_items = sum(len(ev) for ev in discover_eval_dir(eval_dir))
        if cfg.get("evaluate", {}).get("cache", True) and evaluated_before(root, eval_dir, model):
            dev_items = round(dev_items * rules.cpu_eval_cached_share)
            eval_note.append(
                "an earlier run on this root evaluated these dev tasks: the download's "
                "encodings are read from its evaluation cache (evaluate priced at "
                f"{rules.cpu_eval_cached_share:.2f} of a first run's)"
            )
    factor = model_cost_factor(model) ** rules.cpu_model_work_exponent
    max_units = int(cfg.get("embed", {}).get("max_units", 0))
    bf16, eval_bf16 = _bf16(cfg), _bf16(cfg, (("evaluate", "bf16_cpu"),))
    speed, speed_note = machine_speed(rules, _bf16(cfg, (("train", "bf16_cpu"),)))
    queries, ctx, steps, cpu, notes = sizes(
        shape.words_estimate, rules, batch, per_query, budget_cpu_h, model_factor=factor,
        dev_items=dev_items, bf16=bf16, trainings=priced_passes(rules), eval_bf16=eval_bf16,
        max_units=max_units, speed=speed,
    )  # fmt: skip
    notes = shape.notes + notes + eval_note
    if embed_words(shape.words_estimate, max_units, rules) < shape.words_estimate:
        notes.append(
            f"embed encodes a seeded sample of {max_units:,} of about "
            f"{int(shape.words_estimate / rules.words_per_unit):,} paragraphs (embed.max_units: "
            "the labels' scatter matrix is an average, estimated from the sample)"
        )
    if not shard.get("lead_fields"):
        notes.append(
            "no lead texts (question fields) put before the text: queries' lead share comes "
            "from each section's first paragraph"
        )
    cfg["queries"]["n_corpus"] = queries
    embed = cfg.setdefault("embed", {})
    least = int(embed.get("n_shards", 4))
    embed["n_shards"] = embed_shards(shape.words_estimate, rules, least, max_units)
    cfg["train"]["context_corpus_sentences"] = ctx
    _set_steps(cfg["train"], steps)
    cfg.setdefault("run", {})["root"] = root
    if eval_dir is None:
        cfg.pop("evaluate", None)
    else:
        cfg["evaluate"]["eval_dir"] = eval_dir
    plan = AdaptPlan(shape, queries, ctx, steps, cpu, cfg, notes, pass_steps=steps)
    plan.fixed_cpu_s = speed * fixed_cpu_s(
        shape.words_estimate, rules, factor, dev_items, bf16, eval_bf16, max_units
    )
    kind = _model_config(model).get("model_type")
    plan.prices = StepPrices(rules, factor, model_layers(model), speed, kind)
    plan.speed, plan.speed_note = speed, speed_note
    if rules.scorer == "in-domain":
        plan.scorer = scorer_config(cfg, rules.scorer_step_share, rules.scorer_max_seq_length)
        plan.student_from_scorer = rules.student == "scorer"
        if plan.student_from_scorer:  # it continues from the scorer: fewer steps of its own
            plan.steps = max(1, round(steps * rules.student_step_share))
            _set_steps(cfg["train"], plan.steps)
        plan.link_scorer()
    plan.reprice()
    return plan


def machine_speed(rules: AdaptRules, bf16: bool) -> tuple[float, str]:
    """This machine's CPU-s per the cost model's machine's, and how the plan says so: the
    speed probe's step here (in bf16 when the run trains in bf16) over the recipe's
    ``probe_step_cpu_s_*``, measured once per machine and kept in the plan cache. 1 when the
    recipe names no probe figure, ``$CTXSIM_SPEED_PROBE`` is off or the probe fails."""
    reference = rules.probe_step_cpu_s_bf16 if bf16 else rules.probe_step_cpu_s_float32
    if reference <= 0:
        return 1.0, "not scaled to this machine: the recipe names no speed probe figure"
    if os.environ.get("CTXSIM_SPEED_PROBE", "on").strip().lower() in ("off", "0", "false", "no"):
        return 1.0, "not scaled to this machine: CTXSIM_SPEED_PROBE is off"
    from ctxsim.flows.plan_cache import cached_speed_probe

    try:
        here = cached_speed_probe(bf16)
    except (RuntimeError, OSError, ValueError) as e:  # a plan never dies of its estimate
        return 1.0, f"not scaled to this machine: its speed probe failed ({e})"
    mode = "bf16" if bf16 else "float32"
    return here / reference, (
        f"scaled to this machine by its speed probe: a {mode} step {here:.2f} CPU-s against "
        f"{reference:.2f} where the model was fit, x{here / reference:.2f}"
    )


def priced_passes(rules: AdaptRules) -> float:
    """The trainings a run pays for, in passes over the labelled pairs at the recipe's step: the
    student's (a share of one when it continues from the scorer) and the in-domain scorer's,
    whose steps (right contexts alone) cost ``cpu_s_per_context_step`` each, priced at its own
    token cap when the rules give it one."""
    if rules.scorer != "in-domain":
        return 1.0
    student = rules.student_step_share if rules.student == "scorer" else 1.0
    dearer = rules.cpu_s_per_context_step / rules.cpu_s_per_step if rules.cpu_s_per_step else 1.0
    dearer *= seq_length_step_factor(
        rules.scorer_max_seq_length, rules.cpu_step_seq_length, rules.cpu_context_step_seq_exponent
    )
    return rules.scorer_step_share * dearer + student


def scorer_config(
    cfg: dict[str, Any], step_share: float = 1.0, max_seq_length: int | None = None
) -> dict[str, Any]:
    """The in-domain scorer's run: the recipe's shard, contexts, queries and pairs (shared with
    it), then train with the right-context objective alone for ``step_share`` of the recipe's
    steps (right contexts cut at ``max_seq_length`` tokens when given), its trained encoder then
    the recipe's contextual model. The objective reads the pairs' sentences, not labels: no
    embed or label stage (the label stage's split, kept)."""
    scorer = copy.deepcopy(cfg)
    for section in ("evaluate", "embed", "label"):
        scorer.pop(section, None)
    ratios = cfg.get("label", {}).get("split_ratios")
    if ratios is not None:
        scorer["train"]["split_ratios"] = list(ratios)
    scorer["train"]["objective"] = "context"
    if max_seq_length is not None:
        scorer["train"]["max_seq_length"] = int(max_seq_length)
    _set_steps(scorer["train"], max(1, round(int(scorer["train"]["max_steps"]) * step_share)))
    return scorer


def _set_steps(train: dict[str, Any], steps: int) -> None:
    """A training's step budget, with a checkpoint halfway for a resume."""
    train["max_steps"] = steps
    train["eval_steps"] = max(1, steps // 2)


def scorer_dir(scorer: dict[str, Any]) -> Path:
    """Where the scorer's trained encoder is copied: ``<root>/adapt/scorer-<hash>`` of its
    config, so the recipe's config names a path known before the scorer runs."""
    text = json.dumps(scorer, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return Path(scorer["run"]["root"]) / "adapt" / f"scorer-{digest}"


def embed_shards(words: int, rules: AdaptRules, least: int, max_units: int = 0) -> int:
    """Embed's shards for a corpus of ``words`` words: the recipe's ``least``, or one per
    ``rules.words_per_embed_shard`` words it encodes (all, or a sample of ``max_units`` units'),
    so that a shard's memory stays that of a bounded piece as the corpus grows (and a crash
    loses at most one piece)."""
    encoded = embed_words(words, max_units, rules)
    return max(least, math.ceil(encoded / rules.words_per_embed_shard))


def _bf16(
    cfg: dict[str, Any],
    keys: tuple[tuple[str, str], ...] = (("embed", "bf16"), ("train", "bf16_cpu")),
) -> bool:
    """Whether the config's passes named by (section, key)s (embed's and train's unless told)
    run in bf16 on this machine's CPU (the cost model counts CPU-seconds: a CUDA device is not
    priced)."""
    from ctxsim.models.encoders import bf16_available

    wanted = all(cfg.get(section, {}).get(key) for section, key in keys)
    return bool(wanted and bf16_available("cpu"))


#: MiniLM's layers x hidden size squared: the cost model's unit
_MINILM_WORK = 6 * 384**2


def model_cost_factor(model: str) -> float:
    """The encoder's work per token against all-MiniLM-L6-v2's (layers x hidden^2 from its
    config; 1.0 when it cannot be read): mpnet's is 8."""
    cfg = _model_config(model)
    try:
        return cfg["num_hidden_layers"] * cfg["hidden_size"] ** 2 / _MINILM_WORK
    except (KeyError, TypeError):
        return 1.0


def model_layers(model: str) -> int | None:
    """The encoder's transformer layers from its config (None when it cannot be read)."""
    layers = _model_config(model).get("num_hidden_layers")
    return layers if isinstance(layers, int) else None


def _model_config(model: str) -> dict[str, Any]:
    """The backbone's config.json (its own folder's or a module subfolder's), {} if unread."""
    from ctxsim.models.registry import resolve_model

    try:
        root = Path(resolve_model(model))
        configs = [root / "config.json", *root.glob("*/config.json")]
        cfg = json.loads(next(c for c in configs if c.exists()).read_text())
    except (StopIteration, OSError, KeyError, ValueError, TypeError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def dump_config(plan: AdaptPlan, command: str, part: str = "all") -> str:
    """The config as YAML, headed by the command that made it and the plan (sizes, predicted
    cost): ``part`` "recipe" or "scorer" alone (the files ctxsim adapt writes; the recipe's when
    there is no scorer), or "all" (--dump-config: with an in-domain scorer, its config first,
    then the recipe's, as two YAML documents)."""
    head = (
        f"# Written by: {command}\n# The recipe of configs/recipes/adapt.yaml sized for this "
        'corpus (docs/domain.md, "ctxsim adapt"):\n'
        + "".join(f"#   {line}\n" for line in plan.lines())
    )

    def text(cfg: dict[str, Any]) -> str:
        return yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True)

    if part == "scorer" and plan.scorer is not None:
        return head + "# The in-domain scorer's run (until train).\n" + text(plan.scorer)
    if part == "recipe" or plan.scorer is None:
        return head + text(plan.config)
    return (
        head + "# Two runs: the in-domain scorer first (this document, until train; its model is "
        "copied to the second's embed.model), then the recipe.\n"
        + text(plan.scorer)
        + "---\n"
        + text(plan.config)
    )


def model_problem(model: str) -> str | None:
    """Why ``model`` cannot be the encoder adapt starts from, or None: a registered sentence
    encoder or a sentence-transformers folder; a causal LM (the registry's GGUF models, or a
    folder whose config names a ...ForCausalLM) is not a sentence encoder."""
    import json

    from ctxsim.models.encoders import encoder_problem
    from ctxsim.models.registry import REGISTRY

    spec = REGISTRY.get(model)
    if spec is not None and spec.kind.startswith("gguf"):
        return f"--model {model}: a causal language model, not a sentence encoder (minilm, mpnet)"
    problem = encoder_problem(model)
    if problem:
        return f"--model: {problem}"
    path = Path(model).expanduser()
    if spec is None and (path / "config.json").exists():
        arch = json.loads((path / "config.json").read_text()).get("architectures") or []
        if any("CausalLM" in a or "ConditionalGeneration" in a for a in arch):
            return f"--model {model}: a generative model ({arch[0]}), not a sentence encoder"
    return None


def eval_dir_problem(eval_dir: str) -> str | None:
    """Why ``eval_dir`` holds no dev task, or None."""
    from ctxsim.readers.evaluators import discover_eval_dir

    path = Path(eval_dir).expanduser()
    if not path.is_dir():
        return f"--eval-dir {eval_dir}: no such folder"
    if not discover_eval_dir(path):
        return (
            f"--eval-dir {eval_dir}: no task file under it (*.pairs.tsv, *_qa.jsonl, iSTS); "
            "docs/evaluation.md lists the formats"
        )
    return None
