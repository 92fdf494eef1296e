"""Content hashes of files: ``sha256_file`` and the cached ``content_digest``.

Here, at the bottom of the package graph, so that models/encoders.py can name a model directory
by content; the artefact store imports them from here (store/artefacts.py re-exports both).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from pathlib import Path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _write_text_atomic(path: Path, text: str) -> None:
    """store/atomic.py's write, which models/ cannot import: a hidden sibling renamed over."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def content_digest(path: Path, cache_file: Path | None = None) -> str:
    """sha256 of an input file, remembered by (path, size, mtime, inode) so that unchanged
    files are hashed once. Inputs are fingerprinted by content, not by mtime: a corpus copied
    to another machine or re-extracted keeps its fingerprint, so nothing is recomputed."""
    home_cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ctxsim"
    cache_file = cache_file or Path(
        os.environ.get("CTXSIM_DIGEST_CACHE") or home_cache / "digests.json"
    )
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return str(cache[key])
    digest = sha256_file(path)
    cache[key] = digest
    try:  # best effort: a read-only home only costs re-hashing
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        _write_text_atomic(cache_file, json.dumps(cache))
    except OSError:
        pass
    return digest
