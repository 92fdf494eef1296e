"""Errors the user caused (a bad path, name or file): permanent, so never retried.

The message names the file, line or config key at fault; the CLI prints it as one line (the
traceback only with ``--verbose``). Retrying cannot fix any of them, so the flow's retry policy
must leave every :class:`InputError` alone, whatever it wraps (a truncated ``.gz`` file raises an
``EOFError``/``zlib.error``, a non-gzip one an ``OSError`` subclass).

:class:`InputError` itself is defined in models/errors.py, the bottom of the package graph, so
that models/ can raise it too (models/encoders.py); import it from here.
"""

from __future__ import annotations

from ctxsim.models.errors import InputError

__all__ = ["CorruptInputError", "InputError", "UnwritableRootError"]


class CorruptInputError(InputError):
    """An input file cannot be decoded (a truncated or non-gzip ``.gz``): re-reading won't help."""


class UnwritableRootError(InputError):
    """The artefact root (or Prefect's state under it) cannot be written."""
