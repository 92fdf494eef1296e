"""`ctxsim export` and `ctxsim explain`: the labelled dataset as a product (product/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxsim.store.errors import InputError

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config naming the artefact root (run.root)"),
]
RootOpt = Annotated[str | None, typer.Option("--root", help="artefact root (overrides run.root)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]


def _fail(msg: str, code: int = 2) -> None:
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def utf8_problem(text: str, name: str) -> str | None:
    """Why an argument is not UTF-8 text (bytes that are not UTF-8 reach Python as lone
    surrogates), naming the argument and the first bad byte; None when it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        ch = text[e.start]
        byte = f"byte 0x{ord(ch) - 0xDC00:02x}" if 0xDC80 <= ord(ch) <= 0xDCFF else repr(ch)
        return f"{name} is not valid UTF-8 text ({byte} at character {e.start}); pass UTF-8"
    return None


def contamination_line(summary: dict[str, Any]) -> str:
    """The console's line on the contamination check: the count, or "not checked" and why (the
    reason the card gives, from the export's contamination.json)."""
    if summary.get("contaminated") is not None:
        return f"contaminated sentences: {summary['contaminated']}"
    why = "no report written"
    try:
        report = json.loads((Path(summary["out"]) / "contamination.json").read_text())
        why = report.get("skipped") or why
    except (OSError, ValueError):
        pass
    return f"contamination: not checked ({why})"


def latest_labelled_run(store: Any) -> str:
    """The most recent completed run that has a label stage."""
    for rec in reversed(store.list_runs()):
        if rec.get("status") == "completed" and "label" in rec.get("stages", {}):
            return str(rec["run_id"])
    raise InputError(f"no completed run with a label stage under {store.root}; give --run")


def register(app: typer.Typer) -> None:
    """Add the product commands to the main CLI."""
    _register_export(app)
    _register_explain(app)


def _register_export(app: typer.Typer) -> None:
    """`ctxsim export`."""
    from ctxsim.flows.cli_common import require_store

    @app.command(
        epilog="Example: ctxsim export run-20260101-120000-ab12 --out exports/qs --format hf"
    )
    def export(
        run_id: Annotated[str, typer.Argument(help="run id (see `ctxsim runs`)")],
        out: Annotated[Path, typer.Option("--out", help="target directory (empty or new)")],
        fmt: Annotated[str, typer.Option("--format", help="hf | parquet | jsonl")] = "hf",
        overwrite: Annotated[
            bool, typer.Option("--overwrite", help="replace a non-empty --out")
        ] = False,
        sts_dir: Annotated[
            str | None,
            typer.Option(
                "--sts-dir",
                help="STS folder for the contamination check (default: "
                "label.contamination.sts_dir of the run)",
            ),
        ] = None,
        license_: Annotated[
            str | None, typer.Option("--license", help="card licence (default: run.license)")
        ] = None,
        config: ConfigOpt = None,
        root: RootOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Write a run's labelled pairs as a Hugging Face dataset (or Parquet / JSONL) with a
        dataset card: corpus checksum, config, fingerprints, counts, label plots, surrogate
        results and the STS test-set contamination check. Nothing is written on error."""
        from ctxsim.flows.cli_errors import user_error_types
        from ctxsim.product.export import export_run

        store = require_store(config, root)
        try:
            summary = export_run(store, run_id, out, fmt, overwrite, sts_dir, license_)
        except user_error_types() as e:  # ExportError, ContaminationError, StoreError, ...
            _fail(str(e), 1)
        if json_out:
            typer.echo(json.dumps(summary, indent=2))
            return
        typer.echo(
            f"exported run {summary['run_id']} to {summary['out']} ({summary['format']}): "
            + ", ".join(f"{s}={n}" for s, n in summary["splits"].items())
            + f"; {contamination_line(summary)}"
        )


def _register_explain(app: typer.Typer) -> None:
    """`ctxsim explain`."""
    from ctxsim.flows.cli_common import require_store

    @app.command(
        epilog="Example: ctxsim explain 'The cat sat on the mat.' 'A cat was sitting.' --json"
    )
    def explain(
        s1: Annotated[str, typer.Argument(help="first sentence")],
        s2: Annotated[str, typer.Argument(help="second sentence")],
        run_id: Annotated[
            str | None, typer.Option("--run", help="run id (default: latest labelled run)")
        ] = None,
        top: Annotated[int, typer.Option("--top", min=1, help="contexts per table")] = 5,
        config: ConfigOpt = None,
        root: RootOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Why two sentences get their Origin label: S of both over C = Cs1 + Cs2 (from the
        score cache where scored before), the contexts that contribute most to the similarity
        and those where the two disagree most, each with its document and section. A sentence
        the run did not label gets its Cs from the run's own retrieve/screen/select. On an
        encoder-route run (closed form): the corpus units pushing the label up and pulling it
        down most, each with its term's share of the label."""
        from ctxsim.flows.cli_errors import user_error_types
        from ctxsim.flows.explain import explain_pair
        from ctxsim.product.explain import render_table

        for name, text in (("S1 (the first sentence)", s1), ("S2 (the second sentence)", s2)):
            problem = utf8_problem(text, name)
            if problem:
                _fail(problem)
        store = require_store(config, root)
        try:
            rid = run_id or latest_labelled_run(store)
            result = explain_pair(store, rid, s1, s2, top=top)
        except user_error_types() as e:
            _fail(str(e), 1)
        if json_out:
            typer.echo(json.dumps(result, indent=2, ensure_ascii=False, default=str))
        else:
            typer.echo(render_table(result))
