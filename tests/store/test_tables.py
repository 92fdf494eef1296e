"""store/tables.py's ColumnBuffer: a table built in Arrow batches, written as if at once."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ctxsim.store.tables import ColumnBuffer

SCHEMA = pa.schema([("id", pa.int64()), ("text", pa.string())])


def _parquet(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


def test_batches_come_back_as_one_chunk_with_the_bytes_of_one_write() -> None:
    """Over 1 MB of distinct strings, where a column left in batches moves its page breaks."""
    rng = np.random.default_rng(0)
    vocab = ["".join(rng.choice(list("abcdefghij"), 6)) for _ in range(3000)]
    texts = [" ".join(rng.choice(vocab, 8)) for _ in range(20_000)]
    buf = ColumnBuffer(SCHEMA, flush_rows=1000)
    cols = buf.cols
    flushed = 0
    for i, t in enumerate(texts):
        cols["id"].append(i)
        cols["text"].append(t)
        buf.maybe_flush()
        flushed += not cols["id"]  # emptied in place: the caller's alias sees it
    table = buf.table()
    assert flushed == 20 and buf.cols["id"] == []
    assert all(table.column(c).num_chunks == 1 for c in ("id", "text"))
    whole = pa.table({"id": list(range(20_000)), "text": texts}, schema=SCHEMA)
    assert table.equals(whole) and _parquet(table) == _parquet(whole)
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=1000))
    assert _parquet(chunked) != _parquet(whole)  # why the buffer joins its batches


def test_an_empty_buffer_gives_an_empty_table_of_its_schema() -> None:
    table = ColumnBuffer(SCHEMA, flush_rows=10).table()
    assert table.num_rows == 0 and table.schema == SCHEMA
