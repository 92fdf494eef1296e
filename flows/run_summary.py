"""The summary `ctxsim run` prints at the end: what the run made and what to do next.

A first run (`make run`) ends here, so it says in a few lines how many labelled pairs were made,
where the labels, the trained model and its report are, and the three commands that use them
(inspect, export, explain). A surrogate that ends below its backbone is explained in one line:
with the quickstart's tiny models that says nothing about the labels.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ctxsim.product.card import explainable

DEFAULT_CONFIG = "configs/quickstart.yaml"
#: the train backbone of the quickstart: a small encoder initialised at random (tasks/train/)
TINY = "tiny-random"
#: the config whose surrogate shows what the labels teach (docs/results.md)
SHOWCASE_CONFIG = "configs/books_generated.yaml"


def _first_pair(label_dir: Path) -> tuple[str, str] | None:
    """The first labelled pair's two sentences, for a ready-to-run `ctxsim explain`."""
    import pyarrow.parquet as pq

    for part in sorted(label_dir.glob("part-*.parquet")):
        table = pq.read_table(part, columns=["s1", "s2"])
        if table.num_rows:
            return str(table["s1"][0]), str(table["s2"][0])
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def below_backbone_note(metrics: dict[str, Any]) -> str | None:
    """One line when the surrogate's best dev score is below its untrained backbone's."""
    if metrics.get("beats_backbone") is not False:
        return None
    dev = metrics.get("dev_set") or "dev"
    best, before = metrics.get("best_dev_spearman"), metrics.get("backbone_dev_spearman")
    scores = f" ({best:.1f} vs {before:.1f} on {dev})" if best is not None and before else ""
    if metrics.get("backbone") == TINY:
        return (
            f"Note: the model ends below its backbone{scores}: the quickstart's encoder is tiny, "
            f"randomly initialised and trained for {metrics.get('steps', 0)} steps on "
            f"{metrics.get('n_train_pairs', 0):,} pairs, too little to show what the labels "
            f"teach; {SHOWCASE_CONFIG} with the gemma-270m settings in its train section shows "
            "it (docs/results.md)."
        )
    return (
        f"Note: the model ends below its backbone{scores}: the labels or the learning rate "
        "hurt this backbone; choose train.lr and train.loss on STSb dev (docs/evaluation.md)."
    )


def summary_lines(
    record: dict[str, Any], config: str | Path | None = None, root: str | None = None
) -> list[str]:
    """The end-of-run summary of a completed run that labelled pairs; [] otherwise."""
    stages = record.get("stages", {})
    label = stages.get("label")
    if record.get("status") != "completed" or not label:
        return []
    run_id = record["run_id"]
    opts = ""
    if config is not None and Path(config).as_posix() != DEFAULT_CONFIG:
        opts += f" --config {shlex.quote(str(config))}"
    if root:
        opts += f" --root {shlex.quote(str(root))}"
    lines = ["", "Made by this run:", f"  {label['rows']:,} labelled pairs   {label['path']}"]
    note = None
    train = stages.get("train")
    if train:
        files = Path(train["path"]) / "files"
        lines.append(f"  trained model        {files / 'model'}")
        note = below_backbone_note(_read_json(files / "metrics.json"))
    evaluate = stages.get("evaluate")
    if evaluate:
        files = Path(evaluate["path"]) / "files"
        report = files / "report.md"
        lines.append(f"  evaluation report    {report if report.exists() else files}")
    pair = _first_pair(Path(label["path"]))
    s1, s2 = (shlex.quote(s) for s in pair) if pair else ("'SENTENCE 1'", "'SENTENCE 2'")
    lines += [
        "Next:",
        f"  ctxsim inspect label --run {run_id}{opts} --limit 5    # the labelled pairs",
        f"  ctxsim export {run_id}{opts} --out exports/{run_id}    # a dataset with its card",
    ]
    label_cfg = (record.get("config") or {}).get("label") or {}
    form = (label_cfg.get("encoder") or {}).get("form", label_cfg.get("encoder_form"))
    if explainable(stages, form):
        args = f"{s1} {s2} --run {run_id}{opts}"
        if pair and any(s.startswith("-") for s in pair):  # a list item: not an option
            args = f"--run {run_id}{opts} -- {s1} {s2}"
        lines.append(f"  ctxsim explain {args}    # why a pair got its label")
    if note:
        lines.append(note)
    return lines
