"""``train.context_hard_negative_share``: the labels choose negatives. Of the nearest-neighbour
pairs with the lowest labels, that share has each sentence take its partner's right context as a
hard negative beside its own right context (a third part, ``hard``); a random partner, a missing
context, a pair of one text or of one context gives none; the labels keep their share of the
batches and the other parts share the rest by their sizes; the key is refused where there are no
right contexts beside the labels, and at 0 keeps the fingerprint (both checked with the swaps'
share in tests/models/training/test_context_swaps.py)."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pytest

from tests.models.training.test_context_swaps import _pairs, spied_training


def test_the_lowest_labelled_mined_pairs_give_their_partners_context_as_a_negative():
    from ctxsim.models.training.objectives.ctxsim_context import hard_negatives

    pairs = _pairs(["a", "b", "c", "d", "e"], ["w", "x", "y", "d", "f"], [0.1, 0.9, 0.2, 0.0, 0.3])
    c1, c2 = ["ca", "cb", None, "cd", "ce"], ["cw", "cx", "cy", "cd", "ce"]
    mined = np.asarray([True, True, True, True, True])
    # the lowest 60% of five: rows 3 (one text twice), 0 and 2 (no context on one side)
    got = hard_negatives(pairs, c1 + ["extra"], c2 + ["extra"], mined, 0.6)
    assert got == {"anchor": ["a", "w"], "positive": ["ca", "cw"], "negative": ["cw", "ca"]}
    # row 4's two sentences share one right context: no negative of it
    assert hard_negatives(pairs, c1, c2, mined, 1.0)["anchor"] == ["a", "w", "b", "x"]
    # a pair that was not mined (a random partner) is left out before the share is taken
    mined[0] = False
    assert hard_negatives(pairs, c1, c2, mined, 0.25)["anchor"] == []  # one of four: row 3
    assert hard_negatives(pairs, c1, c2, mined, 1.0)["anchor"] == ["b", "x"]
    assert hard_negatives(pairs, c1, c2, mined, 0.0)["anchor"] == []


def test_only_the_mined_pairs_are_read_when_the_labels_name_their_source():
    from ctxsim.models.errors import InputError
    from ctxsim.models.training.objectives import ObjectiveContext
    from ctxsim.models.training.objectives.context import PairContexts
    from ctxsim.models.training.objectives.ctxsim_context import hard_negative_examples
    from ctxsim.tasks.train import TrainParams

    params = TrainParams(objective="ctxsim-context", context_hard_negative_share=1.0)
    oc = ObjectiveContext(params, "cpu", 0, logging.getLogger("t"), lambda s, c: pa.table({}))
    pc = PairContexts(["ca", "cb"], ["cw", "cx"], [], [0, 1], [2, 3], {}, {})
    pairs = _pairs(["a", "b"], ["w", "x"], [0.1, 0.2], source=["random", "knn"])
    ex = hard_negative_examples(pairs, oc, pc)
    assert list(ex.data["anchor"]) == ["b", "x"] and list(ex.data["negative"]) == ["cx", "cb"]
    pairs = _pairs(["a", "b"], ["w", "x"], [0.1, 0.2], source=["random", "random"])
    with pytest.raises(InputError, match="context_hard_negative_share"):
        hard_negative_examples(pairs, oc, pc)


def test_the_hard_part_trains_beside_the_labels_and_the_right_contexts(tmp_path, monkeypatch):
    """The fixture's four pairs (all labels equal): only the cat and dog questions both have a
    right context, so every share gives that pair's two triplets; the labels keep 4 of 4 + 2 of
    the batches, the right contexts and the triplets share the rest by their sizes (2 and 2)."""
    info, samplers = spied_training(tmp_path, monkeypatch, context_hard_negative_share=1.0)
    assert info["n_train_examples"] == 4 + 2 + 2  # labelled pairs, own contexts, triplets
    assert samplers[0].shares == pytest.approx((4 / 6, 1 / 6, 1 / 6))
    assert info["steps"] == 4  # the three parts trained (a part without its loss would raise)


def test_the_rest_of_the_batches_goes_to_the_other_parts_by_their_sizes(tmp_path):
    from ctxsim.models.training.batches import SharedBatches
    from ctxsim.tasks.train import TrainParams
    from ctxsim.tasks.train.trainer import training_args

    p = TrainParams(objective="ctxsim-context", context_hard_negative_share=0.25)
    args = training_args(p, tmp_path / "a", 10, "cpu", 0, False, None, 0.4, (10, 30, 10))
    assert args.multi_dataset_batch_sampler.shares == pytest.approx((0.4, 0.45, 0.15))
    p = TrainParams(objective="ctxsim-context", label_share=0.7)
    args = training_args(p, tmp_path / "b", 10, "cpu", 0, False, None, None, (10, 30))
    assert args.multi_dataset_batch_sampler == SharedBatches((0.7, pytest.approx(0.3)))
