"""The batch samplers of ``train.context_batches``. ``document``: the context objective ordered
its examples so that each consecutive block of ``batch_size`` is one batch of few documents
(models/training/objectives/context.py::document_batch_order); the trainer must keep the blocks
and only shuffle their order. ``length``: the context examples in length-grouped batches (a
batch pads to its own longest text, not to the longest of a random draw). Every other dataset
(the labels' pairs) is shuffled as sentence-transformers does by default. ``train.label_share``:
a multi-dataset training's batches drawn from its parts in set shares, not by their sizes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from sentence_transformers.base.sampler import DefaultBatchSampler, MultiDatasetDefaultBatchSampler
from torch.utils.data import ConcatDataset, RandomSampler

#: the context objective's columns: the dataset whose order holds its batches
CONTEXT_COLUMNS = ("anchor", "positive")
#: characters per wordpiece token of English prose, about (a positive is cut at max_seq_length)
CHARS_PER_TOKEN = 4


class _AllRowsBatchSampler(DefaultBatchSampler):
    """Every row once an epoch, in batches of ``batch_size`` (a short last one unless
    ``drop_last``)."""

    def __len__(self) -> int:
        n, size = len(self.sampler), self.batch_size
        return n // size if self.drop_last else -(-n // size)


class BlockBatchSampler(_AllRowsBatchSampler):
    """Consecutive blocks of ``batch_size`` rows, each a batch, in a seeded order per epoch."""

    def __iter__(self) -> Iterator[list[int]]:
        n, size = len(self.sampler), self.batch_size
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        for b in torch.randperm(len(self), generator=gen).tolist():
            yield list(range(b * size, min((b + 1) * size, n)))


class LengthGroupedBatchSampler(_AllRowsBatchSampler):
    """Batches of similar length, as transformers' ``group_by_length`` groups them: each epoch a
    seeded shuffle, cut into groups of ``GROUP`` batches, each group sorted by length (longest
    first) and cut into batches, the batches then served in a seeded order. Any batch is still a
    random draw of the corpus by topic; only its texts' lengths are alike."""

    #: batches per sorted group: large enough that a group's lengths spread like the corpus's
    GROUP = 50

    def __init__(self, dataset: Any, lengths: list[tuple[int, int]], **kwargs: Any) -> None:
        super().__init__(RandomSampler(dataset), **kwargs)
        self.lengths = lengths

    def __iter__(self) -> Iterator[list[int]]:
        n, size = len(self.lengths), self.batch_size
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(n, generator=gen).tolist()
        batches: list[list[int]] = []
        for g in range(0, n, size * self.GROUP):
            group = sorted(order[g : g + size * self.GROUP], key=self.lengths.__getitem__)
            group.reverse()  # longest first: a short last batch holds the shortest texts
            batches += [group[i : i + size] for i in range(0, len(group), size)]
        if self.drop_last:
            batches = [b for b in batches if len(b) == size]
        for b in torch.randperm(len(batches), generator=gen).tolist():
            yield batches[b]


def text_lengths(dataset: Any, cap_chars: int) -> list[tuple[int, int]]:
    """(positive, anchor) lengths in characters, the positive's capped at ``cap_chars`` (the
    tokenizer truncates it there: among the capped, the anchors' lengths decide)."""
    pairs = zip(dataset["positive"], dataset["anchor"], strict=True)
    return [(min(len(p or ""), cap_chars), len(a or "")) for p, a in pairs]


@dataclass(frozen=True)
class ContextBatchSampler:
    """A sentence-transformers ``batch_sampler`` factory: for the context examples, their blocks
    (``document``: each block a batch) or length-grouped batches (``length``, the positives'
    lengths capped at ``cap_chars``); the library's default (a random sampler) for any other
    dataset. A module-level class, not a closure: the trainer pickles its arguments with each
    checkpoint."""

    kind: Literal["document", "length"]
    cap_chars: int = 0

    def __call__(
        self,
        dataset: Any,
        batch_size: int,
        drop_last: bool,
        valid_label_columns: list[str] | None = None,
        generator: torch.Generator | None = None,
        seed: int = 0,
    ) -> DefaultBatchSampler:
        kwargs = {"batch_size": batch_size, "drop_last": drop_last, "seed": seed}
        kwargs |= {"valid_label_columns": valid_label_columns, "generator": generator}
        if not all(c in dataset.column_names for c in CONTEXT_COLUMNS):
            return DefaultBatchSampler(RandomSampler(dataset, generator=generator), **kwargs)
        if self.kind == "document":
            return BlockBatchSampler(dataset, **kwargs)
        return LengthGroupedBatchSampler(dataset, text_lengths(dataset, self.cap_chars), **kwargs)


#: ``train.context_batches: document``
document_batch_sampler = ContextBatchSampler("document")


def length_batch_sampler(max_tokens: int) -> ContextBatchSampler:
    """``train.context_batches: length`` for a model that cuts texts at ``max_tokens`` (the
    positives' lengths capped there, in characters)."""
    return ContextBatchSampler("length", max_tokens * CHARS_PER_TOKEN)


class ShareBatchSampler(MultiDatasetDefaultBatchSampler):
    """A multi-dataset epoch of as many batches as the parts hold together, each part's count
    its share of them (largest remainders), in a seeded order per epoch; a part that runs out
    starts over (its own sampler reshuffles), so a small part with a large share repeats rows."""

    def __init__(self, dataset: ConcatDataset, shares: tuple[float, ...], **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        if len(shares) != len(self.batch_samplers):
            raise ValueError(f"{len(shares)} shares for {len(self.batch_samplers)} datasets")
        self.shares = shares

    def __len__(self) -> int:
        return sum(len(s) for s in self.batch_samplers)

    def counts(self) -> list[int]:
        """Batches per part in one epoch: its share of ``len(self)``, rounded so they sum to it."""
        total, weight = len(self), sum(self.shares)
        exact = [total * s / weight for s in self.shares]
        counts = [int(e) for e in exact]
        by_remainder = sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])
        for i in by_remainder[: total - sum(counts)]:
            counts[i] += 1
        return counts

    def __iter__(self) -> Iterator[list[int]]:
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        order = [i for i, n in enumerate(self.counts()) for _ in range(n)]
        offsets = [0, *self.dataset.cumulative_sizes[:-1]]  # each part's first row
        iters = [iter(s) for s in self.batch_samplers]
        for k in torch.randperm(len(order), generator=gen).tolist():
            part = order[k]
            batch = next(iters[part], None)
            if batch is None:  # this part is used up: it starts over
                iters[part] = iter(self.batch_samplers[part])
                batch = next(iters[part])
            yield [idx + offsets[part] for idx in batch]


@dataclass(frozen=True)
class SharedBatches:
    """The trainer's ``multi_dataset_batch_sampler`` for ``train.label_share``: the parts' shares
    in the order of the objective's datasets (a module-level class: checkpoints pickle it)."""

    shares: tuple[float, ...]

    def __call__(
        self,
        dataset: ConcatDataset,
        batch_samplers: list[Any],
        generator: torch.Generator | None = None,
        seed: int | None = 0,
    ) -> ShareBatchSampler:
        return ShareBatchSampler(
            dataset, self.shares, batch_samplers=batch_samplers, generator=generator, seed=seed or 0
        )
