"""The project's logger: Prefect's run logger inside a flow or task, a standard one outside.

Its own module because both the artefact store and the stage template log through it (and the
stage template imports the store)."""

from __future__ import annotations

import logging


def get_logger(name: str = "ctxsim") -> logging.Logger | logging.LoggerAdapter:
    """Prefect's run logger inside a flow or task, a standard logger outside."""
    try:
        from prefect.exceptions import MissingContextError
        from prefect.logging import get_run_logger

        try:
            return get_run_logger()
        except MissingContextError:
            pass
    except ImportError:  # pragma: no cover - prefect is a hard dependency
        pass
    return logging.getLogger(name)
