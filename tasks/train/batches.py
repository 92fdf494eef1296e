"""The batch sampler of ``train.context_batches: document``: the context objective ordered its
examples so that each consecutive block of ``batch_size`` is one batch of few documents
(models/training/objectives/context.py::document_batch_order); the trainer must keep the blocks
and only shuffle their order. Every other dataset (the labels' pairs) is shuffled as
sentence-transformers does by default."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from sentence_transformers.base.sampler import DefaultBatchSampler
from torch.utils.data import RandomSampler

#: the context objective's columns: the dataset whose order holds its batches
CONTEXT_COLUMNS = ("anchor", "positive")


class BlockBatchSampler(DefaultBatchSampler):
    """Consecutive blocks of ``batch_size`` rows, each a batch, in a seeded order per epoch."""

    def __iter__(self) -> Iterator[list[int]]:
        n, size = len(self.sampler), self.batch_size
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        for b in torch.randperm(len(self), generator=gen).tolist():
            yield list(range(b * size, min((b + 1) * size, n)))

    def __len__(self) -> int:
        n, size = len(self.sampler), self.batch_size
        return n // size if self.drop_last else -(-n // size)


def document_batch_sampler(
    dataset: Any,
    batch_size: int,
    drop_last: bool,
    valid_label_columns: list[str] | None = None,
    generator: torch.Generator | None = None,
    seed: int = 0,
) -> DefaultBatchSampler:
    """sentence-transformers' ``batch_sampler`` factory: blocks for the context examples, the
    library's default (a random sampler) for any other dataset."""
    kwargs = {"batch_size": batch_size, "drop_last": drop_last}
    kwargs |= {"valid_label_columns": valid_label_columns, "generator": generator, "seed": seed}
    if all(c in dataset.column_names for c in CONTEXT_COLUMNS):
        return BlockBatchSampler(dataset, **kwargs)
    return DefaultBatchSampler(RandomSampler(dataset, generator=generator), **kwargs)
