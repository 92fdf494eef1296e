"""The shape of a training objective and the registry the config, the `train` stage, the benches
and the docs read (in the spirit of sentence-transformers' ``losses/``: one class, one file).

An objective says what it needs (the Eq. 4 labels, optional stage inputs such as the corpus),
turns the labelled pairs of a run into its training examples and builds its loss. The `train`
stage owns what every objective shares: the pairs, the backbone, the trainer, the dev set.
Adding one: a file in this package with a ``TrainObjective`` subclass decorated with
``@register``, imported in ``__init__.py``, and its test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa

LossName = Literal["cosine", "cosent", "angle", "clrcmd", "margin"]

#: SimCSE's temperature 0.05 as sentence-transformers' similarity scale (Gao et al. 2021, Sec. 3)
SIMCSE_SCALE = 20.0


@dataclass
class TrainingPairs:
    """The labelled pairs a run trains from: those of ``train.train_splits`` with a finite label
    and both sentences, capped at ``max_train_pairs``."""

    s1: list[str]
    s2: list[str]
    labels: np.ndarray  # the label column (``train.label_column``) of these pairs
    rows: np.ndarray  # their rows in ``table``
    table: pa.Table  # the label artefact's table
    source: str  # where the labels come from (the label artefact's path), for messages

    def __len__(self) -> int:
        return len(self.s1)


@dataclass
class ObjectiveContext:
    """What an objective may use besides the pairs: the train settings, the device and seed, the
    stage's logger, and the optional inputs it declared (``read_input(stage, columns)``)."""

    params: Any  # TrainParams
    device: str
    seed: int
    log: Any
    read_input: Callable[[str, list[str]], pa.Table]


@dataclass
class Examples:
    """An objective's training data: a ``datasets.Dataset`` (or a ``DatasetDict`` for
    multi-dataset training), the sentences the tiny backbone learns its vocabulary from, the
    CPU-seconds the objective spent labelling (0 for labels it was given or needs none), and the
    labels' share of the batches it asks for when ``train.label_share`` is unset (None: the
    parts' sizes decide)."""

    data: Any
    texts: list[str]
    label_cpu_seconds: float = 0.0
    label_share: float | None = None

    def __len__(self) -> int:
        return sum(self.part_sizes())

    def part_sizes(self) -> tuple[int, ...]:
        """Each dataset's rows, in the trainer's order (one entry for a single dataset)."""
        if isinstance(self.data, dict):
            return tuple(len(d) for d in self.data.values())
        return (len(self.data),)


class TrainObjective:
    """One training objective: a name, what it needs, its examples and its loss."""

    name: ClassVar[str]
    #: trains on the label stage's Eq. 4 labels (its labels cost the labelling stages' CPU)
    eq4_labels: ClassVar[bool] = False
    #: labels the pairs itself (its CPU is recorded as ``label_cpu_seconds``)
    computes_labels: ClassVar[bool] = False
    #: rows are (sentence1, sentence2, score): ``train.loss`` and ``train.label_scale`` apply
    labelled: ClassVar[bool] = False
    #: stage inputs it reads beyond `label` (they enter the fingerprint only for it)
    inputs: ClassVar[tuple[str, ...]] = ()
    #: False: it reads the pairs' sentences, never their labels, so `train` reads the `pairs`
    #: artefact (the label stage's train split, recomputed) and its run needs no embed or label
    needs_labels: ClassVar[bool] = True
    #: with ``max_steps <= 0``: the steps one epoch over the *pairs* takes (a fair budget for
    #: objectives whose examples outnumber the pairs)
    pair_budget: ClassVar[bool] = False
    #: its positives differ only by dropout: a backbone without dropout gets a warning
    needs_dropout: ClassVar[bool] = False
    #: False: no training at all (the backbone is the model)
    trains: ClassVar[bool] = True
    #: objectives trained together, one dataset each, in the order the trainer sees them (a
    #: multi-dataset training: ``train.label_share`` sets the labels' share of its batches)
    parts: ClassVar[tuple[str, ...]] = ()

    def examples(self, pairs: TrainingPairs, oc: ObjectiveContext) -> Examples:
        raise NotImplementedError

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        raise NotImplementedError


#: objective name -> its instance, in registration order
OBJECTIVES: dict[str, TrainObjective] = {}


def register(cls: type[TrainObjective]) -> type[TrainObjective]:
    """Class decorator: make an objective known to ``train.objective``."""
    if cls.name in OBJECTIVES and type(OBJECTIVES[cls.name]) is not cls:
        raise ValueError(f"objective {cls.name!r} is registered twice")
    OBJECTIVES[cls.name] = cls()
    return cls


def get_objective(name: str) -> TrainObjective:
    """The registered objective ``name``; a ValueError naming the known ones otherwise."""
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown objective {name!r}: one of {', '.join(OBJECTIVES)}") from None


def dataset(columns: dict[str, list[Any]]) -> Any:
    from datasets import Dataset

    return Dataset.from_dict(columns)


