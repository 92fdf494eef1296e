"""Where `ctxsim export` (and a bench that writes a folder, like ``bench_student_grid pack``) may
write, and how it writes there without leaving half an output.

DIR must be empty, or new in a parent that takes a new directory; ``overwrite`` replaces only
what the writer wrote before (a folder holding its marker: :data:`EXPORT_MARKER` for an export),
never an artefact root, a directory containing one, or the current working directory. Nothing at
or below any ctxsim artefact root is ever a target, marker or not: the marker is a hint anyone can
forge, and the store owns its root. A root is recognised by its own markers (``runs/``,
``_cache/``, ``<stage>/<fingerprint>/_MANIFEST.json``), so a root this command was not pointed at
is protected too. Everything is written into a sibling directory and renamed into place at the
end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from ctxsim.store.artefacts import CACHE_DIR, MANIFEST
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


def _has_manifest(stage_dir: Path) -> bool:
    """Whether ``stage_dir`` looks like a store's stage folder: a published artefact
    (``<fp>/_MANIFEST.json``) or one in progress (``.partial-<fp>``)."""
    try:
        return any(stage_dir.glob(f"*/{MANIFEST}")) or any(stage_dir.glob(".partial-*"))
    except OSError:
        return False


def _root_markers(d: Path) -> bool:
    """The store's own markers right in ``d``: its run records (``runs/*.json``) or its
    caches (``_cache/``)."""
    try:
        return (d / CACHE_DIR).is_dir() or any((d / "runs").glob("*.json"))
    except OSError:
        return False


def is_artefact_root(d: Path) -> bool:
    """Whether ``d`` is a ctxsim artefact root, by the store's own markers: run records, caches,
    or a stage folder holding a manifest."""
    if not d.is_dir():
        return False
    if _root_markers(d):
        return True
    try:
        return any(_has_manifest(c) for c in d.iterdir() if c.is_dir())
    except OSError:
        return False


def root_around(path: Path) -> Path | None:
    """The artefact root that ``path`` is or lies inside (its nearest one), else None. An
    ancestor is asked only about the child on the way to ``path``, so a parent with many
    folders (``/tmp``) costs a few stats."""
    path = path.absolute()
    if is_artefact_root(path):
        return path
    child = path
    for parent in path.parents:
        if _root_markers(parent) or (child.is_dir() and _has_manifest(child)):
            return parent
        child = parent
    return None


def root_within(path: Path) -> Path | None:
    """An artefact root at or below the directory ``path`` (the first found), else None: what
    replacing ``path`` would delete. Links are not followed."""
    for dirpath, dirs, files in os.walk(path):
        d = Path(dirpath)
        if MANIFEST in files:  # <root>/<stage>/<fp>/_MANIFEST.json
            return d.parent.parent
        if CACHE_DIR in dirs or ("runs" in dirs and _root_markers(d)):
            return d
    return None


def check_target(
    out: Path,
    overwrite: bool,
    protected: Path | list[Path] | None = None,
    marker: str = EXPORT_MARKER,
    what: str = "export",
) -> None:
    """Fail before writing anything: DIR must be a directory that is empty, or not exist in a
    parent that does; the parent must take a new directory. Never at or below a ``protected``
    root or any other artefact root (recognised by its markers: the store owns all of it).
    ``overwrite`` replaces only a previous ``what`` (it holds ``marker``), never a directory
    containing an artefact root, or the current working directory or one containing it."""
    roots = _roots(protected)
    for root in roots:
        if _contains(root, out):
            raise ExportError(
                f"--out {out} is inside the artefact root {root}: the store owns everything "
                f"there; write the {what} to a directory outside it"
            )
    found = root_around(out)
    if found is not None:
        where = "is the artefact root" if found == out.absolute() else "is inside the artefact root"
        raise ExportError(
            f"--out {out} {where} {found} (it holds ctxsim runs, caches or artefacts): the store "
            f"owns everything there; write the {what} to a directory outside it"
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
                    f"a previous {what}, refused"
                )
        if _contains(out, Path.cwd()):
            raise ExportError(
                f"--out {out} is the current directory or contains it; --overwrite replaces only "
                f"a previous {what}, refused"
            )
        if not (out / marker).is_file():
            raise ExportError(
                f"--out {out} is not a previous ctxsim {what} (no {marker}); --overwrite "
                f"replaces only a {what}, refused: choose an empty or new directory"
            )
        inner = root_within(out)
        if inner is not None:
            raise ExportError(
                f"--out {out} contains the artefact root {inner} (whatever its {marker} says); "
                f"--overwrite replaces only a previous {what}, refused"
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
    out: Path,
    overwrite: bool,
    protected: Path | list[Path] | None = None,
    marker: str = EXPORT_MARKER,
    what: str = "export",
) -> Iterator[Path]:
    """A fresh directory beside ``out`` to write into; renamed to ``out`` on success, removed on
    failure. A replaced ``out`` is moved aside first and deleted only after the rename; the
    target is checked again just before (:func:`check_target`, with ``marker`` and ``what``):
    the writer must have put ``marker`` into the fresh directory itself."""
    check_target(out, overwrite, protected, marker, what)
    tmp = out.parent / f".{out.name}.{what}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
    except OSError as e:
        raise ExportError(f"--out {out}: cannot create a directory in {out.parent}: {e}") from e
    try:
        yield tmp
        check_target(out, overwrite, protected, marker, what)  # what may have changed meanwhile
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
