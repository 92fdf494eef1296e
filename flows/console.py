"""What a user sees in the terminal: one line per stage by default, everything with --verbose.

Quiet is the default because a first run otherwise prints transformers' load reports and weight
bars for every model it loads, the trainer's raw log dicts and Prefect's per-task state lines.
Quiet changes only the terminal: Prefect's API (and so the UI) still receives every log line, the
stages' own progress bars stay, and warnings and errors are always shown. The settings are
environment variables, so worker processes a task runner starts inherit them.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

#: library chatter off in the terminal (set only where the user has not set them)
QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",  # load reports, truncation notices
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" bars follow it
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",  # the terminal; the API keeps INFO
    "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning",
}
CONSOLE_LOGGER = "ctxsim.console"
_SET_BY_US: set[str] = set()


def configure_output(verbose: bool = False) -> None:
    """Call before transformers or prefect is imported (their settings are read at import)."""
    console = logging.getLogger(CONSOLE_LOGGER)
    console.propagate = False
    console.handlers.clear()
    if verbose:
        os.environ["CTXSIM_VERBOSE"] = "1"
        for key in _SET_BY_US:  # a command's --verbose after the global default
            os.environ.pop(key, None)
        _SET_BY_US.clear()
        return
    for key, value in QUIET_ENV.items():
        if key not in os.environ:
            os.environ[key] = value
            _SET_BY_US.add(key)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    console.addHandler(handler)
    console.setLevel(logging.INFO)


def console_line(msg: str, *args: object) -> None:
    """One line for the terminal in quiet mode (in verbose mode Prefect's own line says it)."""
    logging.getLogger(CONSOLE_LOGGER).info(msg, *args)


def hide_progress_bars() -> None:
    """`--no-progress`: every tqdm bar off, the stages' and the libraries' (sentence-transformers'
    model card computes its widget examples under one). tqdm reads ``TQDM_DISABLE`` once, when it
    is imported, and a plan or a check may have imported it already: its defaults change too."""
    os.environ["TQDM_DISABLE"] = "1"
    std = sys.modules.get("tqdm.std")
    if std is None or getattr(std.tqdm, "_ctxsim_hidden", False):
        return
    from functools import partialmethod

    std.tqdm.__init__ = partialmethod(std.tqdm.__init__, disable=True)
    std.tqdm._ctxsim_hidden = True
