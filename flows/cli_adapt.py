"""`ctxsim adapt`: one command from a corpus to an adapted sentence encoder with its card
(flows/adapt.py sizes the recipe; `ctxsim run` runs it; product/adapt_card.py writes the card)."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxsim.flows.adapt import RECIPE, AdaptPlan

EXAMPLE = (
    "Example: ctxsim adapt '../shared/data/corpus/openstax_econ/*.jsonl.gz' --out "
    "models/econ-minilm --eval-dir ../shared/data/domain/openstax_econ"
)
#: written into the adapted model's folder: what made it (and the mark --overwrite looks for)
ADAPT_MARKER = "ctxsim_adapt.json"


def register(app: typer.Typer) -> None:
    """Add `adapt` to the main CLI."""
    app.command(epilog=EXAMPLE)(adapt)


def adapt(
    corpus: Annotated[
        list[str],
        typer.Argument(help="corpus files or globs: JSON Lines, plain text or Parquet"),
    ],
    model: Annotated[
        str, typer.Option("--model", help="the encoder to adapt: minilm, mpnet or a folder")
    ] = "minilm",
    out: Annotated[
        Path | None,
        typer.Option("--out", help="folder for the adapted model (default adapted-<model>)"),
    ] = None,
    eval_dir: Annotated[
        str | None,
        typer.Option("--eval-dir", help="your dev tasks (*.pairs.tsv, *_qa.jsonl): evaluated"),
    ] = None,
    budget_cpu_hours: Annotated[
        float | None,
        typer.Option("--budget-cpu-hours", min=0.01, help="scale the run down to fit this"),
    ] = None,
    root: Annotated[
        str, typer.Option("--root", help="artefact root (runs, stages, caches)")
    ] = "data/artefacts",
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="name of the run (rerun it to resume)")
    ] = None,
    text_field: Annotated[
        str | None, typer.Option("--text-field", help="JSON Lines: the text field")
    ] = None,
    doc_field: Annotated[
        str | None, typer.Option("--doc-field", help="JSON Lines: the document id field")
    ] = None,
    section_field: Annotated[
        str | None, typer.Option("--section-field", help="JSON Lines: the section id field")
    ] = None,
    lead_field: Annotated[
        list[str] | None,
        typer.Option("--lead-field", help="JSON Lines: a question/heading field (repeatable)"),
    ] = None,
    no_lead: Annotated[
        bool, typer.Option("--no-lead", help="put no field before a record's text")
    ] = False,
    recipe: Annotated[Path, typer.Option("--recipe", help="the recipe file")] = RECIPE,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="override a config value: SECTION.KEY=VALUE (both runs where both have it), "
            "scorer.SECTION.KEY=VALUE (the in-domain scorer's run alone), adapt.KEY=VALUE (a rule)",
        ),
    ] = None,
    dump_config: Annotated[
        bool, typer.Option("--dump-config", help="print the config it would run, and stop")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="replace a previous adapted model at --out")
    ] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="no progress bars")] = False,
) -> None:
    """Adapt a sentence encoder to your corpus: read the corpus (its fields found from a
    sample), size the recipe by the corpus and the budget, train the in-domain scorer (the
    encoder on the corpus's right contexts), run shard -> embed -> pairs -> label -> train
    (-> evaluate with --eval-dir), and write a sentence-transformers model with its card to
    --out. The config it runs is written under the root and printed by
    --dump-config, so resume, inspect, export and deployments work as for any run."""
    from ctxsim.flows.adapt import dump_config as render
    from ctxsim.flows.console import hide_progress_bars

    if no_progress:
        hide_progress_bars()  # before the plan's probe imports the libraries
    out = out or Path(f"adapted-{Path(model).name}")
    fields = _fields(text_field, doc_field, section_field, lead_field, no_lead)
    target = None if dump_config else (out, overwrite)
    plan = _checked_plan(corpus, model, eval_dir, budget_cpu_hours, root, fields, recipe, set_)
    _check_rest(target, root, run_id)
    command = (
        shlex.join(["ctxsim", "adapt", *sys.argv[2:]])
        if sys.argv[1:2] == ["adapt"]
        else ("ctxsim adapt " + " ".join(corpus))
    )
    if dump_config:
        typer.echo(render(plan, command), nl=False)
        return
    from ctxsim.flows.pipeline import new_run_id

    rid = run_id or new_run_id()
    config_path = _write_and_run(plan, Path(root), rid, command, eval_dir is not None, no_progress)
    _write_model(plan, model, out, overwrite, Path(root), rid, config_path, command)


def _write_and_run(
    plan: AdaptPlan, root: Path, rid: str, command: str, evaluate: bool, no_progress: bool
) -> Path:
    """The configs written under ``root/adapt`` and run: the in-domain scorer's first (its
    model copied to the recipe's embed.model), then the recipe's. Returns the recipe's path."""
    from ctxsim.flows.adapt import dump_config as render
    from ctxsim.store.atomic import write_text_atomic

    config_path = root / "adapt" / f"{rid}.yaml"
    config_path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(config_path, render(plan, command, "recipe"))
    for line in plan.lines():
        typer.echo(line)
    if plan.scorer is not None:
        scorer_path = config_path.with_name(f"{rid}-scorer.yaml")
        write_text_atomic(scorer_path, render(plan, command, "scorer"))
        typer.echo(f"scorer config: {scorer_path}")
    typer.echo(f"config: {config_path}")
    if plan.scorer is not None:
        _run(scorer_path, f"{rid}-scorer", False, no_progress)
        _keep_scorer(root, f"{rid}-scorer", Path(plan.config["embed"]["model"]))
    _run(config_path, rid, evaluate, no_progress)
    return config_path


def _checked_plan(
    corpus: list[str],
    model: str,
    eval_dir: str | None,
    budget_cpu_hours: float | None,
    root: str,
    fields: dict[str, Any],
    recipe: Path,
    set_: list[str] | None,
) -> AdaptPlan:
    """The plan, after every check of the model, the eval dir, the corpus, the budget and the
    --set overrides: bad input is one line (exit 2) before any work."""
    from ctxsim.flows.adapt import adapt_config, eval_dir_problem, model_problem
    from ctxsim.flows.cli_errors import user_errors
    from ctxsim.models.errors import InputError

    with user_errors(2):
        for problem in (model_problem(model), eval_dir and eval_dir_problem(eval_dir)):
            if problem:
                raise InputError(problem)
        sets = list(set_ or [])
        rules = [s for s in sets if s.startswith("adapt.")]
        plan = adapt_config(corpus, model, eval_dir, budget_cpu_hours, root, fields, recipe, rules)
        plan.override([s for s in sets if s not in rules])
        plan.check()
    return plan


def _check_rest(target: tuple[Path, bool] | None, root: str, run_id: str | None) -> None:
    """--out (unless only the config is printed) and --run-id, before any work."""
    from ctxsim.flows.cli_errors import user_errors
    from ctxsim.product.export_target import check_target
    from ctxsim.store.artefacts import safe_name

    with user_errors(2):
        if target is not None:
            check_target(target[0], target[1], Path(root), ADAPT_MARKER, "adapted model")
        if run_id is not None:
            safe_name(run_id, "run id")


def _fields(
    text_field: str | None,
    doc_field: str | None,
    section_field: str | None,
    lead_field: list[str] | None,
    no_lead: bool,
) -> dict[str, Any]:
    """The shard settings the user named (over the ones read from the corpus)."""
    fields: dict[str, Any] = {}
    if text_field:
        fields["text_field"] = text_field
        fields["paragraphs_field"] = text_field
    if doc_field:
        fields["doc_field"] = doc_field
    if section_field:
        fields["section_field"] = section_field
    if lead_field:
        fields["lead_fields"] = list(lead_field)
    if no_lead:
        fields["lead_fields"] = []
    return fields


def _run(config_path: Path, rid: str, evaluate: bool, no_progress: bool) -> None:
    """`ctxsim run` on the written config: its checks, errors, resume line and summary."""
    from ctxsim.flows.cli import run

    run(
        config=config_path,
        root=None,
        set_=None,
        until=None if evaluate else "train",
        run_id=rid,
        no_progress=no_progress,
        quiet=False,
        json_out=False,
        verbose=False,
    )


def _keep_scorer(root: Path, scorer_rid: str, dest: Path) -> None:
    """The scorer run's trained encoder copied to the recipe's embed.model (all or nothing):
    kept when a rerun finds the same weights there, replaced when the scorer run trained other
    ones (e.g. on another device), so embed's fingerprint (by content) follows the scorer."""
    import uuid

    from ctxsim.product.adapt_card import read_json
    from ctxsim.store.artefacts import sha256_file

    record = read_json(root / "runs" / f"{scorer_rid}.json")
    model = Path(record["stages"]["train"]["path"]) / "files" / "model"
    weights = sorted(p.relative_to(model) for p in model.rglob("*.safetensors"))
    if dest.is_dir() and all(
        (dest / w).is_file() and sha256_file(dest / w) == sha256_file(model / w) for w in weights
    ):
        return
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}")
    old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex}")
    try:
        shutil.copytree(model, tmp)
        if dest.is_dir():
            dest.replace(old)
        tmp.replace(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    typer.echo(f"scorer: {dest}")


def _write_model(
    plan: AdaptPlan,
    model: str,
    out: Path,
    overwrite: bool,
    root: Path,
    rid: str,
    config_path: Path,
    command: str,
) -> None:
    """Copy the trained student to ``out`` with its card, all or nothing."""
    from ctxsim.product.adapt_card import dev_rows, read_json, render_card
    from ctxsim.product.export_target import staged_dir

    record = read_json(root / "runs" / f"{rid}.json")
    stages = record["stages"]
    train_dir = Path(stages["train"]["path"])
    label_stats = read_json(Path(stages["label"]["path"]) / "_MANIFEST.json")["stats"]
    train_stats = read_json(train_dir / "_MANIFEST.json")["stats"]
    results = None
    if "evaluate" in stages:
        results = read_json(Path(stages["evaluate"]["path"]) / "files" / "results.json")
    card = render_card(
        model, plan.lines(), command, rid, str(config_path), label_stats, results, train_stats
    )
    with staged_dir(out, overwrite, root, ADAPT_MARKER, "adapted model") as tmp:
        shutil.copytree(train_dir / "files" / "model", tmp, dirs_exist_ok=True)
        (tmp / "README.md").write_text(card)
        meta = {
            "run_id": rid,
            "config": str(config_path),
            "command": command,
            "base_model": model,
            "fingerprints": {s: st["fingerprint"] for s, st in stages.items()},
        }
        (tmp / ADAPT_MARKER).write_text(json.dumps(meta, indent=2, sort_keys=True))
    typer.echo(f"adapted model: {out} (card: {out / 'README.md'})")
    for r in dev_rows(results or {}):
        ci = r["ci"]
        delta = f"{ci['delta']:+.2f} [{ci['ci_low']:+.2f}, {ci['ci_high']:+.2f}]" if ci else "-"
        typer.echo(
            f"  {r['task']} {r['metric']}: {r['download']:.2f} -> {r['adapted']:.2f} {delta}"
        )
    if results is None:
        typer.echo("  no --eval-dir: not measured; the card shows the label diagnostics")
