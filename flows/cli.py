"""`ctxsim` command line: the user's map of the system (orchestration only).

Prefect is imported inside the commands, after flows.prefect_env has set its environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxsim.flows.cli_options import ConfigOpt, JsonOpt, RootOpt, SetOpt, VerboseOpt

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="ctxsim: sentence-pair similarity labels from the contexts sentences fit into "
    "(Sun et al., TACL 2022).",
)


@app.callback()
def _global_options(verbose: VerboseOpt = False) -> None:
    """ctxsim: sentence-pair similarity labels from the contexts sentences fit into."""
    from ctxsim.flows.cli_errors import set_verbose

    set_verbose(verbose, reset=True)


def _fail(msg: str | BaseException, code: int = 2) -> None:
    from ctxsim.flows.cli_errors import fail

    fail(msg, code)


def _root_of(config: Path | None, root: str | None) -> str:
    from ctxsim.flows.cli_common import root_of

    return root_of(config, root)


def _existing_store(config: Path | None, root: str | None):  # noqa: ANN202 - lazy import
    from ctxsim.flows.cli_common import existing_store

    return existing_store(config, root)


@app.command(epilog="Example: ctxsim run --config configs/quickstart.yaml --set retrieve.top_k=500")
def run(
    config: ConfigOpt = None,
    root: RootOpt = None,
    set_: SetOpt = None,
    until: Annotated[str | None, typer.Option("--until", help="stop after this stage")] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="name of the run record")] = None,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="no progress bars (the output is quiet anyway)")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", hidden=True, help="old name of --no-progress")
    ] = False,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run the pipeline (every stage of the config, or up to --until), reusing finished work."""
    from ctxsim.flows.cli_errors import cli_error_types, set_verbose, user_errors
    from ctxsim.flows.config import ConfigError, load_config
    from ctxsim.flows.console import hide_progress_bars
    from ctxsim.flows.prefect_env import configure_prefect
    from ctxsim.flows.preflight import preflight
    from ctxsim.store.artefacts import safe_name

    set_verbose(verbose)
    if config is None:
        config = Path("configs/quickstart.yaml")
    overrides = list(set_ or []) + (["run.no_progress=true"] if no_progress or quiet else [])
    with user_errors(2):  # before Prefect starts: bad config, paths, files, root, packages
        cfg = load_config(config, overrides, root)
        if run_id is not None:
            safe_name(run_id, "run id")
        else:  # named here, so that an interrupted or failed run can be named and resumed
            from ctxsim.flows.pipeline import new_run_id

            run_id = new_run_id()
        if until is not None and until not in cfg.stage_names:
            raise ConfigError(f"--until {until!r} is not a stage of {config}")
        if cfg.run.no_progress:
            hide_progress_bars()
        preflight(cfg)
    configure_prefect(cfg.run.root)
    from ctxsim.flows.cli_errors import disk_full, hide_input_error_tracebacks, interrupt_exits
    from ctxsim.flows.pipeline import run_pipeline
    from ctxsim.flows.prefect_env import server_start_failure
    from ctxsim.flows.run_records import mark_ended

    hide_input_error_tracebacks()
    resume = _resume_command(config, set_, root, until, run_id, no_progress or quiet)
    try:
        with interrupt_exits(cfg.run.root, run_id, resume):
            record = run_pipeline(str(config), overrides, root, until, run_id)
    except Exception as e:  # never left "completed" (or "running") for a run that failed
        mark_ended(cfg.run.root, run_id, "failed", f"{type(e).__name__}: {e}")
        full = disk_full(e, cfg.run.root)
        if full:
            _fail(full, 1)
        slow = server_start_failure(e)
        if slow:
            _fail(slow, 1)
        if isinstance(e, cli_error_types()):
            _fail(e, 1)
        if isinstance(e, ConnectionError) and cfg.run.runner_address:
            _fail(_runner_connection_hint(e, cfg.run.task_runner, cfg.run.runner_address), 1)
        raise
    if json_out:
        typer.echo(json.dumps(record, indent=2, default=str))
    else:
        from ctxsim.flows.run_summary import summary_lines

        _print_run(record)
        if root is None and any(s.startswith("run.root=") for s in set_ or []):
            root = str(cfg.run.root)  # the next commands need the root the --set chose
        for line in summary_lines(record, config, root):
            typer.echo(line)


