"""Length-grouped batches for the objectives that read right contexts (``train.context_batches:
length``): every example once an epoch, in batches whose texts are of like length (a batch pads
to its own longest, not to the longest of a random draw), the order seeded and new each epoch;
the labels' pairs keep the library's shuffled batches."""

from __future__ import annotations

import random

import numpy as np


def _dataset(n: int = 500, seed: int = 0):
    from datasets import Dataset

    rng = random.Random(seed)
    positives = ["w " * rng.randint(5, 300) for _ in range(n)]
    anchors = ["a " * rng.randint(3, 40) for _ in range(n)]
    return Dataset.from_dict({"anchor": anchors, "positive": positives})


def _padded(batches: list[list[int]], lengths: list[int]) -> int:
    return sum(max(lengths[i] for i in b) * len(b) for b in batches)


def test_each_example_once_in_batches_of_like_length_seeded_per_epoch():
    from ctxsim.models.training.batches import LengthGroupedBatchSampler, length_batch_sampler

    data = _dataset()
    factory = length_batch_sampler(max_tokens=100)
    s = factory(data, batch_size=16, drop_last=False, seed=3)
    assert isinstance(s, LengthGroupedBatchSampler) and len(s) == -(-500 // 16)
    first = list(s)
    assert len(first) == len(s) and sorted(i for b in first for i in b) == list(range(500))
    assert sorted(len(b) for b in first)[1:] == [16] * (len(first) - 1)  # one short batch

    # padding: the positives (capped where the tokenizer cuts them) pad far less than at random
    capped = [min(len(p), 400) for p in data["positive"]]
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(500).tolist()
    at_random = [shuffled[i : i + 16] for i in range(0, 500, 16)]
    assert _padded(first, capped) < 0.8 * _padded(at_random, capped)
    # among positives cut at the cap, the anchors' lengths decide
    anchors = [len(a) for a in data["anchor"]]
    full = [b for b in first if all(capped[i] == 400 for i in b)]
    mixed = rng.permutation([i for b in full for i in b]).tolist()
    at_random = [mixed[i : i + 16] for i in range(0, len(mixed), 16)]
    assert full and _padded(full, anchors) < 0.8 * _padded(at_random, anchors)

    assert list(factory(data, batch_size=16, drop_last=False, seed=3)) == first  # seeded
    s.set_epoch(1)
    assert list(s) != first  # a new order each epoch
    assert list(factory(data, batch_size=16, drop_last=False, seed=4)) != first

    dropped = factory(data, batch_size=16, drop_last=True, seed=3)
    assert len(dropped) == 500 // 16 and all(len(b) == 16 for b in dropped)

    # a length-grouped group is cut in batches of the dataset's order: batches stay random by
    # topic (indices spread over the whole dataset)
    assert np.mean([np.ptp(b) for b in first if len(b) == 16]) > 200


def test_the_labels_pairs_keep_the_librarys_batches():
    from datasets import Dataset

    from ctxsim.models.training.batches import LengthGroupedBatchSampler, length_batch_sampler

    labels = Dataset.from_dict({"sentence1": list("abcd"), "sentence2": list("abcd")})
    other = length_batch_sampler(max_tokens=100)(labels, batch_size=2, drop_last=False)
    assert not isinstance(other, LengthGroupedBatchSampler) and len(other) == 2
    assert sorted(i for b in other for i in b) == [0, 1, 2, 3]


def test_train_context_batches_length_gives_the_trainer_the_length_sampler(tmp_path):
    from ctxsim.tasks.train.params import TrainParams
    from ctxsim.tasks.train.trainer import training_args

    p = TrainParams(context_batches="length", max_seq_length=64)
    args = training_args(p, tmp_path, 10, "cpu", 0, False, None)
    data = _dataset(100)
    sampler = args.batch_sampler(data, batch_size=8, drop_last=False, seed=0)
    assert type(sampler).__name__ == "LengthGroupedBatchSampler"
    assert max(pos for pos, _ in sampler.lengths) == 64 * 4  # cut where the tokenizer cuts


def test_the_trainers_arguments_pickle_with_every_batch_order(tmp_path):
    """The trainer saves its arguments with each checkpoint (torch.save): a sampler factory made
    as a closure failed the first checkpoint of a real run."""
    import pickle

    from ctxsim.tasks.train.params import TrainParams
    from ctxsim.tasks.train.trainer import training_args

    for batches in ("random", "document", "length"):
        p = TrainParams(context_batches=batches)
        args = training_args(p, tmp_path, 10, "cpu", 0, False, None)
        again = pickle.loads(pickle.dumps(args))
        assert again.batch_sampler == args.batch_sampler
