"""Errors the user caused (a bad path, name or file): permanent, so never retried.

The message names the file, line or config key at fault; the CLI prints it as one line (the
traceback only with ``--verbose``). Retrying cannot fix any of them, so the flow's retry policy
must leave every :class:`InputError` alone, whatever it wraps (a truncated ``.gz`` file raises an
``EOFError``/``zlib.error``, a non-gzip one an ``OSError`` subclass).
"""

from __future__ import annotations


class InputError(ValueError):
    """An input the user supplied is wrong; the message names it (file, line, config key).

    The base of every such error: ConfigError, CorpusInputError, StsFormatError, IstsFormatError,
    ExportError, ContaminationError and the two below. A ValueError, so ``except ValueError``
    still catches them; flows/cli_errors.py:user_error_types is the one list the CLI uses."""


class CorruptInputError(InputError):
    """An input file cannot be decoded (a truncated or non-gzip ``.gz``): re-reading won't help."""


class UnwritableRootError(InputError):
    """The artefact root (or Prefect's state under it) cannot be written."""
