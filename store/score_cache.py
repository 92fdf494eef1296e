"""A persistent cache of generative Eq. 3 terms, shared by every run on one artefact root.

Why: the expensive part of labelling is one generator pass per (s, c, direction). Growing |Cs|
(Table 7), switching an Eq. 3 term on, or re-labelling with other pairs would otherwise rescore
everything already scored. The `score` stage's artefact stays content-addressed; this cache only
saves the generator passes behind it, so an artefact computed with a warm cache holds the same
values as one computed cold (up to float noise of batch composition, <= 1e-5).

Layout: ``ROOT/_cache/scores/<scorer id>-<fp32|bf16>/<direction>/<sha256>.parquet`` (the
folder is ``ArtefactStore.cache_dir("scores")``; the scorer id hashes templates, limits and
weight bytes: scores/loading.py ``scorer_identity``), rows ``(key: 16-byte blake2b of the window
texts, value: float32)``. Each writer adds its own file through store.atomic (a temporary
sibling renamed into place), so concurrent shards and workers never clash; a reader sees only
whole files. A file is named by the sha256 of its bytes and checked on every read: parquet
carries no checksum, and a few flipped bytes would otherwise become plausible-looking scores
inside a freshly checksummed score artefact. A file that fails the check (or does not parse, or
predates the checksums) is renamed to ``<name>.corrupt`` with a warning, and its windows are
scored again. Delete the folder to drop the cache.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ctxsim.store.artefacts import ArtefactStore, sha256_file
from ctxsim.store.atomic import write_bytes_atomic
from ctxsim.store.checked import move_aside
from ctxsim.store.stage import get_logger

KEY_BYTES = 16
_CHECKSUMMED = re.compile(r"^[0-9a-f]{64}\.parquet$")
SCHEMA = pa.schema([("key", pa.binary(KEY_BYTES)), ("value", pa.float32())])
#: files this process has hashed, by (size, mtime, ctime): a score shard reads the cache once per
#: term, and a file named by its content only changes when something rewrites it (a new ctime,
#: even when the mtime is put back)
_VERIFIED: dict[Path, tuple[int, int, int]] = {}


def window_keys(lefts: Sequence[str], sentences: Sequence[str], rights: Sequence[str]) -> list:
    """One 128-bit key per window [c<, s, c>] (unit separators keep the fields apart)."""
    return [
        hashlib.blake2b(f"{lft}\x1f{s}\x1f{r}".encode(), digest_size=KEY_BYTES).digest()
        for lft, s, r in zip(lefts, sentences, rights, strict=True)
    ]


class ScoreCache:
    """Scores of one generator (and numeric mode), per direction, keyed by window texts."""

    def __init__(self, root: Path, namespace: str):
        self.dir = ArtefactStore(root, create=False).cache_dir("scores", namespace, create=False)

    def get(self, direction: str, keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(found mask, values) for ``keys``; reads only the matching rows of each file."""
        found = np.zeros(len(keys), bool)
        values = np.full(len(keys), np.nan, np.float32)
        d = self.dir / direction
        if not keys or not d.is_dir():
            return found, values
        wanted = pa.array(keys, pa.binary(KEY_BYTES))
        hits: dict[bytes, float] = {}
        for f in sorted(d.glob("*.parquet")):
            t = self._read_checked(f)
            if t is None:
                continue
            t = t.filter(pc.is_in(t.column("key"), value_set=wanted))
            hits.update(
                zip(t.column("key").to_pylist(), t.column("value").to_pylist(), strict=True)
            )
        for i, k in enumerate(keys):
            v = hits.get(k)
            if v is not None:
                found[i], values[i] = True, v
        return found, values

    def put(self, direction: str, keys: list[bytes], values: np.ndarray) -> None:
        """Add scores as one new file (written aside, then renamed into place)."""
        if not keys:
            return
        table = pa.table(
            {"key": pa.array(keys, pa.binary(KEY_BYTES)), "value": np.asarray(values, np.float32)},
            schema=SCHEMA,
        )
        write_checksummed(self.dir / direction, table)

    @staticmethod
    def _read_checked(f: Path) -> pa.Table | None:
        return read_checksummed(f, SCHEMA, "score cache file", "its scores")


def write_checksummed(d: Path, table: pa.Table) -> Path:
    """Write ``table`` as a new Parquet file in ``d`` named by the sha256 of its bytes, through
    store.atomic (written aside, then renamed into place: concurrent writers never clash, readers
    see whole files; two writers of the same bytes write the same file)."""
    d.mkdir(parents=True, exist_ok=True)
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    data = buf.getvalue().to_pybytes()
    dest = d / f"{hashlib.sha256(data).hexdigest()}.parquet"
    write_bytes_atomic(dest, data)
    return dest


def read_checksummed(f: Path, schema: pa.Schema, what: str, recomputed: str) -> pa.Table | None:
    """The rows of a file written by :func:`write_checksummed` if its bytes match the sha256 in
    its name; otherwise move it aside to ``<name>.corrupt-<id>`` (out of the ``*.parquet`` glob),
    warn (``what`` names the cache, ``recomputed`` what is computed again), and return None."""
    try:
        st = f.stat()
        stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if not _CHECKSUMMED.match(f.name):
            problem = "no checksum in its name (written before checksums)"
        elif _VERIFIED.get(f) != stamp and sha256_file(f) != f.name.removesuffix(".parquet"):
            problem = "sha256 mismatch"
        else:
            _VERIFIED[f] = stamp
            return pq.read_table(f, schema=schema)
    except FileNotFoundError:  # moved aside by a concurrent reader
        return None
    except (OSError, pa.ArrowException) as e:
        problem = f"unreadable ({e})"
    dest = move_aside(f)
    if dest is None:
        return None
    get_logger("ctxsim.score_cache").warning(
        "%s %s: %s; moved to %s, %s will be recomputed", what, f, problem, dest, recomputed
    )
    return None
