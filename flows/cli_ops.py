"""`ctxsim server`, `ctxsim worker`, `ctxsim serve`: operations commands (see flows/ops.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ctxsim.store.errors import InputError


def _fail(msg: str, code: int = 2) -> None:
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


#: each command's example, shown under its --help
EXAMPLES = {
    "server": "Example: ctxsim server --port 4200   (then: export PREFECT_API_URL=...)",
    "worker": "Example: ctxsim worker --pool ctxsim --gpus 0,1",
    "serve": 'Example: ctxsim serve --config configs/books.yaml --cron "0 2 * * *"',
}


def register(app: typer.Typer) -> None:
    """Add the operations commands to the main CLI."""
    for command in (server, worker, serve):
        app.command(epilog=EXAMPLES[command.__name__])(command)


def server(
    host: Annotated[str, typer.Option(help="bind address; loopback unless you mean it")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="API/UI port")] = 4200,
    home: Annotated[
        Path | None, typer.Option(help="server state: SQLite db, log, pid (~/.ctxsim/server)")
    ] = None,
    ui: Annotated[bool, typer.Option("--ui/--no-ui", help="serve the web UI")] = True,
    timeout: Annotated[float, typer.Option(help="seconds to wait for health")] = 180.0,
    stop: Annotated[bool, typer.Option("--stop", help="stop the server started here")] = False,
) -> None:
    """Start a local Prefect server in the background and wait until it is healthy.

    SQLite under --home by default; PostgreSQL when PREFECT_SERVER_DATABASE_CONNECTION_URL
    is set (postgresql+asyncpg://user:password@host:5432/db).
    """
    from ctxsim.flows import ops

    if stop:
        pid = ops.stop_server(home)
        typer.echo(f"stopped server pid {pid}" if pid else "no server pid file: nothing to stop")
        return
    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.secho(
            f"warning: binding {host}: anyone who can reach it controls your flows; set "
            "PREFECT_SERVER_API_AUTH_STRING or keep it behind a firewall",
            fg=typer.colors.YELLOW,
            err=True,
        )
    try:
        info = ops.start_server(host, port, home, ui=ui, timeout=timeout)
    except (InputError, ops.ServerStartError, TimeoutError) as e:
        _fail(str(e), 1)
    typer.echo(f"Prefect server healthy at {info.api_url} (pid {info.pid}, {info.database})")
    typer.echo(f"  use it:  export PREFECT_API_URL={info.api_url}")
    typer.echo(f"  log:     {info.log}")
    typer.echo(f"  stop:    {info.stop_hint()}")


def worker(
    pool: Annotated[str, typer.Option(help="process work pool (created if missing)")] = "ctxsim",
    gpus: Annotated[
        str | None, typer.Option(help="GPU indices, e.g. 0,1 or 'all': one worker per GPU")
    ] = None,
    cpu_workers: Annotated[int, typer.Option(help="CPU workers when no --gpus")] = 1,
    work_queue: Annotated[str | None, typer.Option(help="work queue to poll")] = None,
    name: Annotated[str, typer.Option(help="worker name prefix")] = "ctxsim",
    log_dir: Annotated[Path | None, typer.Option(help="one log file per worker")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the commands only")] = False,
    compose: Annotated[
        bool, typer.Option("--compose", help="print the docker-compose worker services")
    ] = False,
) -> None:
    """Start Prefect process workers: one per GPU (own CUDA_VISIBLE_DEVICES, --limit 1)."""
    import json

    from ctxsim.flows import ops

    try:
        gpu_list = ops.parse_gpus(gpus)
        specs = ops.worker_specs(pool, gpu_list, cpu_workers, name, work_queue)
    except InputError as e:
        _fail(str(e))
    note = ops.gpu_note(gpus, gpu_list, starting=not (dry_run or compose))
    if note:
        typer.secho(f"warning: {note}", fg=typer.colors.YELLOW, err=True)
    if compose:
        import yaml

        from ctxsim.flows.ops_compose import compose_worker_services

        services = compose_worker_services(specs)
        typer.echo("# paste under services: in docker-compose.yml; add `<<: *ctxsim` to each")
        typer.echo(yaml.safe_dump({"services": services}, sort_keys=False, width=200))
        return
    if dry_run:
        typer.echo(
            json.dumps(
                [{"name": s.name, "argv": list(s.argv), "env": s.env} for s in specs], indent=2
            )
        )
        return
    if not os.environ.get("PREFECT_API_URL"):
        _fail("PREFECT_API_URL is not set: start a server (ctxsim server) and export it")
    for s in specs:
        typer.echo(f"starting {s.name}: {' '.join(s.argv)}  {s.env}")
    raise typer.Exit(ops.run_workers(specs, log_dir))


def serve(
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML config")] = Path(
        "configs/quickstart.yaml"
    ),
    cron: Annotated[str | None, typer.Option(help="cron schedule, e.g. '0 2 * * *'")] = None,
    name: Annotated[str, typer.Option(help="deployment name")] = "ctxsim-serve",
    set_: Annotated[list[str] | None, typer.Option("--set", help="SECTION.KEY=VALUE")] = None,
    root: Annotated[str | None, typer.Option(help="artefact root")] = None,
    until: Annotated[str | None, typer.Option(help="stop after this stage")] = None,
) -> None:
    """Serve the pipeline on this host with a cron schedule (Prefect serve); Ctrl-C stops."""
    if not os.environ.get("PREFECT_API_URL"):
        _fail("PREFECT_API_URL is not set: start a server (ctxsim server) and export it")
    from ctxsim.flows import ops

    try:
        ops.serve_pipeline(str(config), cron, name, list(set_ or []), root, until)
    except InputError as e:  # ConfigError, a bad --until or --cron
        _fail(str(e))
