"""The text chunks of a `contexts` artefact (``files/chunks.parquet``: each chunk's first sentence
and sentence count), joined from the sentences of its `shard` artefact: what `index` fits TF-IDF
on and `embed` encodes."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from ctxsim.store.artefacts import Artefact
from ctxsim.store.errors import InputError


def chunk_texts(contexts: Artefact, shard: Artefact) -> tuple[np.ndarray, list[str]]:
    """(chunk ids sorted, the text of each chunk = its sentences joined by spaces)."""
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
    texts = sents.column("text").to_pylist()
    chunk_ids = chunks.column("chunk_id").to_numpy().astype(np.int64)
    first = chunks.column("first_sent_id").to_numpy()
    n = chunks.column("n_sents").to_numpy()
    start = np.searchsorted(sent_ids, first)
    bad = (start >= len(sent_ids)) | (sent_ids[np.minimum(start, len(sent_ids) - 1)] != first)
    if len(sent_ids) == 0 or bad.any():
        raise ValueError(
            f"index: {path} names first_sent_id values absent from the shard artefact "
            f"(e.g. {first[bad][:3].tolist() if len(sent_ids) else first[:3].tolist()})"
        )
    out = [" ".join(texts[s : s + k]) for s, k in zip(start.tolist(), n.tolist(), strict=True)]
    return chunk_ids, out
