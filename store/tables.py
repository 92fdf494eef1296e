"""Lookups every stage does on artefact tables: the rows of sorted ids, and one shard's rows."""

from __future__ import annotations

import numpy as np


class MissingIdError(KeyError):
    """An artefact names ids its upstream artefact does not hold (a mismatched or stale input)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def rows_of(sorted_ids: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    """Row of each ``wanted`` id in ``sorted_ids`` (ascending, unique), any shape.

    Raises MissingIdError naming ``what`` (e.g. "screen: contexts.left_sent_ids names sent_ids")
    and a few absent ids, instead of silently taking a neighbour's row.
    """
    sorted_ids = np.asarray(sorted_ids)
    wanted = np.asarray(wanted, dtype=sorted_ids.dtype if sorted_ids.size else np.int64)
    if wanted.size == 0:
        return np.zeros(wanted.shape, np.int64)
    if sorted_ids.size == 0:
        raise MissingIdError(f"{what} absent upstream (it is empty), e.g. {_few(wanted)}")
    pos = np.minimum(np.searchsorted(sorted_ids, wanted), len(sorted_ids) - 1)
    bad = sorted_ids[pos] != wanted
    if bad.any():
        raise MissingIdError(f"{what} absent upstream, e.g. {_few(wanted[bad])}")
    return pos


def _few(ids: np.ndarray) -> list[int]:
    return np.unique(ids.ravel())[:3].tolist()
