"""`ctxsim plan`: the command (flows/plan.py pilots, flows/plan_predict.py predicts)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ctxsim.flows.cli_errors import fail
from ctxsim.flows.cli_options import ConfigOpt, JsonOpt, RootOpt, SetOpt


def _fail(msg: str | BaseException, code: int = 2) -> None:
    """One line on stderr, exit ``code`` (2: the user's input)."""
    fail(msg, code)


if TYPE_CHECKING:
    from ctxsim.flows.config import PipelineConfig

PLAN_EXAMPLE = (
    "Example: ctxsim plan --config configs/books.yaml --sample-fraction 0.05 --pilot-queries 8; "
    "ctxsim plan --config configs/paper.yaml --gpus 8 --tokens-per-second 4e5"
)


def register(app: typer.Typer) -> None:
    """Add `plan` to the main CLI."""
    app.command(epilog=PLAN_EXAMPLE)(plan)


def plan(
    config: ConfigOpt = None,
    root: RootOpt = None,
    set_: SetOpt = None,
    until: Annotated[str | None, typer.Option("--until", help="plan up to this stage")] = None,
    sample_fraction: Annotated[
        float, typer.Option("--sample-fraction", help="share of corpus records in the pilot")
    ] = 0.05,
    pilot_queries: Annotated[
        int, typer.Option("--pilot-queries", help="queries of the first pilot (the second: 2x)")
    ] = 8,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs for the scoring stages")] = 0,
    tokens_per_second: Annotated[
        float | None,
        typer.Option("--tokens-per-second", help="scored tokens per second per GPU (measured)"),
    ] = None,
    save_pilot: Annotated[
        Path | None, typer.Option("--save-pilot", help="write the raw pilot measurements here")
    ] = None,
    no_cache: Annotated[
        bool,
        typer.Option(
            "--no-cache",
            help="pilot every stage on a temporary root and keep nothing (default: reuse and "
            "extend this machine's unit-cost cache, $CTXSIM_PLAN_CACHE or ~/.cache/ctxsim/plan)",
        ),
    ] = False,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="no progress bar (also run.no_progress)")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", hidden=True, help="old name of --no-progress")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Predict per-stage CPU (or GPU) seconds, disk and memory of a config from a seeded pilot
    on a sample of its corpus. Nothing is written under the artefact root: the pilot runs in
    this machine's unit-cost cache (or, with --no-cache, a temporary root), and a later plan
    pilots only the stages whose costs it does not know yet. Says what the plan itself cost."""
    import time

    c0, t0 = time.process_time(), time.perf_counter()
    if config is None:
        config = Path("configs/quickstart.yaml")
    if gpus and not tokens_per_second:
        _fail("--gpus needs --tokens-per-second (measure it, e.g. with bench/bench_score.py)")
    overrides = list(set_ or [])
    full, stages = _checked_config(config, overrides, root, until)
    from ctxsim.flows.cli_errors import user_errors
    from ctxsim.flows.plan import own_cost, plan_cache_dir, predict, run_pilot

    hide = no_progress or quiet or full.run.no_progress
    with user_errors(2), _progress(full, stages, hide) as progress:
        cfg, pilot = run_pilot(
            config,
            overrides,
            sample_fraction,
            pilot_queries,
            until=until,
            run_root=root,
            cache=not no_cache,
            on_stage=progress,
        )
    if save_pilot is not None:
        from ctxsim.flows.plan import pilot_to_json

        save_pilot.write_text(json.dumps(pilot_to_json(pilot), indent=1, default=str))
    result = predict(cfg, pilot, gpus=gpus, tokens_per_second=tokens_per_second)
    result["plan_itself"] = own_cost(
        c0, t0, result["total"]["cpu_s"], None if no_cache else plan_cache_dir()
    )
    from ctxsim.flows.plan import format_plan

    typer.echo(json.dumps(result, indent=2) if json_out else format_plan(result))


def _checked_config(
    config: Path, overrides: list[str], root: str | None, until: str | None
) -> tuple[PipelineConfig, list[str]]:
    """The config and the stages to plan, checked before the pilot: a bad config, corpus
    paths, STS folders or packages are one line (exit 2)."""
    from ctxsim.flows.cli_errors import user_errors
    from ctxsim.flows.config import load_config
    from ctxsim.flows.console import hide_progress_bars
    from ctxsim.flows.plan import plan_stages
    from ctxsim.flows.preflight import check_corpus, check_model_packages, check_sts

    hide_progress_bars()  # the stages' own bars: the pilot's one bar (disable= its own) says it all
    with user_errors(2):
        full = load_config(config, overrides, root)
        stages = plan_stages(full, until)
        check_corpus(full)
        check_sts(full)
        check_model_packages(full)
    return full, stages


@contextlib.contextmanager
def _progress(
    full: PipelineConfig, stages: list[str], hide: bool
) -> Iterator[Callable[[int, str, str], None]]:
    """One bar over the pilots' stage runs (on stderr); yields the pilot's ``on_stage``."""
    from tqdm import tqdm

    from ctxsim.flows.plan import pilot_steps

    n_steps = pilot_steps(full, stages)
    bar = tqdm(total=n_steps, desc="plan", unit="stage", disable=hide, file=sys.stderr)

    def progress(pilot: int, stage: str, status: str) -> None:
        if status == "running":
            bar.set_description(f"plan: pilot {pilot}: {stage}")
            return
        bar.set_description(
            f"plan: pilot {pilot}: {stage}" + (" (cached)" if status == "cached" else "")
        )
        bar.update(1)

    try:
        yield progress
    finally:
        bar.close()
