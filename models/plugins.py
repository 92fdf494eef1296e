"""Registries filled by their own package: each module registers what it defines on import."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


def import_modules(package: str, path: Iterable[str]) -> tuple[str, ...]:
    """Import every module of ``package`` (its ``__name__`` and ``__path__``), in name order,
    so each registers itself; their names. Objectives, contextual models and evaluators use it:
    a new one is a file in the package, listed nowhere else."""
    names = [f"{package}.{m.name}" for m in sorted(pkgutil.iter_modules(path))]
    for name in names:
        importlib.import_module(name)
    return tuple(names)
