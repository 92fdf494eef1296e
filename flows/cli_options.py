"""The options several `ctxsim` commands share (their own module: flows/cli.py and the modules
that register commands on it import them without importing each other)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config (default configs/quickstart.yaml)"),
]
RootOpt = Annotated[str | None, typer.Option("--root", help="artefact root (overrides run.root)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a config value: SECTION.KEY=VALUE")
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="show the libraries' own output (load reports, weight bars, trainer logs), "
        "Prefect's per-task lines and the traceback of an error; default: one line per stage",
    ),
]
