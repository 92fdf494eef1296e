"""`ctxsim export` and `ctxsim explain`: the labelled dataset as a product (product/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config naming the artefact root (run.root)"),
]
RootOpt = Annotated[str | None, typer.Option("--root", help="artefact root (overrides run.root)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]


def _fail(msg: str, code: int = 2) -> None:
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def latest_labelled_run(store: Any) -> str:
    """The most recent completed run that has a label stage."""
    for rec in reversed(store.list_runs()):
        if rec.get("status") == "completed" and "label" in rec.get("stages", {}):
            return str(rec["run_id"])
    raise ValueError(f"no completed run with a label stage under {store.root}; give --run")


def register(app: typer.Typer) -> None:
    """Add the product commands to the main CLI."""
    from ctxsim.flows.cli import _root_of

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
        from ctxsim.product.contamination import ContaminationError
        from ctxsim.product.export import ExportError, export_run
        from ctxsim.store.artefacts import ArtefactStore, StoreError

        try:
            store = ArtefactStore(_root_of(config, root))
            summary = export_run(store, run_id, out, fmt, overwrite, sts_dir, license_)
        except (ExportError, StoreError, ContaminationError, FileNotFoundError) as e:
            _fail(str(e), 1)
        if json_out:
            typer.echo(json.dumps(summary, indent=2))
            return
        typer.echo(
            f"exported run {summary['run_id']} to {summary['out']} ({summary['format']}): "
            + ", ".join(f"{s}={n}" for s, n in summary["splits"].items())
            + f"; contaminated sentences: {summary['contaminated']}"
        )

    @app.command(
        epilog="Example: ctxsim explain 'The cat sat on the mat.' 'A cat was sitting.' --json"
    )
    def explain(
        s1: Annotated[str, typer.Argument(help="first sentence")],
        s2: Annotated[str, typer.Argument(help="second sentence")],
        run_id: Annotated[
            str | None, typer.Option("--run", help="run id (default: latest labelled run)")
        ] = None,
        top: Annotated[int, typer.Option("--top", help="contexts per table")] = 5,
        config: ConfigOpt = None,
        root: RootOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Why two sentences get their Origin label: S of both over C = Cs1 + Cs2 (from the
        score cache where scored before), the contexts that contribute most to the similarity
        and those where the two disagree most, each with its document and section. A sentence
        the run did not label gets its Cs from the run's own retrieve/screen/select."""
        from ctxsim.product.explain import explain_pair, render_table
        from ctxsim.store.artefacts import ArtefactStore, StoreError

        try:
            store = ArtefactStore(_root_of(config, root))
            rid = run_id or latest_labelled_run(store)
            result = explain_pair(store, rid, s1, s2, top=top)
        except (StoreError, ValueError, FileNotFoundError) as e:
            _fail(str(e), 1)
        if json_out:
            typer.echo(json.dumps(result, indent=2, ensure_ascii=False, default=str))
        else:
            typer.echo(render_table(result))
