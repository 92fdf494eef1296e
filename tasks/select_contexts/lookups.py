"""Vectorised look-ups of the `select` stage: contexts by id (chunk, previous sentence, window),
sentences' word sets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ctxsim.models.corpus.selection import word_set
from ctxsim.store.tables import rows_of


class ContextIndex:
    """Vectorised look-ups into the `contexts` table by context_id."""

    def __init__(self, table: pa.Table):
        ids = table.column("context_id").to_numpy()
        order = np.argsort(ids, kind="stable")
        self.context_ids = ids[order]
        self._chunk = table.column("chunk_id").to_numpy()[order]
        self._centre = table.column("centre_sent_id").to_numpy()[order]
        left = table.column("left_sent_ids").combine_chunks()
        right = table.column("right_sent_ids").combine_chunks()
        lo = left.offsets.to_numpy()
        lv = left.values.to_numpy()
        nl = np.diff(lo)
        last = np.where(nl > 0, lv[np.maximum(lo[1:] - 1, 0)] if len(lv) else -1, -1)
        self._prev = last[order]
        # window bounds (ids are consecutive inside a section): [first left, last right]
        ro = right.offsets.to_numpy()
        rv = right.values.to_numpy()
        nr = np.diff(ro)
        first = np.where(nl > 0, lv[np.minimum(lo[:-1], max(len(lv) - 1, 0))] if len(lv) else 0, 0)
        lastr = np.where(nr > 0, rv[np.maximum(ro[1:] - 1, 0)] if len(rv) else 0, 0)
        # a generated right-only slot (tasks/gencontexts.py) has no c<: its one sentence, c>,
        # stands in for the diversity rule
        firstr = rv[np.minimum(ro[:-1], max(len(rv) - 1, 0))] if len(rv) else np.zeros_like(nr)
        self._prev = np.where((nl == 0) & (nr > 0), firstr, last)[order]
        centre = table.column("centre_sent_id").to_numpy()
        self._lo = np.where(nl > 0, first, centre)[order]
        self._hi = np.where(nr > 0, lastr, centre)[order]
        self.width = int(nl.max()) if len(nl) else 0

    def _rows(self, cids: np.ndarray) -> np.ndarray:
        return rows_of(self.context_ids, cids, "select: context_ids of the candidates")

    def prev_sent_ids(self, cids: np.ndarray) -> np.ndarray:
        """The (i-1)-th sentence of each context (last left sentence; -1 if none)."""
        return self._prev[self._rows(cids)]

    def chunk_ids(self, cids: np.ndarray) -> np.ndarray:
        return self._chunk[self._rows(cids)]

    def window_contains(self, cids: np.ndarray, sent_id: int) -> np.ndarray:
        r = self._rows(cids)
        return (self._lo[r] <= sent_id) & (sent_id <= self._hi[r])


class SentenceTexts:
    """Texts of corpus sentences by sent_id, read once per shard."""

    def __init__(self, shard_artefact: Any):
        t = (
            shard_artefact
            if isinstance(shard_artefact, pa.Table)
            else shard_artefact.read_table(["sent_id", "text"])
        )
        ids = t.column("sent_id").to_numpy()
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order]
        self.texts = t.column("text").take(pa.array(order))

    def word_sets(self, sent_ids: np.ndarray) -> list[frozenset[str]]:
        sent_ids = np.asarray(sent_ids, np.int64)
        uniq, inv = np.unique(sent_ids, return_inverse=True)
        valid = uniq >= 0
        rows = rows_of(self.ids, uniq[valid], "select: sent_ids of the contexts")
        texts = self.texts.take(pa.array(rows)).to_pylist()
        sets_u: list[frozenset[str]] = [frozenset()] * len(uniq)
        for j, text in zip(np.flatnonzero(valid), texts, strict=True):
            sets_u[j] = word_set(text)
        return [sets_u[i] for i in inv.ravel()]
