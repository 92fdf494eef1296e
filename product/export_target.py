"""Where `ctxsim export` may write, and how it writes there without leaving half an export.

DIR must be empty, or new in a parent that takes a new directory; ``overwrite`` replaces only a
previous export (one holding :data:`EXPORT_MARKER`), never an artefact root, a directory
containing one, or the current working directory. Nothing at or below an artefact root is ever a
target, marker or not: the marker is a hint anyone can forge, and the store owns its root.
Everything is written into a sibling directory and renamed into place at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from ctxsim.store.errors import InputError

#: written into every export; ``--overwrite`` replaces only a directory that holds it
EXPORT_MARKER = ".ctxsim-export.json"


class ExportError(InputError):
    """The export cannot be written (target not empty, not writable, run incomplete)."""


# ---- the target directory ----------------------------------------------------------------------
def _contains(outer: Path, inner: Path) -> bool:
    """Whether ``inner`` is ``outer`` or lies under it (both resolved: links followed)."""
    outer, inner = outer.resolve(), inner.resolve()
    return inner == outer or outer in inner.parents


def _roots(protected: Path | list[Path] | None) -> list[Path]:
    if protected is None:
        return []
    return [protected] if isinstance(protected, Path) else list(protected)


def check_target(out: Path, overwrite: bool, protected: Path | list[Path] | None = None) -> None:
    """Fail before writing anything: DIR must be a directory that is empty, or not exist in a
    parent that does; the parent must take a new directory. Never at or below a ``protected``
    root (artefact roots: the store owns all of it). ``overwrite`` replaces only a previous
    export (it holds ``EXPORT_MARKER``), never a directory containing a protected root, or the
    current working directory or one containing it."""
    roots = _roots(protected)
    for root in roots:
        if _contains(root, out):
            raise ExportError(
                f"--out {out} is inside the artefact root {root}: the store owns everything "
                "there; export to a directory outside it"
            )
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"--out {out} is not empty; pass --overwrite to replace its contents")
        for root in roots:
            if _contains(out, root):
                raise ExportError(
                    f"--out {out} contains the artefact root {root}; --overwrite replaces only "
                    "a previous export, refused"
                )
        if _contains(out, Path.cwd()):
            raise ExportError(
                f"--out {out} is the current directory or contains it; --overwrite replaces only "
                "a previous export, refused"
            )
        if not (out / EXPORT_MARKER).is_file():
            raise ExportError(
                f"--out {out} is not a previous ctxsim export (no {EXPORT_MARKER}); --overwrite "
                "replaces only an export, refused: choose an empty or new directory"
            )
    parent = out.parent
    if not parent.is_dir():
        raise ExportError(f"--out {out}: its parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (
        out.is_dir() and not os.access(out, os.W_OK | os.X_OK)
    ):
        raise ExportError(f"--out {out}: not writable (permission denied)")


@contextlib.contextmanager
def staged_dir(
    out: Path, overwrite: bool, protected: Path | list[Path] | None = None
) -> Iterator[Path]:
    """A fresh directory beside ``out`` to write into; renamed to ``out`` on success, removed on
    failure. A replaced ``out`` is moved aside first and deleted only after the rename."""
    check_target(out, overwrite, protected)
    tmp = out.parent / f".{out.name}.export-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
    except OSError as e:
        raise ExportError(f"--out {out}: cannot create a directory in {out.parent}: {e}") from e
    try:
        yield tmp
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.replaced-{uuid.uuid4().hex[:8]}"
            os.rename(out, old)
        try:
            os.rename(tmp, out)
        except OSError:
            if old is not None:
                os.rename(old, out)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
