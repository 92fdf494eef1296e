"""The text chunks of a `contexts` artefact (``files/chunks.parquet``: each chunk's first sentence
and sentence count), joined from the sentences of its `shard` artefact: what `index` fits TF-IDF
on, and the context units `embed` encodes (chunks, or a context slot's two sides)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ctxsim.store.artefacts import Artefact
from ctxsim.store.errors import InputError
from ctxsim.store.tables import rows_of


@dataclass(frozen=True)
class ChunkSpans:
    """Chunk ``i`` is the sentences ``text[start[i] : start[i] + n[i]]`` of the shard artefact's
    sentences sorted by id; the text stays an Arrow column (no Python string per sentence)."""

    chunk_ids: np.ndarray
    start: np.ndarray
    n: np.ndarray
    text: pa.ChunkedArray


def chunk_spans(contexts: Artefact, shard: Artefact) -> ChunkSpans:
    """Where each chunk (by id, sorted) lies among the id-sorted sentences."""
    path = contexts.files_dir / "chunks.parquet"
    if not path.exists():
        raise FileNotFoundError(f"index: {path} is missing (the contexts artefact has no chunks)")
    chunks = pq.read_table(path, columns=["chunk_id", "first_sent_id", "n_sents"]).sort_by(
        "chunk_id"
    )
    if chunks.num_rows == 0:
        raise InputError(f"index: {path} has no chunks (empty corpus)")
    sents = shard.read_table(["sent_id", "text"]).sort_by("sent_id")
    sent_ids = sents.column("sent_id").to_numpy()
    chunk_ids = chunks.column("chunk_id").to_numpy().astype(np.int64)
    first = chunks.column("first_sent_id").to_numpy()
    n = chunks.column("n_sents").to_numpy().astype(np.int64)
    start = np.searchsorted(sent_ids, first)
    bad = (start >= len(sent_ids)) | (sent_ids[np.minimum(start, len(sent_ids) - 1)] != first)
    if len(sent_ids) == 0 or bad.any():
        raise ValueError(
            f"index: {path} names first_sent_id values absent from the shard artefact "
            f"(e.g. {first[bad][:3].tolist() if len(sent_ids) else first[:3].tolist()})"
        )
    return ChunkSpans(chunk_ids, start.astype(np.int64), n, sents.column("text"))


#: sentences whose words are counted per Python batch (the corpus's text is never one list)
WORD_BATCH = 65_536


def word_counts(text: pa.ChunkedArray) -> np.ndarray:
    """Whitespace-separated words of each sentence (``str.split``: a unit's words are the sum
    of its sentences'), read in batches."""
    out = np.empty(len(text), dtype=np.int64)
    for lo in range(0, len(text), WORD_BATCH):
        batch = text.slice(lo, WORD_BATCH).to_pylist()
        out[lo : lo + len(batch)] = [len(t.split()) for t in batch]
    return out


@dataclass(frozen=True)
class ContextUnits:
    """The corpus's context units of at least ``min_words`` words, by id, without their texts:
    unit ``j`` (kept ``j``-th) is the sentences ``rows[offsets[u] : offsets[u + 1]]``, ``u =
    keep[j]``, of the shard's id-sorted ``text`` column, its first ``left[u]`` the c< of a window
    unit (None for chunks). A shard builds the texts of its own units only, so a shard's memory
    follows its piece of the corpus, not the whole."""

    ids: np.ndarray
    keep: np.ndarray
    offsets: np.ndarray
    rows: np.ndarray
    left: np.ndarray | None
    text: pa.ChunkedArray

    def texts(self, take: np.ndarray) -> list[str]:
        """The texts of the kept units at positions ``take``, as embed encodes them."""
        units = self.keep[np.asarray(take, dtype=np.int64)]
        starts, ends = self.offsets[units], self.offsets[units + 1]
        need = [self.rows[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
        if not need:
            return []
        words = self.text.take(pa.array(np.concatenate(need))).to_pylist()
        out, at = [], 0
        for u, part in zip(units.tolist(), need, strict=True):
            sents, at = words[at : at + len(part)], at + len(part)
            if self.left is None:
                out.append(" ".join(sents))
            else:
                k = int(self.left[u])
                out.append(" ".join(sents[:k]) + " " + " ".join(sents[k:]))
        return out


def _window_rows(
    contexts: Artefact, sent_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(context ids, offsets, sentence rows, c< lengths) of every context slot's c< + c>."""
    rows = contexts.read_table(["context_id", "left_sent_ids", "right_sent_ids"]).sort_by(
        "context_id"
    )
    ids = rows.column("context_id").to_numpy().astype(np.int64)
    sides = []
    for col in ("left_sent_ids", "right_sent_ids"):
        arr = rows.column(col).combine_chunks()
        sides.append((arr.flatten().to_numpy(), np.diff(arr.offsets.to_numpy())))
    (lflat, nl), (rflat, nr) = sides
    offsets = np.concatenate([[0], np.cumsum(nl + nr)]).astype(np.int64)
    joined = np.empty(int(offsets[-1]), dtype=np.int64)
    within_l = np.arange(len(lflat)) - np.repeat(np.cumsum(nl) - nl, nl)
    within_r = np.arange(len(rflat)) - np.repeat(np.cumsum(nr) - nr, nr)
    joined[np.repeat(offsets[:-1], nl) + within_l] = lflat
    joined[np.repeat(offsets[:-1] + nl, nr) + within_r] = rflat
    at = rows_of(sent_ids, joined, "embed: contexts' window sent_ids")
    return ids, offsets, at.astype(np.int64), nl.astype(np.int64)


def context_unit_index(
    contexts: Artefact, shard: Artefact, unit: str, min_words: int
) -> ContextUnits:
    """The corpus's context units of at least ``min_words`` words, by id (texts on demand)."""
    if unit == "chunk":
        spans = chunk_spans(contexts, shard)
        ids, text, left = spans.chunk_ids, spans.text, None
        offsets = np.concatenate([[0], np.cumsum(spans.n)]).astype(np.int64)
        rows = np.repeat(spans.start - offsets[:-1], spans.n) + np.arange(int(offsets[-1]))
    else:
        sents = shard.read_table(["sent_id", "text"]).sort_by("sent_id")
        text = sents.column("text")
        ids, offsets, rows, left = _window_rows(contexts, sents.column("sent_id").to_numpy())
    per_sentence = word_counts(text)
    total = np.concatenate([[0], np.cumsum(per_sentence[rows])])
    words = total[offsets[1:]] - total[offsets[:-1]]
    keep = np.flatnonzero(words >= min_words)
    return ContextUnits(ids[keep], keep, offsets, rows, left, text)


def chunk_texts(contexts: Artefact, shard: Artefact) -> tuple[np.ndarray, list[str]]:
    """(chunk ids sorted, the text of each chunk = its sentences joined by spaces)."""
    spans = chunk_spans(contexts, shard)
    texts = spans.text.to_pylist()
    out = [
        " ".join(texts[s : s + k])
        for s, k in zip(spans.start.tolist(), spans.n.tolist(), strict=True)
    ]
    return spans.chunk_ids, out
