"""``train.label_share``: a training of the labels with another part (``ctxsim-context``,
``joint``) draws its batches from the parts in the set shares, not by their sizes: each part's
count its share of the epoch, a small part repeating its rows, the order seeded per epoch; the
key is refused where the objective has no second part, and at its default it keeps the
fingerprint."""

from __future__ import annotations

import json

import pytest

from tests.models.training.test_context_objective import train_on_context


def _sampler(sizes: tuple[int, ...], shares: tuple[float, ...], seed: int = 0):
    from datasets import Dataset
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from torch.utils.data import ConcatDataset, SequentialSampler

    from ctxsim.models.training.batches import SharedBatches

    parts = [
        Dataset.from_dict({"text": [f"{k}-{i}" for i in range(n)]}) for k, n in enumerate(sizes)
    ]
    children = [
        DefaultBatchSampler(SequentialSampler(d), batch_size=4, drop_last=False) for d in parts
    ]
    return SharedBatches(shares)(ConcatDataset(parts), batch_samplers=children, seed=seed)


def test_each_part_gets_its_share_of_the_batches_a_small_part_repeating_its_rows():
    s = _sampler((100, 20), (0.5, 0.5))  # 25 + 5 batches of 4: an epoch of 30
    assert len(s) == 30 and s.counts() == [15, 15]
    batches = list(s)
    first = [b for b in batches if b[0] < 100]
    second = [b for b in batches if b[0] >= 100]
    assert len(first) == 15 and len(second) == 15
    assert all(all(i < 100 for i in b) for b in first)  # a batch never mixes the parts
    assert all(all(100 <= i < 120 for i in b) for b in second)
    seen = [i for b in second for i in b]
    assert sorted(set(seen)) == list(range(100, 120)) and len(seen) == 60  # each row three times
    assert len({i for b in first for i in b}) == 60  # the large part: 15 of its 25 batches, once


def test_the_order_is_seeded_new_each_epoch_and_shares_round_to_the_epoch():
    s = _sampler((100, 20), (0.5, 0.5), seed=3)
    first = list(s)
    assert list(_sampler((100, 20), (0.5, 0.5), seed=3)) == first
    assert list(_sampler((100, 20), (0.5, 0.5), seed=4)) != first
    s.set_epoch(1)
    assert list(s) != first
    # largest remainders: the counts always sum to the epoch's batches
    assert _sampler((20, 8), (0.3, 0.7)).counts() == [2, 5]
    assert _sampler((100, 20), (0.1, 0.9)).counts() == [3, 27]


def test_label_share_is_refused_without_a_second_part_and_kept_out_of_the_fingerprint():
    from ctxsim.flows.config import ConfigError, load_config
    from ctxsim.tasks.train import TrainParams

    assert "label_share" not in TrainParams().model_dump()
    assert TrainParams(objective="ctxsim-context", label_share=0.25).model_dump()[
        "label_share"
    ] == pytest.approx(0.25)
    with pytest.raises(ConfigError) as e:
        load_config(None, ["train.label_share=0.25"], stages=["train"])  # ctxsim: labels alone
    assert "train.label_share" in str(e.value) and "ctxsim-context" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(
            None, ["train.objective=ctxsim-context", "train.label_share=1.0"], stages=["train"]
        )
    assert "train.label_share" in str(e.value)


def test_the_trainer_draws_the_set_shares(tmp_path):
    """The trainer gets the shares in the objective's dataset order (labels first), and a run
    trains through them."""
    from ctxsim.models.training.batches import SharedBatches
    from ctxsim.tasks.train import TrainParams
    from ctxsim.tasks.train.trainer import training_args

    p = TrainParams(objective="ctxsim-context", label_share=0.25)
    args = training_args(p, tmp_path / "ckpt", 10, "cpu", 0, False, None)
    assert args.multi_dataset_batch_sampler == SharedBatches((0.25, 0.75))
    plain = training_args(
        TrainParams(objective="ctxsim-context"), tmp_path / "c", 10, "cpu", 0, False, None
    )
    assert plain.multi_dataset_batch_sampler == "proportional"
    assert plain.optim == "adamw_torch"  # train.optimizer: the multi-tensor loop unless set
    fused = training_args(
        TrainParams(optimizer="adamw_torch_fused"), tmp_path / "f", 10, "cpu", 0, False, None
    )
    assert fused.optim == "adamw_torch_fused" and "optimizer" not in TrainParams().model_dump()

    art = train_on_context(
        tmp_path / "run",
        objective="ctxsim-context",
        label_share=0.8,
        max_steps=6,
        loss="cosent",
        optimizer="adamw_torch_fused",  # the fused kernel trains on CPU too
    )
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "ctxsim-context" and (art.files_dir / "model").is_dir()
