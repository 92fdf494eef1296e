"""What the `train` stage selects its checkpoint with: the dev set (the label columns and the
training pairs are models/training/training_data.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ctxsim.models.training.training_data import LabelColumns
from ctxsim.store.stage import StageContext

if TYPE_CHECKING:
    from ctxsim.tasks.train.params import TrainParams

#: (first sentences, second sentences, gold, name) of the dev set that selects the checkpoint
DevSet = tuple[list[str], list[str], list[float], str]


def dev_set(ctx: StageContext, p: TrainParams, cols: LabelColumns) -> DevSet | None:
    """STSb dev from ``sts_dir`` when present, else the label artefact's dev split (None, with a
    warning, when it has fewer than three pairs: training without model selection; None without
    one when ``max_dev_pairs`` is 0, which asks for the last step)."""
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
    if p.max_dev_pairs == 0:  # asked for: the last step is the model (the adapt recipe)
        ctx.logger.info("train: max_dev_pairs 0: no checkpoint choice, the last step is the model")
        return None
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
