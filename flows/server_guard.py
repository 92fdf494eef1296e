"""Prefect's ephemeral API server dies with the run that started it, even after SIGKILL.

Without a ``PREFECT_API_URL`` a run starts its own API server (uvicorn, a child process) and
stops it at exit. A run killed with SIGKILL never gets to: the server used to live on, holding
its port and the SQLite database under the artefact root. On Linux the server is started with a
parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGTERM)``), so the kernel stops it when the run
goes, however it goes. The signal fires when the *thread* that started the child exits, so the
guard is armed only when the main thread starts the server (as every ``ctxsim`` command does).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: SIGTERM this child when ``parent`` dies (libc loaded before fork)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody will signal us
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


class _SubprocessWithGuard:
    """The ``subprocess`` module, except that ``Popen`` arms the parent-death signal."""

    def __init__(self, preexec: Callable[[], None]):
        self.Popen = partial(subprocess.Popen, preexec_fn=preexec)

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)


def tie_ephemeral_server_to_this_process() -> bool:
    """Patch Prefect's ephemeral server launcher once (Linux only); True when armed."""
    if not sys.platform.startswith("linux"):
        return False
    from prefect.server.api import server as server_module

    cls = server_module.SubprocessASGIServer
    if getattr(cls, "_ctxsim_dies_with_parent", False):
        return True
    original = cls._run_uvicorn_command

    def run_uvicorn_command(self: Any) -> subprocess.Popen:
        if threading.current_thread() is not threading.main_thread():
            return original(self)
        guarded = _SubprocessWithGuard(_die_with(os.getpid()))
        server_module.subprocess = guarded  # type: ignore[assignment]
        try:
            return original(self)
        finally:
            server_module.subprocess = subprocess

    cls._run_uvicorn_command = run_uvicorn_command  # type: ignore[method-assign]
    cls._ctxsim_dies_with_parent = True  # type: ignore[attr-defined]
    return True
