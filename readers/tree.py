"""Files under a folder, linked folders included: dev sets and corpora are often symlinks into a
shared store, which ``Path.rglob`` (Python before 3.13) does not enter, so a linked dev folder
read as "no task file under it"."""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from pathlib import Path


def files_under(root: str | Path, pattern: str = "*") -> list[Path]:
    """The files below ``root`` whose name matches ``pattern`` (case-sensitive, as ``rglob``),
    sorted; symlinked folders are entered, each real folder once (a link cycle ends there)."""
    seen: set[str] = set()
    found: list[Path] = []
    for folder, subfolders, names in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders[:] = []
            continue
        seen.add(real)
        matched = (Path(folder, name) for name in names if fnmatchcase(name, pattern))
        found.extend(p for p in matched if p.is_file())
    return sorted(found)
