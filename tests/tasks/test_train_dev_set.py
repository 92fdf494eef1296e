"""The train stage's dev set: the label split's dev pairs select the checkpoint; none left is a
warning, none asked for (`max_dev_pairs: 0`, the adapt recipe) is not."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np

from ctxsim.models.training.training_data import LabelColumns
from ctxsim.tasks.train.data import dev_set
from ctxsim.tasks.train.params import TrainParams


def _cols(splits: list[str]) -> LabelColumns:
    n = len(splits)
    s1, s2 = [f"a {i}" for i in range(n)], [f"b {i}" for i in range(n)]
    labels = np.linspace(0.0, 1.0, n)
    return LabelColumns(None, s1, s2, labels, np.asarray(splits))  # type: ignore[arg-type]


def _ctx(caplog) -> SimpleNamespace:
    caplog.set_level(logging.INFO, logger="dev-set-test")
    return SimpleNamespace(logger=logging.getLogger("dev-set-test"), run=SimpleNamespace(seed=0))


def test_the_label_splits_dev_pairs_select_and_max_dev_pairs_caps_them(caplog) -> None:
    cols = _cols(["train"] * 4 + ["dev"] * 5)
    s1, s2, gold, name = dev_set(_ctx(caplog), TrainParams(max_dev_pairs=4), cols)
    assert name == "label.dev" and s1 == ["a 4", "a 5", "a 6", "a 7"] and len(gold) == 4
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_too_few_dev_pairs_warn_and_none_asked_for_only_informs(caplog) -> None:
    ctx = _ctx(caplog)
    assert dev_set(ctx, TrainParams(), _cols(["train"] * 6 + ["dev"] * 2)) is None
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    caplog.clear()
    assert dev_set(ctx, TrainParams(max_dev_pairs=0), _cols(["train"] * 4 + ["dev"] * 5)) is None
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "the last step is the model" in caplog.text