def labelled_columns(s1: list[str], s2: list[str], targets: np.ndarray) -> dict[str, list[Any]]:
    """(sentence1, sentence2, score) columns: one target per pair."""
    if targets is None or len(targets) != len(s1):
        raise ValueError("labelled objectives need one target per pair")
    return {
        "sentence1": list(s1),
        "sentence2": list(s2),
        "score": np.asarray(targets, dtype=np.float32).tolist(),
    }


def margin_columns(pairs: TrainingPairs, targets: np.ndarray, seed: int) -> dict[str, list[Any]]:
    """(query, higher, lower, score) rows of ``train.loss: margin``, as many as pairs
    (margins.py: one query's partners ranked by their labels)."""
    from ctxsim.models.training.objectives.margins import query_margin_rows

    ids = []
    for col in ("s1_id", "s2_id"):
        if col not in pairs.table.column_names:
            raise ValueError(f"train.loss margin: pairs {pairs.source} have no column {col!r}")
        ids.append(pairs.table.column(col).take(pa.array(pairs.rows)).to_pylist())
    return query_margin_rows(ids[0], ids[1], pairs.s1, pairs.s2, targets, len(pairs), seed)


def pair_loss(loss: str, model: Any, params: Any) -> Any:
    """The sentence-transformers regression/ranking loss ``train.loss`` names (``clrcmd``: with
    the ``clrcmd_*`` settings of ``params``)."""
    from sentence_transformers import losses

    if loss == "cosine":
        return losses.CosineSimilarityLoss(model)
    if loss == "cosent":
        return losses.CoSENTLoss(model)
    if loss == "angle":
        return losses.AnglELoss(model)
    if loss == "margin":  # rows from margins.query_margin_rows
        from sentence_transformers.util import pairwise_cos_sim

        return losses.MarginMSELoss(model, similarity_fct=pairwise_cos_sim)
    if loss == "clrcmd":
        from ctxsim.models.training.losses.clrcmd_loss import CLRCMDLoss

        return CLRCMDLoss(
            model,
            temperature=params.clrcmd_temperature,
            positive_threshold=params.clrcmd_positive_threshold,
            sparse=params.clrcmd_sparse,
            chunk_size=params.clrcmd_chunk_size,
        )
    raise ValueError(f"unknown loss {loss!r}")


def ranking_loss(model: Any, candidates_gradient: bool = True) -> Any:
    """MultipleNegativesRankingLoss at SimCSE's scale: the other examples of a batch are the
    negatives. Without ``candidates_gradient`` the candidates are encoded with no gradient
    (models/training/losses/anchor_gradient_loss.py)."""
    if candidates_gradient:
        from sentence_transformers import losses

        return losses.MultipleNegativesRankingLoss(model, scale=SIMCSE_SCALE)
    from ctxsim.models.training.losses.anchor_gradient_loss import AnchorGradientRankingLoss

    return AnchorGradientRankingLoss(model, scale=SIMCSE_SCALE)


class LabelledObjective(TrainObjective):
    """(sentence1, sentence2, score) rows from the pairs: the score is ``raw_labels`` rescaled by
    ``train.label_scale``; the loss is ``train.loss``."""

    labelled = True

    def raw_labels(self, pairs: TrainingPairs, oc: ObjectiveContext) -> np.ndarray:
        return pairs.labels

    def examples(self, pairs: TrainingPairs, oc: ObjectiveContext) -> Examples:
        from ctxsim.models.contextual.origin import rescale_labels

        cpu0 = time.process_time()
        targets = rescale_labels(self.raw_labels(pairs, oc), oc.params.label_scale)
        cpu = time.process_time() - cpu0 if self.computes_labels else 0.0
        if oc.params.loss == "margin":
            columns = margin_columns(pairs, targets, oc.seed)
        else:
            columns = labelled_columns(pairs.s1, pairs.s2, targets)
        return Examples(dataset(columns), pairs.s1 + pairs.s2, cpu)

    def loss(self, model: Any, oc: ObjectiveContext, backbone_path: str) -> Any:
        return pair_loss(oc.params.loss, model, oc.params)


def sentence_pool(s1: list[str], s2: list[str]) -> list[str]:
    """The distinct sentences of the pairs, in first-seen order (deterministic): SimCSE's and
    TSDAE's data. Distinct, because a duplicate in a batch would be a false negative for MNRL."""
    seen: dict[str, None] = {}
    for a, b in zip(s1, s2, strict=True):
        seen.setdefault(a, None)
        seen.setdefault(b, None)
    return list(seen)


def has_dropout(model: Any) -> bool:
    """Whether training-mode forward passes are noisy: SimCSE's two views of a sentence differ
    only by dropout, so without it (Gemma-3 ships with dropout 0) its positives are identical."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) and m.p > 0:
            return True
        cfg = getattr(m, "config", None)
        if cfg is not None and float(getattr(cfg, "attention_dropout", 0.0) or 0.0) > 0:
            return True
    return False


def steps_for(n_examples: int, batch_size: int, epochs: float) -> int:
    """Optimizer steps of ``epochs`` passes over ``n_examples`` (the trainer's count, drop_last
    off): the budget every objective gets when ``max_steps`` is not set."""
    return max(1, int(np.ceil(np.ceil(n_examples / batch_size) * epochs)))
