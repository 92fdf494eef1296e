"""How the CLI reports errors the user caused: one line naming the file or field, non-zero exit.

The traceback is printed only with ``--verbose`` (``ctxsim --verbose run`` or ``ctxsim run
--verbose``): for a wrong path, name or file it only buries the one line that matters.
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import Iterator

import typer

_state = {"verbose": False}


def set_verbose(on: bool, reset: bool = False) -> None:
    """``reset``: the top-level option, seen first on every invocation; a command's own
    ``--verbose`` can only switch it on."""
    from ctxsim.flows.console import configure_output

    if reset or on:
        _state["verbose"] = on
        configure_output(on)


def verbose() -> bool:
    return _state["verbose"]


def user_error_types() -> tuple[type[BaseException], ...]:
    """The one list of errors the user caused, whose message already says what to fix (a file,
    line, config key or name): every :class:`~ctxsim.store.errors.InputError` (ConfigError,
    CorpusInputError, StsFormatError, IstsFormatError, ExportError, corrupt inputs, unwritable
    roots, ...), a model that is not available, a store error (a missing run or artefact) and a
    missing file or folder. The CLI prints them as one line; Prefect's console leaves out their
    traceback (:func:`hide_input_error_tracebacks`)."""
    from ctxsim.models.registry import ModelNotAvailableError
    from ctxsim.store.artefacts import StoreError
    from ctxsim.store.errors import InputError

    return (InputError, ModelNotAvailableError, StoreError, FileNotFoundError, NotADirectoryError)


def cli_error_types() -> tuple[type[BaseException], ...]:
    """What a CLI command turns into one line: :func:`user_error_types` and any other
    ValueError (an option or argument check raises a plain one; Prefect's console keeps the
    traceback of those, which may be a bug inside a stage)."""
    return (*user_error_types(), ValueError)


def fail(exc: BaseException | str, code: int = 1) -> None:
    """Print ``error: <message>`` (after the traceback with --verbose) and exit with ``code``."""
    if isinstance(exc, BaseException) and verbose():
        traceback.print_exception(exc)
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors(code: int = 1) -> Iterator[None]:
    """Turn the user's errors raised in the block into :func:`fail`; anything else (a bug)
    keeps its traceback."""
    try:
        yield
    except cli_error_types() as e:
        fail(e, code)


class _NoInputErrorTraceback(logging.Filter):
    """Console only: Prefect logs a failed flow's traceback (~90 lines) before the CLI's one
    line; for the user's input errors the traceback stays in Prefect's own log store (its
    API handler has already formatted the record) and on the console with --verbose."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and not verbose() and isinstance(exc, user_error_types()):
            record.exc_info = None
            record.exc_text = None
        return True


def hide_input_error_tracebacks() -> None:
    """Add the filter to Prefect's console handlers (call after Prefect set up its logging)."""
    import prefect  # noqa: F401 - importing prefect configures its logging

    for handler in logging.getLogger().handlers:
        if type(handler).__name__ == "PrefectConsoleHandler" and not any(
            isinstance(f, _NoInputErrorTraceback) for f in handler.filters
        ):
            handler.addFilter(_NoInputErrorTraceback())
