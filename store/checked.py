"""Cache files checked at read: a sha256 written beside each one, compared before it is used.

Why: a cache outlives the artefacts it feeds (checkpoints a stage resumes from, a tokenizer it
rebuilds with, explain's input file), and its bytes are trusted on the next run: a flipped byte
would reach a freshly checksummed artefact under an old fingerprint. The score and sample caches
name each file by its sha256 (store/score_cache.py); single files and folders whose names are
fixed get a sidecar instead: ``<name>.sha256`` (a folder: the sha256 of each file in it, as JSON).

A file (or folder) that fails the check, or has no sidecar (written before the checks, or by a
writer that died between the two renames), is moved aside to ``<name>.corrupt-<id>`` with a
warning naming it, and the caller computes it again.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxsim.store.artefacts import sha256_file
from ctxsim.store.atomic import atomic_path, write_text_atomic


def sidecar(path: Path) -> Path:
    return path.with_name(f"{path.name}.sha256")


def _digest(path: Path) -> str:
    """sha256 of a file, or of a folder's files (relative name -> sha256, as sorted JSON)."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return json.dumps({str(p.relative_to(path)): sha256_file(p) for p in files}, sort_keys=True)
    return sha256_file(path)


def write_checked(path: Path, write: Callable[[Path], Any]) -> None:
    """Write a file through ``write(tmp)`` (renamed into place), then its sidecar."""
    path = Path(path)
    with atomic_path(path, suffix=path.suffix) as tmp:
        write(tmp)
        digest = sha256_file(tmp)
    write_text_atomic(sidecar(path), digest)


def seal(path: Path) -> None:
    """Write the sidecar of a file or folder written in place (``save_pretrained``)."""
    write_text_atomic(sidecar(Path(path)), _digest(Path(path)))


def move_aside(path: Path) -> Path | None:
    """Rename a file or folder that failed a check to ``<name>.corrupt-<id>`` beside it (kept for
    a look, out of every glob of good files): the one quarantine name of caches and checkpoints
    (an artefact goes to ``.corrupt-<fingerprint>-...``, store/artefacts.py). None when a
    concurrent reader moved it first."""
    dest = path.with_name(f"{path.name}.corrupt-{uuid.uuid4().hex[:8]}")
    try:
        os.replace(path, dest)
    except FileNotFoundError:
        return None
    return dest


def verified(path: Path, what: str, logger: Any) -> bool:
    """True when ``path`` exists and matches its sidecar. A mismatch, a missing sidecar or an
    unreadable file: moved aside (with its sidecar) to ``<name>.corrupt-<id>``, a warning, False.
    Absent: False, silently (nothing cached yet)."""
    path = Path(path)
    if not path.exists():
        return False
    try:
        want = sidecar(path).read_text()
    except FileNotFoundError:
        problem = "no checksum beside it (written before checksums, or cut short)"
    except OSError as e:
        problem = f"its checksum is unreadable ({e.strerror or e})"
    else:
        try:
            problem = None if _digest(path) == want else "sha256 mismatch"
        except OSError as e:
            problem = f"unreadable ({e.strerror or e})"
    if problem is None:
        return True
    set_aside(path, what, problem, logger)
    return False


def set_aside(path: Path, what: str, problem: str, logger: Any) -> None:
    """Move a cache file that cannot be used (``problem``) aside with its sidecar and warn; a
    file a concurrent reader moved first is left to it."""
    dest = move_aside(path)
    if dest is None:
        return
    if sidecar(path).exists():
        os.replace(sidecar(path), sidecar(dest))
    logger.warning("%s %s: %s; moved to %s, it will be computed again", what, path, problem, dest)


def torch_checkpoint(
    path: Path, what: str, logger: Any
) -> tuple[dict[str, Any] | None, Callable[[dict[str, Any]], None]]:
    """A training loop's resumable state at ``path``: (the state, when its seal matches; else
    None, a bad one moved aside by :func:`verified`) and the function that saves the next one
    sealed, so a crash mid-write never leaves a checkpoint that loads."""
    import torch

    state = (
        torch.load(path, map_location="cpu", weights_only=True)
        if verified(path, what, logger)
        else None
    )

    def save(new: dict[str, Any]) -> None:
        write_checked(path, lambda tmp: torch.save(new, tmp))

    return state, save
