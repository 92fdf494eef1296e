"""The `gencontexts` stage's cache of LM-sampled texts, beside the score cache (score_cache.py):
``ROOT/_cache/gencontexts/<model>/``, checksummed parquet files, one per writer."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.score_cache import read_checksummed, write_checksummed


class SampleCache:
    """Sampled texts of one model, keyed by (template, settings, prompt sentence, seed); one
    parquet file per writer, named by its sha256 and checked on every read (as
    store/score_cache.py): a file that fails the check, or predates the checksums, is moved
    aside to ``<name>.corrupt-<id>`` with a warning and its samples are drawn again."""

    SCHEMA = pa.schema([("key", pa.binary(16)), ("text", pa.string())])

    def __init__(self, root: Path, model: str):
        name = hashlib.blake2b(model.encode(), digest_size=8).hexdigest()
        self.dir = ArtefactStore(root, create=False).cache_dir("gencontexts", name, create=False)

    @staticmethod
    def key(template: str, settings: str, sentence: str, seed: int) -> bytes:
        blob = f"{template}\x1f{settings}\x1f{sentence}\x1f{seed}".encode()
        return hashlib.blake2b(blob, digest_size=16).digest()

    def get(self, keys: list[bytes]) -> dict[bytes, str]:
        if not keys or not self.dir.is_dir():
            return {}
        wanted = pa.array(keys, pa.binary(16))
        hits: dict[bytes, str] = {}
        for f in sorted(self.dir.glob("*.parquet")):
            t = read_checksummed(f, self.SCHEMA, "gencontexts sample cache file", "its samples")
            if t is None:
                continue
            t = t.filter(pc.is_in(t.column("key"), value_set=wanted))
            hits.update(zip(t.column("key").to_pylist(), t.column("text").to_pylist(), strict=True))
        return hits

    def put(self, keys: list[bytes], texts: list[str]) -> None:
        if not keys:
            return
        table = pa.table({"key": pa.array(keys, pa.binary(16)), "text": texts}, schema=self.SCHEMA)
        write_checksummed(self.dir, table)
