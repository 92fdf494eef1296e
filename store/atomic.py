"""Write a file so that readers see the old bytes or the new ones, never a half-written file.

Every writer under the artefact root goes through here: the bytes land in a hidden temporary
sibling, which is renamed onto the final name only once complete (``os.replace`` is atomic on
POSIX filesystems, NFS included); on any error the temporary file is removed and the old file,
if there was one, is left as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | Path, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write; it replaces ``path`` when the block ends
    without error. ``suffix`` keeps writers that append their own (``np.save``: ``.npy``) happy."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | Path, obj: Any, **dumps: Any) -> None:
    """JSON with sorted keys (stable bytes for the same object); ``dumps`` overrides the rest."""
    opts: dict[str, Any] = {"indent": 2, "sort_keys": True, "default": str, **dumps}
    write_text_atomic(path, json.dumps(obj, **opts))
