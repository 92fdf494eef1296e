"""What the `train` stage (tasks/train/) trains on: the label artefact's columns, the pairs every
objective starts from, and the objective's examples and step budget.

``p`` is the `train` config section (tasks/train/params.py: ``label_column``, ``train_splits``,
``max_train_pairs``, ``objective``, ``batch_size``, ``epochs``, ``max_steps``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from ctxsim.models.errors import InputError
from ctxsim.models.training.objectives import (
    ObjectiveContext,
    TrainingPairs,
    get_objective,
    steps_for,
)


class LabelColumns(NamedTuple):
    """The label artefact's columns the stage reads (``labels``: ``train.label_column``)."""

    table: pa.Table
    s1: list[str | None]
    s2: list[str | None]
    labels: np.ndarray
    split: np.ndarray


def label_columns(table: pa.Table, p: Any, source: str) -> LabelColumns:
    """The columns of ``table`` (the label artefact at ``source``); a missing one is an error
    naming it."""
    for col in ("s1", "s2", p.label_column, "split"):
        if col not in table.column_names:
            key = " (train.label_column)" if col == p.label_column else ""
            raise InputError(f"label artefact {source} has no column {col!r}{key}")
    return LabelColumns(
        table,
        table.column("s1").to_pylist(),
        table.column("s2").to_pylist(),
        np.asarray(table.column(p.label_column).to_pylist(), dtype=np.float64),
        np.asarray(table.column("split").to_pylist(), dtype=object),
    )


def pair_columns(
    s1_ids: np.ndarray, s2_ids: np.ndarray, text_of: dict[int, str], split: np.ndarray
) -> LabelColumns:
    """The columns of mined pairs without labels, for an objective that reads none
    (``needs_labels`` False): the query ids and texts the `label` stage would write, its split,
    and a label of 0 (finite, so every pair of the split trains, as every finite label does)."""
    s1 = [text_of.get(int(x)) for x in s1_ids]
    s2 = [text_of.get(int(x)) for x in s2_ids]
    table = pa.table(
        {
            "s1_id": pa.array(s1_ids, pa.int64()),
            "s2_id": pa.array(s2_ids, pa.int64()),
            "s1": pa.array(s1, pa.string()),
            "s2": pa.array(s2, pa.string()),
            "split": pa.array(split.tolist(), pa.string()),
        }
    )
    return LabelColumns(table, s1, s2, np.zeros(len(s1)), np.asarray(split, dtype=object))


def training_pairs(cols: LabelColumns, p: Any, source: str) -> TrainingPairs:
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
        raise InputError(
            f"no labelled pairs with split in {p.train_splits} in {source} (train.train_splits)"
        )
    s1 = [cols.s1[i] for i in idx]
    s2 = [cols.s2[i] for i in idx]
    return TrainingPairs(s1, s2, cols.labels[idx], idx, cols.table, source)  # type: ignore[arg-type]


def objective_examples(
    cols: LabelColumns, oc: ObjectiveContext, source: str
) -> tuple[Any, Any, Any, int]:
    """The objective ``oc.params`` names, its training pairs, its examples and its step budget:
    what the `train` stage trains on, also packed by bench/bench_student_grid.py to train
    elsewhere."""
    p = oc.params
    objective = get_objective(p.objective)
    pairs = training_pairs(cols, p, source)
    examples = objective.examples(pairs, oc)
    max_steps = p.max_steps
    if objective.pair_budget and max_steps <= 0:
        max_steps = steps_for(len(pairs), p.batch_size, p.epochs)  # the pair objectives' steps
    return objective, pairs, examples, max_steps
