"""Forked test workers that exit on their own result, not on the parent's exit hooks.

A forked child inherits the pytest process's ``threading`` exit hooks: after an in-process
``ctxsim run`` (CliRunner) Prefect's queue services have registered one that fails its own
assertion in a child that never started them, and the child then exits 1 after its work
succeeded (the store's race tests failed in the full suite only, behind such a test).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any


def exit_when_done(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` and leave with its own status (0, or 1 after printing its traceback),
    skipping inherited exit hooks; a ``multiprocessing`` target."""
    code = 0
    try:
        fn(*args)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
