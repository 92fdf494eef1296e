"""Opening user input files so that decoding faults name the file and are not retried.

``gzip`` reports a truncated stream as ``EOFError``, a non-gzip file as ``gzip.BadGzipFile``
(an ``OSError``, which a retry policy takes for a transient I/O fault) and a corrupt stream as
``zlib.error``: all three become :class:`~ctxsim.store.errors.CorruptInputError` naming the file.
"""

from __future__ import annotations

import contextlib
import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ctxsim.store.errors import CorruptInputError

GZIP_MAGIC = b"\x1f\x8b"
GZIP_FAULTS = (EOFError, gzip.BadGzipFile, zlib.error)


def gzip_header_problem(path: Path) -> str | None:
    """Why ``path`` (named ``*.gz``) is not a gzip file, or None; reads two bytes only."""
    with open(path, "rb") as f:
        head = f.read(2)
    if not head:
        return None  # an empty file is skipped as empty, not corrupt
    if head != GZIP_MAGIC:
        return f"not a gzip file (starts with {head!r}, gzip starts with {GZIP_MAGIC!r})"
    return None


@contextlib.contextmanager
def open_input(path: Path) -> Iterator[BinaryIO]:
    """Binary reader of a corpus file, decompressing ``*.gz``; gzip faults name the file."""
    if not path.name.endswith(".gz"):
        with open(path, "rb") as f:
            yield f
        return
    try:
        with gzip.open(path, "rb") as g:
            yield g  # type: ignore[misc]
    except GZIP_FAULTS as e:
        what = "truncated (the gzip stream ends early)" if isinstance(e, EOFError) else str(e)
        raise CorruptInputError(f"{path}: corrupt gzip file: {what}") from e
