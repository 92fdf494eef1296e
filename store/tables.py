"""Lookups every stage does on artefact tables (the rows of sorted ids, and one shard's rows),
and a corpus-sized table built without holding it as Python objects."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


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


class ColumnBuffer:
    """A table's rows gathered as Python lists (``cols``) and moved to Arrow every
    ``flush_rows`` rows, so a stage building a corpus-sized table holds one batch of Python
    objects, not the table's. ``table()`` gives each column in one chunk, so the Parquet bytes
    are those of the rows written at once (where batches broke moves a string column's page
    breaks): a column at a time, its batches freed as it is done; a string column past 2 GB
    stays in chunks (Arrow's 32-bit offsets), as one list of rows would."""

    def __init__(self, schema: pa.Schema, flush_rows: int) -> None:
        self.schema, self.flush_rows = schema, flush_rows
        self.cols: dict[str, list] = {f.name: [] for f in schema}
        self._arrays: dict[str, list[pa.Array]] = {f.name: [] for f in schema}

    def maybe_flush(self) -> None:
        """Move the gathered rows to Arrow once there are ``flush_rows`` of them."""
        if len(self.cols[self.schema[0].name]) >= self.flush_rows:
            self._flush()

    def _flush(self) -> None:
        for f in self.schema:
            self._arrays[f.name].append(pa.array(self.cols[f.name], type=f.type))
            self.cols[f.name] = []  # in place: callers may hold ``cols``

    def table(self) -> pa.Table:
        """Every row gathered, one chunk per column (the buffer is left empty)."""
        self._flush()
        out = {}
        for f in self.schema:
            chunks = pa.chunked_array(self._arrays[f.name], type=f.type)
            self._arrays[f.name] = []
            out[f.name] = pa.table({f.name: chunks}).combine_chunks().column(0)
        return pa.table(out, schema=self.schema)
