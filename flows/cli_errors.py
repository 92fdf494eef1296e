"""How the CLI reports errors the user caused: one line naming the file or field, non-zero exit.

The traceback is printed only with ``--verbose`` (``ctxsim --verbose run`` or ``ctxsim run
--verbose``): for a wrong path, name or file it only buries the one line that matters.
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import Iterator
from pathlib import Path

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
    """What a CLI command turns into one line: :func:`user_error_types`, nothing more. Every
    check of the user's input raises an InputError (tests/test_input_errors_scan.py holds the
    package to it), so anything else, a plain ValueError included, is a bug and keeps its
    traceback. Their tracebacks, Prefect's included, are shown only with --verbose."""
    return user_error_types()


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
    line; for every error the CLI prints as one line (:func:`user_error_types`, the list
    :func:`cli_error_types` returns) and for an
    interrupt the traceback stays in Prefect's own log store (its API handler has already
    formatted the record) and on the console with --verbose. A full disk is said once, by the
    CLI: Prefect's lines about it are left out of the console."""

    def filter(self, record: logging.LogRecord) -> bool:
        if verbose():
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if (exc is not None and disk_full(exc, ".") is not None) or any(
            s in record.getMessage() for s in _DISK_FULL
        ):
            return False
        if exc is not None and isinstance(exc, (*user_error_types(), KeyboardInterrupt)):
            record.exc_info = None
            record.exc_text = None
        return True


#: how a full disk reads in an error message (the OS's and SQLite's words)
_DISK_FULL = ("No space left on device", "database or disk is full", "Disk quota exceeded")


def hide_input_error_tracebacks() -> None:
    """Add the filter to Prefect's console handlers (call after Prefect set up its logging)."""
    import prefect  # noqa: F401 - importing prefect configures its logging

    for handler in logging.getLogger().handlers:
        if type(handler).__name__ == "PrefectConsoleHandler" and not any(
            isinstance(f, _NoInputErrorTraceback) for f in handler.filters
        ):
            handler.addFilter(_NoInputErrorTraceback())


def _mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (its nearest existing folder)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    dev = p.stat().st_dev
    while p != p.parent and p.parent.stat().st_dev == dev:
        p = p.parent
    return p


def disk_full(exc: BaseException, root: str | Path) -> str | None:
    """``no space left on <file system> (<path>)`` when ``exc`` (or what caused it) is a full
    disk: an ENOSPC or EDQUOT OSError, SQLite's "database or disk is full" (Prefect's
    database), or any error whose message holds the OS's words for it (safetensors'
    SafetensorError); None for anything else."""
    import errno

    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        path = None
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            path = Path(e.filename) if isinstance(e.filename, str) else Path(root)
        elif "database or disk is full" in str(e):
            path = Path(root) / "_prefect"
        elif any(words in str(e) for words in _DISK_FULL):
            # a library that wraps the OS error in its own class and keeps only its words:
            # safetensors' SafetensorError ("... No space left on device ...")
            path = Path(root)
        if path is not None:
            try:
                where = f"the file system at {_mount_point(path)}"
            except OSError:
                where = "the device"
            return f"no space left on {where} ({path}); free space there and rerun to resume"
        e = e.__cause__ or e.__context__
    return None


@contextlib.contextmanager
def interrupt_exits(root: str | Path, run_id: str, resume: str) -> Iterator[None]:
    """Ctrl-C in the block: one line (what is kept, the command to resume), the run recorded
    "interrupted", exit 130 at once. Finished stages and shards are durable (a resume reuses
    them, as after SIGKILL), so nothing is waited for: Prefect's crash reports against an API
    that Ctrl-C has just stopped only printed tracebacks. With --verbose Python's default
    handling (and its traceback) stays."""
    import os
    import signal
    import sys

    from ctxsim.flows.run_records import mark_ended, stages_in_order

    def on_sigint(signum: int, frame: object) -> None:
        record = mark_ended(root, run_id, "interrupted", "KeyboardInterrupt: Ctrl-C") or {}
        done = [n for n, st in stages_in_order(record) if st.get("fingerprint")]
        kept = f"the published stages {', '.join(done)} and" if done else ""
        sys.stdout.flush()
        sys.stderr.write(
            f"interrupted: run {run_id} stopped; kept under {root}: {kept} every finished "
            f"shard; resume with: {resume}\n"
        )
        sys.stderr.flush()
        os._exit(130)

    if verbose():
        yield
        return
    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
