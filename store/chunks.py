"""The text chunks of a `contexts` artefact (``files/chunks.parquet``: each chunk's first sentence
and sentence count), joined from the sentences of its `shard` artefact: what `index` fits TF-IDF
on, and the context units `embed` encodes (chunks, or a context slot's two sides)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ctxsim.models.corpus.sentences import QUESTION_END
from ctxsim.store.artefacts import Artefact
from ctxsim.store.checked import verified, write_checked
from ctxsim.store.errors import InputError
from ctxsim.store.tables import rows_of

LOG = logging.getLogger("ctxsim.embed")


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
    sents = shard.read_table(["sent_id", "text"]).sort_by("sent_id")
    ids, start, n = _chunk_starts(contexts, sents.column("sent_id").to_numpy())
    return ChunkSpans(ids, start, n, sents.column("text"))


def _chunk_starts(
    contexts: Artefact, sent_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chunk ids sorted, each chunk's first row among the id-sorted ``sent_ids``, its
    sentence count)."""
    path = contexts.files_dir / "chunks.parquet"
    if not path.exists():
        raise FileNotFoundError(f"index: {path} is missing (the contexts artefact has no chunks)")
    chunks = pq.read_table(path, columns=["chunk_id", "first_sent_id", "n_sents"]).sort_by(
        "chunk_id"
    )
    if chunks.num_rows == 0:
        raise InputError(f"index: {path} has no chunks (empty corpus)")
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
    return chunk_ids, start.astype(np.int64), n


#: sentences whose words are counted per Python batch (the corpus's text is never one list)
WORD_BATCH = 65_536


class SentenceTexts:
    """The shard artefact's sentences by id, their texts read from its Parquet parts in
    batches when asked for: a process holds the corpus's sentence ids (8 bytes each), never its
    whole text column (about 6 bytes a word: 0.8 GB at 126 M words, in every embed worker)."""

    def __init__(self, shard: Artefact) -> None:
        self.parts = shard.parts
        self.fingerprint = shard.fingerprint
        ids = shard.read_table(["sent_id"]).column("sent_id").to_numpy()
        self.ids = np.sort(ids).astype(np.int64)

    def _batches(self) -> Iterator[tuple[np.ndarray, pa.Array]]:
        for path in self.parts:
            for b in pq.ParquetFile(path).iter_batches(WORD_BATCH, columns=["sent_id", "text"]):
                yield b.column(0).to_numpy().astype(np.int64), b.column(1)

    def word_counts(self, cache_dir: Path | None = None) -> np.ndarray:
        """Whitespace-separated words of every sentence, in id order (``str.split``: a unit's
        words are the sum of its sentences'). With ``cache_dir``, counted once per shard
        artefact and kept there as ``<fingerprint>.npy``, checked at read (store/checked.py: a
        bad file is moved aside and counted again): every embed shard needs the corpus's
        counts, 7 CPU-s each at 126 M words."""
        path = cache_dir / f"{self.fingerprint}.npy" if cache_dir is not None else None
        if path is not None and verified(path, "embed: word-count cache", LOG):
            return np.load(path, allow_pickle=False)
        out = np.empty(len(self.ids), dtype=np.int64)
        for ids, text in self._batches():
            out[np.searchsorted(self.ids, ids)] = [len(t.split()) for t in text.to_pylist()]
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_checked(path, lambda tmp: np.save(tmp, out))
        return out

    def questions(self) -> np.ndarray:
        """Whether each sentence (in id order) is a question (``QUESTION_END``), read in
        batches like the texts."""
        out = np.zeros(len(self.ids), dtype=bool)
        for ids, text in self._batches():
            hit = pc.match_substring_regex(text, QUESTION_END).fill_null(False)
            out[np.searchsorted(self.ids, ids)] = hit.to_numpy(zero_copy_only=False)
        return out

    def take(self, rows: np.ndarray) -> list[str]:
        """The texts of the sentences at id-sorted positions ``rows``, in that order."""
        want = np.unique(rows)
        want_ids = self.ids[want]
        texts: list[str | None] = [None] * len(want)
        for ids, text in self._batches():
            hit = np.isin(ids, want_ids, assume_unique=True)
            if hit.any():
                at = np.searchsorted(want_ids, ids[hit])
                for i, t in zip(at.tolist(), text.filter(pa.array(hit)).to_pylist(), strict=True):
                    texts[i] = t
        pos = np.searchsorted(want, rows)
        return [texts[i] for i in pos.tolist()]  # type: ignore[misc]