def _resume_command(
    config: Path,
    set_: list[str] | None,
    root: str | None,
    until: str | None,
    run_id: str,
    no_progress: bool,
) -> str:
    """The `ctxsim run` command that resumes this run (same config, overrides and run id)."""
    import shlex

    args = ["ctxsim", "run", "--config", str(config)]
    for ov in set_ or []:
        args += ["--set", ov]
    args += ["--root", root] if root else []
    args += ["--until", until] if until else []
    args += ["--no-progress"] if no_progress else []
    return shlex.join([*args, "--run-id", run_id])


def _runner_connection_hint(exc: BaseException, runner: str, address: str) -> str:
    """A one-line error for a cluster that cannot be reached (instead of a long traceback)."""
    msg = f"cannot reach the {runner} cluster at run.runner_address={address}: {exc}"
    if runner == "ray":
        msg += (
            " (is the head's Ray Client port open? a cluster started by `ray start --head` "
            "uses token authentication: export RAY_AUTH_MODE=token here, and RAY_AUTH_TOKEN="
            "<`ray get-auth-token` on the head> on other hosts)"
        )
    return msg


def _print_run(record: dict[str, Any]) -> None:
    from ctxsim.flows.run_records import stages_in_order

    typer.echo(f"run {record['run_id']}: {record['status']}")
    for name, st in stages_in_order(record):
        typer.echo(
            f"  {name:<14} {st['status']:<9} {st['fingerprint']}  rows={st['rows']:<8} "
            f"shards={st['shards_computed']}/{st['shards']}  {st['seconds']}s"
        )


@app.command(epilog="Example: ctxsim runs --json")
def runs(config: ConfigOpt = None, root: RootOpt = None, json_out: JsonOpt = False) -> None:
    """List runs: their stages (in pipeline order), fingerprints, status and row counts.

    A run still marked "running" whose process is gone (killed) is shown as "crashed"."""
    from ctxsim.flows.run_records import for_display

    store = _existing_store(config, root)
    where = store.root if store is not None else Path(_root_of(config, root)).expanduser()
    records = for_display(store.list_runs()) if store is not None else []
    if json_out:
        typer.echo(json.dumps({"root": str(where), "runs": records}, indent=2, default=str))
        return
    if not records:
        typer.echo(f"no runs under {where}")
    for r in records:
        _print_run(r)


@app.command(epilog="Example: ctxsim inspect shard --limit 3 --json")
def inspect(
    stage: Annotated[str, typer.Argument(help="stage name, e.g. shard, retrieve, label")],
    run_id: Annotated[
        str | None, typer.Option("--run", help="run id (default: latest artefact)")
    ] = None,
    config: ConfigOpt = None,
    root: RootOpt = None,
    limit: Annotated[int, typer.Option("--limit", help="sample rows to show")] = 5,
    json_out: JsonOpt = False,
) -> None:
    """Schema, rows, bytes, per-column statistics and sample rows of a stage's artefact."""
    from ctxsim.store.artefacts import StoreError, safe_name
    from ctxsim.store.inspection import describe

    try:  # names first: an unsafe one is refused whether or not the root exists
        safe_name(stage, "stage name")
        if run_id:
            safe_name(run_id, "run id")
    except StoreError as e:
        _fail(str(e))
    store = _existing_store(config, root)
    if store is None:
        _fail(f"no artefact root {Path(_root_of(config, root)).expanduser()}")
    try:
        if run_id:
            rec = store.read_run(run_id)
            if stage not in rec["stages"]:
                _fail(f"run {run_id} has no stage {stage!r} (it has {', '.join(rec['stages'])})")
            art = store.get(stage, rec["stages"][stage]["fingerprint"], verify=False)
        else:
            art = store.latest(stage)
        if art is None:
            _fail(f"no published artefact for stage {stage!r} under {store.root}")
        info = describe(art, limit)  # names corrupt parts (StoreError) instead of crashing
    except StoreError as e:
        _fail(str(e))
    if json_out:
        typer.echo(json.dumps(info, indent=2, default=str))
        return
    typer.echo(f"{info['stage']}  {info['fingerprint']}  {info['path']}")
    typer.echo(f"rows={info['num_rows']}  parts={info['num_parts']}  bytes={info['bytes']}")
    typer.echo("schema:")
    for col in info["schema"]:
        typer.echo(f"  {col['name']}: {col['type']}")
    typer.echo("columns:")
    for name, summ in info["columns"].items():
        typer.echo(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in summ.items()))
    if info["stats"]:
        typer.echo("stats: " + json.dumps(info["stats"], default=str))
    typer.echo("sample:")
    for row in info["sample"]:
        typer.echo("  " + json.dumps(row, default=str, ensure_ascii=False)[:300])


