"""`ctxsim evaluate` and `ctxsim data download`: a trained model against the evaluation sets,
and the official evaluation data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ctxsim.flows.cli_errors import fail
from ctxsim.flows.cli_options import VerboseOpt
from ctxsim.store.errors import InputError


def _fail(msg: str | BaseException, code: int = 2) -> None:
    """One line on stderr, exit ``code`` (2: the user's input)."""
    fail(msg, code)


def register(app: typer.Typer) -> None:
    """Add `evaluate` and the `data` group to the main CLI."""
    app.command(
        epilog="Example: ctxsim evaluate data/artefacts/train/<fp>/files/model "
        "--eval-dir ../shared/data/sts --ists-dir ../shared/data/ists2016 --json-out eval.json "
        "--baseline backbone=minilm --baseline dynamax=wordllama"
    )(evaluate)
    data_app = typer.Typer(
        help="Evaluation data: download the official releases (connected machines)."
    )
    app.add_typer(data_app, name="data")
    data_app.command("download", epilog="Example: ctxsim data download sts data/eval/sts")(
        data_download
    )


def evaluate(
    model: Annotated[str, typer.Argument(help="sentence-transformers model dir or registry name")],
    sts_dir: Annotated[
        Path | None,
        typer.Option(
            "--eval-dir",
            "--sts-dir",
            help="folder whose evaluation files are all found and scored: STS sets, pair "
            "classification (*.pairs.tsv), question-answer retrieval (*_qa.jsonl) and every "
            "other task format of readers/evaluators (--sts-dir: its old name)",
        ),
    ] = None,
    ists_dir: Annotated[Path | None, typer.Option("--ists-dir", help="iSTS 2016 gold")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out-dir", help="report.md and plots")] = None,
    max_pairs: Annotated[int | None, typer.Option("--max-pairs", help="per subset")] = None,
    device: Annotated[str, typer.Option("--device")] = "auto",
    json_out: Annotated[Path | None, typer.Option("--json-out", help="write the JSON here")] = None,
    baseline: Annotated[
        list[str] | None,
        typer.Option(
            "--baseline",
            help="NAME=MODEL, repeatable: another system on the same pairs, with paired BCa "
            "intervals against the model (dynamax=wordllama for the word-vector baseline)",
        ),
    ] = None,
    bf16: Annotated[
        bool,
        typer.Option("--bf16", help="encode in bf16 on a CPU with bf16 units (CUDA always does)"),
    ] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="keep the baselines' encodings and STS scores here and read them back on "
            "later calls (a run's stage keeps them in ROOT/_cache/evaluate)",
        ),
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """STS (Spearman/Pearson, "all" and "mean"), RCMD, hard splits, iSTS F1, and the domain
    tasks (pair classification AP/accuracy/F1, retrieval nDCG@10/MRR@10/Recall@100) for one
    model, with paired bootstrap intervals against each --baseline."""
    from ctxsim.flows.cli_errors import set_verbose, user_errors
    from ctxsim.flows.preflight import check_eval_dirs, check_output_dir, check_output_file
    from ctxsim.store.stage import resolve_device
    from ctxsim.tasks.evaluate import evaluate_model

    set_verbose(verbose)
    if sts_dir is None and ists_dir is None:
        _fail("give --eval-dir and/or --ists-dir (ctxsim data download sts DIR fetches STS sets)")
    baselines: dict[str, str | None] = {}
    given: dict[str, tuple[str, str]] = {}
    for spec in baseline or []:
        name, sep, ref = spec.partition("=")
        if not sep or not name or not ref:
            _fail(f"--baseline {spec!r}: use NAME=MODEL, e.g. backbone=gemma-270m")
        if name == "surrogate" or name in given:
            _fail(f"--baseline {spec!r}: the name {name!r} is taken")
        given[name] = (spec, ref)
    with user_errors(2):  # before loading any model: data, outputs, model names, packages
        check_eval_dirs(sts_dir, ists_dir)
        if out_dir is not None:
            check_output_dir(out_dir, "--out-dir")
        if json_out is not None:
            check_output_file(json_out, "--json-out")
        for name, (spec, ref) in given.items():
            keep_as_is = name == "dynamax" and ref == "wordllama"
            baselines[name] = ref if keep_as_is else _model_path(ref, f"--baseline {spec}")
        model_dir = _model_path(model, "MODEL")
    with user_errors(1):
        result = evaluate_model(
            model_dir,
            sts_dir,
            ists_dir,
            baselines=baselines,
            device=resolve_device(device),
            out_dir=out_dir,
            max_pairs_per_subset=max_pairs,
            keep_result_on_write_error=True,
            bf16_cpu=bf16,
            encoding_cache=cache_dir,
        )
    text = json.dumps(result, indent=2, default=str)
    typer.echo(text)  # first: the figures reach the terminal whatever happens to the file
    if json_out:
        try:
            json_out.write_text(text)
        except OSError as e:
            _fail(f"--json-out {json_out}: not written ({e.strerror or e}); the result is above", 1)
    for warning in result.get("warnings", []):
        if warning.startswith("--out-dir"):
            _fail(warning, 1)


def _model_path(model: str, what: str = "model") -> str:
    """A model directory as given, or a registry short name resolved to its local directory;
    any other name is an error naming the argument (``what``) and the registered names."""
    if Path(model).exists():
        return model
    from ctxsim.models.registry import model_name_problem, resolve_model

    problem = model_name_problem(model)
    if problem:
        raise InputError(f"{what}: {problem}")
    return str(resolve_model(model))


def data_download(
    kind: Annotated[str, typer.Argument(help="sts or ists")],
    dest: Annotated[Path, typer.Argument(help="destination directory")],
    url: Annotated[str | None, typer.Option("--url", help="a mirror of the archive")] = None,
) -> None:
    """Fetch, verify (sha256), unpack and lay out STS or iSTS as uniform TSV files."""
    import urllib.error

    from ctxsim.flows.cli_errors import user_errors
    from ctxsim.readers.sts import download

    if kind not in ("sts", "ists"):
        _fail("kind must be 'sts' or 'ists'")
    try:
        with user_errors(1):  # a pin mismatch, a bad archive or URL: one line
            manifest = download(kind, dest, url=url)
    except urllib.error.URLError as e:
        _fail(f"cannot fetch {url or kind + ' sources'}: {e.reason}", 1)
    typer.echo(json.dumps(manifest, indent=2, default=str))
