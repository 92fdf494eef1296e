"""The base of every error the user caused (a bad path, name, file or setting).

It lives here, at the bottom of the package graph, so that models/ (e.g. the sentence-encoder
library, models/encoders.py) can refuse a bad setting with it; every other package imports it as
``ctxsim.store.errors.InputError`` (store/errors.py re-exports it, with its subclasses).
"""

from __future__ import annotations


class InputError(ValueError):
    """An input the user supplied is wrong; the message names it (file, line, config key).

    The base of every such error: ConfigError, CorpusInputError, StsFormatError, IstsFormatError,
    ExportError, ContaminationError, EncoderInputError and those of store/errors.py. A
    ValueError, so ``except ValueError`` still catches them; flows/cli_errors.py:user_error_types
    is the one list the CLI uses."""
