"""One base class for the user's errors (`InputError`) and one list of user-error types that the
CLI's one-line reporting, `ctxsim run`'s except clause and Prefect's console filter share."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ctxsim.flows.pipeline
from ctxsim.flows.cli import app
from ctxsim.flows.cli_errors import _NoInputErrorTraceback, cli_error_types, user_error_types
from ctxsim.flows.config import ConfigError
from ctxsim.product.contamination import ContaminationError
from ctxsim.product.export import ExportError
from ctxsim.readers.corpus import CorpusInputError
from ctxsim.readers.ists import IstsFormatError
from ctxsim.readers.sts import StsFormatError
from ctxsim.store.errors import InputError
from ctxsim.tasks.shard import CorpusInputError as ShardCorpusInputError

USER_ERRORS = [
    CorpusInputError,
    StsFormatError,
    IstsFormatError,
    ConfigError,
    ExportError,
    ContaminationError,
]


@pytest.mark.parametrize("cls", USER_ERRORS, ids=lambda c: c.__name__)
def test_every_user_error_is_an_input_error_and_still_a_value_error(cls: type) -> None:
    assert issubclass(cls, InputError) and issubclass(cls, ValueError)
    assert issubclass(cls, user_error_types()) and issubclass(cls, cli_error_types())
    assert ShardCorpusInputError is CorpusInputError  # tasks/shard.py re-exports the reader's


def test_the_cli_catches_what_the_list_names_and_plain_value_errors() -> None:
    assert set(user_error_types()) <= set(cli_error_types())
    assert ValueError in cli_error_types() and ValueError not in user_error_types()


@pytest.mark.parametrize("cls", [*USER_ERRORS, ValueError], ids=lambda c: c.__name__)
def test_run_prints_one_line_for_each(
    cls: type, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(*args: object, **kwargs: object) -> None:
        raise cls(f"bad input in {tmp_path / 'x.tsv'}, line 3")

    monkeypatch.setattr(ctxsim.flows.pipeline, "run_pipeline", fails)
    res = CliRunner().invoke(app, ["run", "--root", str(tmp_path)])
    assert res.exit_code == 1, (res.output, res.exception)
    err = res.stderr.strip()
    assert err == f"error: bad input in {tmp_path / 'x.tsv'}, line 3", err
    assert "Traceback" not in res.output


@pytest.mark.parametrize("cls", USER_ERRORS, ids=lambda c: c.__name__)
def test_prefects_console_leaves_out_the_traceback_of_each(cls: type) -> None:
    def record(exc: BaseException) -> logging.LogRecord:
        try:
            raise exc
        except BaseException:  # noqa: BLE001 - captured for the record
            info = sys.exc_info()
        return logging.LogRecord("prefect", logging.ERROR, __file__, 1, "failed", (), info)

    hidden = record(cls("bad input"))
    _NoInputErrorTraceback().filter(hidden)
    assert hidden.exc_info is None
    # the CLI says a ValueError in one line too (--verbose shows its traceback); an error the
    # CLI does not turn into one line, a bug such as a KeyError, keeps its traceback
    kept = record(KeyError("n"))
    _NoInputErrorTraceback().filter(kept)
    assert kept.exc_info is not None