from ctxsim.flows.cli_ops import register  # noqa: E402 - ops commands

register(app)

from ctxsim.flows.cli_product import register as register_product  # noqa: E402 - product

register_product(app)


@app.command(
    "train-generator",
    epilog="Example: ctxsim train-generator --config configs/books.yaml "
    "--set generator.train_steps=2000",
)
def train_generator(
    config: ConfigOpt = None,
    root: RootOpt = None,
    set_: SetOpt = None,
    run_id: Annotated[str | None, typer.Option("--run-id")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Train the generative scorers (Eq. 2) on corpus windows: `ctxsim run --until generator`.

    With `generator.distill_from: smollm2-135m` (and `backbone: tiny-random`) it distils a small
    scorer from that teacher's next-token distributions. Resumes mid-epoch from its checkpoint
    after a crash; the stage's stats give validation perplexity per direction, how often the
    true context wins, and a distilled student's Spearman agreement with its teacher."""
    run(
        config=config,
        root=root,
        set_=set_,
        until="generator",
        run_id=run_id,
        no_progress=False,
        quiet=False,
        json_out=json_out,
        verbose=False,
    )


def _origin_config(
    config: Path | None,
    root: Path | None,
    sts_dir: Path,
    set_: list[str] | None,
    sets: list[str] | None,
    max_pairs: int | None,
    lm_flags: tuple[int | None, bool, bool],
) -> tuple[Path, Any, list[str]]:
    """`ctxsim origin`'s (config path, loaded and preflighted config, overrides): the STS sets
    as queries and given pairs, and the LM route's context-set flags (``lm_flags``: --cs-size,
    --random-contexts, --no-diversity), refused for a config whose route selects no context."""
    from ctxsim.flows.cli_errors import user_errors
    from ctxsim.flows.config import load_config
    from ctxsim.flows.preflight import preflight

    cs_size, random_contexts, no_diversity = lm_flags

    if not sts_dir.is_dir():
        _fail(f"--sts-dir {sts_dir} is not a directory")
    config = config or Path("configs/quickstart.yaml")
    overrides = list(set_ or []) + [
        "queries.source=sts",
        f"queries.sts_dir='{sts_dir.resolve()}'",
        f"queries.sts_sets={json.dumps(sets or ['*'])}",
        "pairs.mode=given",
    ]
    if max_pairs:
        overrides.append(f"queries.max_pairs_per_set={max_pairs}")
    lm_only: list[str] = []  # set select.*: the LM route's context sets
    if cs_size:
        lm_only.append(f"select.max_size={cs_size}")
    if random_contexts:
        lm_only.append("select.strategy=random")
    if no_diversity:
        lm_only += ["select.one_per_chunk=false", "select.jaccard_threshold=null"]
    with user_errors(2):
        cfg = load_config(config, overrides, root)
        flags = [
            flag
            for flag, given in (
                ("--cs-size", cs_size),
                ("--random-contexts", random_contexts),
                ("--no-diversity", no_diversity),
            )
            if given
        ]
        # an override would add a select section (a stage run for nothing), so the config
        # without them says whether the route selects contexts
        if flags and "select" not in cfg.stage_names:
            contextual = getattr(cfg.stages.get("label"), "contextual", "?")
            _fail(
                f"{', '.join(flags)}: {config} labels with label.contextual: {contextual}, "
                "which selects no context set (no select stage: Origin runs over every corpus "
                "context unit), so they would change nothing; drop them, or use a config with "
                "label.contextual: lm",
                2,
            )
        if lm_only:
            overrides += lm_only
            cfg = load_config(config, overrides, root)
        preflight(cfg)
    return config, cfg, overrides


@app.command(
    epilog="Example: ctxsim origin --config configs/books.yaml --sts-dir ../shared/data/sts "
    "--sets 'STSb.dev' --json-out origin.json"
)
def origin(
    sts_dir: Annotated[Path, typer.Option("--sts-dir", help="directory holding STS sets")],
    config: ConfigOpt = None,
    root: RootOpt = None,
    set_: SetOpt = None,
    sets: Annotated[
        list[str] | None, typer.Option("--sets", help="fnmatch on DATASET.SUBSET (default: all)")
    ] = None,
    max_pairs: Annotated[int | None, typer.Option("--max-pairs", help="per set, seeded")] = None,
    cs_size: Annotated[
        int | None, typer.Option("--cs-size", help="LM route: |Cs| (Table 7)")
    ] = None,
    random_contexts: Annotated[
        bool, typer.Option("--random-contexts", help="LM route, Sec. 5.4: random, not retrieved")
    ] = False,
    no_diversity: Annotated[
        bool, typer.Option("--no-diversity", help="LM route, Sec. 5.4: no chunk / Jaccard rule")
    ] = False,
    run_id: Annotated[str | None, typer.Option("--run-id")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json-out", help="write the report here")
    ] = None,
) -> None:
    """Origin similarity (Eq. 4) on every pair of the STS sets found in a directory.

    With the config's contextual model (label.contextual). LM route (lm: quickstart, books):
    retrieves contexts for these outside sentences from the corpus, selects Cs, scores them
    (Eq. 3) and reports Spearman x100 per set ("all" and "mean" conventions), per Eq. 3 term and
    without each term (Table 9). Encoder route (encoder: medquad): the embed stage's encoder
    scores every corpus context unit by cosine, and Origin runs over all of them (closed form,
    or label.encoder.form); no retrieval, no Cs, so --cs-size, --random-contexts and
    --no-diversity are refused. Both next to a TF-IDF cosine baseline."""
    from ctxsim.flows.prefect_env import configure_prefect

    lm_flags = (cs_size, random_contexts, no_diversity)
    config, cfg, overrides = _origin_config(config, root, sts_dir, set_, sets, max_pairs, lm_flags)
    configure_prefect(cfg.run.root)
    import shlex
    import sys

    from ctxsim.flows.cli_errors import (
        hide_input_error_tracebacks,
        interrupt_exits,
        user_errors,
    )
    from ctxsim.flows.pipeline import new_run_id, run_pipeline
    from ctxsim.flows.prefect_env import server_start_failure
    from ctxsim.store.artefacts import ArtefactStore

    hide_input_error_tracebacks()
    if run_id is None:  # named here, so that an interrupted run can be resumed by name
        run_id = new_run_id()
    resume = shlex.join(["ctxsim", *sys.argv[1:]])
    if "--run-id" not in sys.argv:
        resume += f" --run-id {shlex.quote(run_id)}"
    try:
        with user_errors(1), interrupt_exits(cfg.run.root, run_id, resume):
            record = run_pipeline(str(config), overrides, root, "label", run_id)
    except RuntimeError as e:
        slow = server_start_failure(e)
        if slow:
            _fail(slow, 1)
        raise
    label = record["stages"]["label"]
    art = ArtefactStore(cfg.run.root).require("label", label["fingerprint"])
    report = json.loads((art.files_dir / "origin.json").read_text())
    report["config"] = cfg.to_dict()
    report["run_id"] = record["run_id"]
    text = json.dumps(report, indent=2, default=str)
    if json_out:
        json_out.write_text(text)
    typer.echo(text)


from ctxsim.flows.cli_eval import register as register_eval  # noqa: E402 - evaluate, data

register_eval(app)

from ctxsim.flows.cli_plan import register as register_plan  # noqa: E402 - plan

register_plan(app)

from ctxsim.flows.cli_adapt import register as register_adapt  # noqa: E402 - adapt

register_adapt(app)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)


if __name__ == "__main__":
    main()
