"""One base class for the user's errors (`InputError`) and one list of user-error types that the
CLI's one-line reporting, `ctxsim run`'s except clause and Prefect's console filter share;
anything else (a plain ValueError included) is a bug and keeps its traceback."""

from __future__ import annotations

import logging
import sys
import traceback
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


def test_the_cli_catches_what_the_list_names_and_no_plain_value_error() -> None:
    assert cli_error_types() == user_error_types()
    assert not issubclass(ValueError, cli_error_types())
    assert not issubclass(RuntimeError, cli_error_types())


@pytest.mark.parametrize("cls", [*USER_ERRORS, InputError], ids=lambda c: c.__name__)
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
    # an error the CLI does not turn into one line, a bug such as a KeyError or a plain
    # ValueError, keeps its traceback
    for bug in (KeyError("n"), ValueError("n"), RuntimeError("n")):
        kept = record(bug)
        _NoInputErrorTraceback().filter(kept)
        assert kept.exc_info is not None, bug


@pytest.mark.parametrize("cls", [ValueError, RuntimeError, KeyError], ids=lambda c: c.__name__)
def test_run_keeps_the_traceback_of_a_bug(
    cls: type, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain ValueError is a bug, not bad input: `ctxsim run` lets it out (Python prints its
    traceback) instead of one `error:` line that would send the user looking for a bad file."""

    def fails(*args: object, **kwargs: object) -> None:
        raise cls("index 3 is out of bounds")

    monkeypatch.setattr(ctxsim.flows.pipeline, "run_pipeline", fails)
    res = CliRunner().invoke(app, ["run", "--root", str(tmp_path)])
    assert type(res.exception) is cls, (res.output, res.exception)
    assert "error:" not in res.stderr
    shown = "".join(traceback.format_exception(*res.exc_info))
    assert shown.startswith("Traceback") and "in fails" in shown


@pytest.mark.parametrize(
    ("cls", "one_line"), [(InputError, True), (ValueError, False)], ids=["InputError", "bug"]
)
def test_worker_prints_one_line_for_input_and_a_traceback_for_a_bug(
    cls: type, one_line: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxsim.flows import ops

    def parse_gpus(text: object) -> None:
        raise cls("--gpus 'x': expected indices like 0,1")

    monkeypatch.setattr(ops, "parse_gpus", parse_gpus)
    res = CliRunner().invoke(app, ["worker", "--gpus", "x", "--dry-run"])
    if one_line:
        assert res.exit_code == 2 and res.exception is not None  # typer.Exit
        assert res.stderr.strip() == "error: --gpus 'x': expected indices like 0,1"
    else:
        assert type(res.exception) is ValueError and "error:" not in res.stderr
