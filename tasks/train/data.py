"""What the `train` stage learns from and selects with: the label artefact's columns, the pairs
every objective starts from, and the dev set that picks the checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa

from ctxsim.models.training.objectives import TrainingPairs
from ctxsim.store.stage import StageContext

if TYPE_CHECKING:
    from ctxsim.tasks.train.params import TrainParams

#: (first sentences, second sentences, gold, name) of the dev set that selects the checkpoint
DevSet = tuple[list[str], list[str], list[float], str]


class LabelColumns(NamedTuple):
    """The label artefact's columns the stage reads (``labels``: ``train.label_column``)."""

    table: pa.Table
    s1: list[str | None]
    s2: list[str | None]
    labels: np.ndarray
    split: np.ndarray


def label_columns(table: pa.Table, p: TrainParams, source: str) -> LabelColumns:
    """The columns of ``table`` (the label artefact at ``source``); a missing one is an error
    naming it."""
    for col in ("s1", "s2", p.label_column, "split"):
        if col not in table.column_names:
            raise ValueError(f"label artefact {source} has no column {col!r}")
    return LabelColumns(
        table,
        table.column("s1").to_pylist(),
        table.column("s2").to_pylist(),
        np.asarray(table.column(p.label_column).to_pylist(), dtype=np.float64),
        np.asarray(table.column("split").to_pylist(), dtype=object),
    )


def training_pairs(cols: LabelColumns, p: TrainParams, source: str) -> TrainingPairs:
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


def dev_set(ctx: StageContext, p: TrainParams, cols: LabelColumns) -> DevSet | None:
    """STSb dev from ``sts_dir`` when present, else the label artefact's dev split (None, with a
    warning, when it has fewer than three pairs: training without model selection)."""
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
