"""Stage `train`: the Siamese surrogate of Sun et al. (2022), Sec. 3.4.

The class; the package's docstring (__init__.py) says what it does and which file does what.
"""

from __future__ import annotations

import json
import shutil
import time
from typing import Any

import pyarrow as pa

from ctxsim.models.contextual.origin import pair_split_names
from ctxsim.models.training.objectives import (
    MODULES,
    OBJECTIVES,
    ObjectiveContext,
    get_objective,
    has_dropout,
)
from ctxsim.models.training.sentence_encoder import build_student
from ctxsim.models.training.tiny_backbone import TINY, build_tiny_backbone
from ctxsim.models.training.training_data import (
    LabelColumns,
    label_columns,
    objective_examples,
    pair_columns,
)
from ctxsim.store.artefacts import Artefact
from ctxsim.store.cost_model import CostModel, InputRowsPerQuery
from ctxsim.store.cost_models_training import OptimizerSteps
from ctxsim.store.stage import Stage, StageContext
from ctxsim.tasks.pairs import given_pairs
from ctxsim.tasks.train.data import DevSet, dev_set
from ctxsim.tasks.train.params import TrainParams
from ctxsim.tasks.train.report import RunOutcome, history_rows, model_card, run_metrics
from ctxsim.tasks.train.trainer import (
    dev_evaluator,
    fit,
    make_trainer,
    training_args,
    use_bf16,
)

HISTORY_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("epoch", pa.float64()),
        ("train_loss", pa.float64()),
        ("dev_spearman", pa.float64()),
        ("dev_pearson", pa.float64()),
    ]
)


def resolve_backbone(name: str) -> str:
    """A loadable directory or hub id for a backbone name (the registry when it knows it)."""
    from ctxsim.models.registry import resolve_model

    return str(resolve_model(name))


class TrainStage(Stage):
    name = "train"
    version = "2"  # 2: max_dev_pairs samples the dev set (was its first rows)
    Params = TrainParams
    inputs = ("label",)
    #: what some objectives read besides the labels (``context``: the queries, then the shard),
    #: and `pairs`, which an objective that reads no labels trains from instead of `label`
    optional_inputs = tuple(
        dict.fromkeys(["pairs", *(i for o in OBJECTIVES.values() for i in o.inputs)])
    )
    #: training is not bitwise the same across thread counts: the count is in the fingerprint
    run_fields = ("seed", "device", "torch_threads")
    #: by labelled pairs; with a fixed step budget (max_steps), by steps (see cost_model)
    cost = InputRowsPerQuery(rows_of="label", label="labelled pairs")
    model_artefact = True
    #: every objective module (found, not imported by name: models/training/objectives/__init__.py)
    sources = MODULES

    def fingerprint_extra(self, params: TrainParams) -> dict[str, Any]:
        """The model a run starts from (init_from) by content: new weights at the same path
        train a new model (nothing without it, so other runs keep their fingerprints)."""
        if params.init_from is None:
            return {}
        from ctxsim.models.encoders import encoder_identity

        return {"init_from": encoder_identity(params.init_from)}

    def inputs_for(self, params: TrainParams) -> tuple[str, ...]:
        """`label`, or `pairs` for an objective that reads no labels (its run needs no embed or
        label stage)."""
        return ("label",) if get_objective(params.objective).needs_labels else ("pairs",)

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
        if not get_objective(params.objective).needs_labels:
            return InputRowsPerQuery(rows_of="pairs", label="pairs")
        return self.cost

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        import torch

        p: TrainParams = ctx.params
        log = ctx.logger
        t0 = time.perf_counter()
        label_art, cols = self._pairs(ctx, p)
        oc = ObjectiveContext(
            p, ctx.device, ctx.run.seed, log, lambda st, c: ctx.input(st).read_table(c)
        )
        objective, pairs, examples, max_steps = objective_examples(cols, oc, str(label_art.path))

        dev = dev_set(ctx, p, cols) if objective.needs_labels or p.sts_dir else None
        torch.manual_seed(ctx.run.seed)
        backbone_path = self._backbone(ctx, p, examples.texts, dev)
        start = resolve_backbone(p.init_from) if p.init_from else backbone_path
        model = build_student(
            start,
            p.max_seq_length,
            ctx.device,
            p.dropout,
            p.freeze_embeddings,
            p.attention,
            p.freeze_layers,
            p.dropout_masks,
            p.unpad,
        )
        loss = objective.loss(model, oc, backbone_path) if objective.trains else None
        if objective.needs_dropout and not has_dropout(model):
            log.warning(
                "train: %s has no dropout: SimCSE's positives are identical (set train.dropout)",
                p.backbone,
            )

        evaluator, metric = dev_evaluator(dev, p)
        ckpt_dir = ctx.cache_dir / "checkpoints"
        bf16 = use_bf16(p, ctx.device)
        args = training_args(
            p,
            ckpt_dir,
            max_steps,
            ctx.device,
            ctx.run.seed,
            bf16,
            metric,
            examples.label_share,
            examples.part_sizes(),
        )
        trainer = None
        if objective.trains:
            trainer = make_trainer(
                model, args, examples.data, loss, evaluator, log, not ctx.run.no_progress
            )
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
    def _pairs(ctx: StageContext, p: TrainParams) -> tuple[Artefact, LabelColumns]:
        """The artefact the pairs come from and their columns: the labels, or for an objective
        that reads none the mined pairs, split as the label stage splits them."""
        if get_objective(p.objective).needs_labels:
            art = ctx.input("label")
            return art, label_columns(art.read_table(), p, str(art.path))
        art = ctx.input("pairs")
        table = art.read_table()
        queries = ctx.input("queries").read_table(["query_id", "text"])
        ids, texts = queries.column("query_id").to_pylist(), queries.column("text").to_pylist()
        text_of = dict(zip(ids, texts, strict=True))
        s1 = table.column("s1_query_id").to_numpy()
        s2 = table.column("s2_query_id").to_numpy()
        split = pair_split_names(s1, s2, ctx.run.seed, p.split_ratios, given_pairs(table))
        return art, pair_columns(s1, s2, text_of, split)

    @staticmethod
    def _backbone(ctx: StageContext, p: TrainParams, texts: list[str], dev: DevSet | None) -> str:
        """The backbone's directory: a tiny one learnt from the training (and dev) sentences, the
        same vocabulary and weights for every objective, or the registry's."""
        if p.backbone != TINY:
            return resolve_backbone(p.backbone)
        if dev is not None:
            texts = texts + dev[0] + dev[1]
        return str(build_tiny_backbone(texts, ctx.files_dir / "backbone", p, ctx.run.seed))