@dataclass(frozen=True)
class ContextUnits:
    """The corpus's context units of at least ``min_words`` words, by id, without their texts:
    unit ``j`` (kept ``j``-th) is the sentences ``rows[offsets[u] : offsets[u + 1]]``, ``u =
    keep[j]``, of the id-sorted ``sentences``, its first ``left[u]`` the c< of a window unit
    (None for chunks). A shard reads the texts of its own units only, so a shard's memory
    follows its piece of the corpus, not the whole."""

    ids: np.ndarray
    keep: np.ndarray
    offsets: np.ndarray
    rows: np.ndarray
    left: np.ndarray | None
    sentences: SentenceTexts

    def texts(self, take: np.ndarray) -> list[str]:
        """The texts of the kept units at positions ``take``, as embed encodes them."""
        units = self.keep[np.asarray(take, dtype=np.int64)]
        starts, ends = self.offsets[units], self.offsets[units + 1]
        need = [self.rows[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
        if not need:
            return []
        words = self.sentences.take(np.concatenate(need))
        out, at = [], 0
        for u, part in zip(units.tolist(), need, strict=True):
            sents, at = words[at : at + len(part)], at + len(part)
            if self.left is None:
                out.append(" ".join(sents))
            else:
                k = int(self.left[u])
                out.append(" ".join(sents[:k]) + " " + " ".join(sents[k:]))
        return out


def context_unit_index(
    contexts: Artefact,
    shard: Artefact,
    unit: str,
    min_words: int,
    word_cache: Path | None = None,
) -> ContextUnits:
    """The corpus's context units of at least ``min_words`` words, by id (texts on demand;
    the sentences' word counts kept under ``word_cache``, see ``SentenceTexts.word_counts``)."""
    sentences = SentenceTexts(shard)
    if unit == "chunk":
        ids, start, n = _chunk_starts(contexts, sentences.ids)
        left = None
        offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        rows = np.repeat(start - offsets[:-1], n) + np.arange(int(offsets[-1]))
    else:
        ids, offsets, rows, left = _window_rows(contexts, sentences.ids)
    per_sentence = sentences.word_counts(word_cache)
    total = np.concatenate([[0], np.cumsum(per_sentence[rows])])
    words = total[offsets[1:]] - total[offsets[:-1]]
    keep = np.flatnonzero(words >= min_words)
    return ContextUnits(ids[keep], keep, offsets, rows, left, sentences)


def sampled_units(n: int, max_units: int, seed: int = 0) -> np.ndarray:
    """Positions of the units to encode, in order: all ``n``, or a sample of ``max_units``
    drawn with ``seed`` (embed's is fixed: the same sample on every shard and rerun, the
    artefact being a function of its fingerprint)."""
    if max_units <= 0 or n <= max_units:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, max_units, replace=False))


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


def chunk_texts(contexts: Artefact, shard: Artefact) -> tuple[np.ndarray, list[str]]:
    """(chunk ids sorted, the text of each chunk = its sentences joined by spaces)."""
    spans = chunk_spans(contexts, shard)
    texts = spans.text.to_pylist()
    out = [
        " ".join(texts[s : s + k])
        for s, k in zip(spans.start.tolist(), spans.n.tolist(), strict=True)
    ]
    return spans.chunk_ids, out
