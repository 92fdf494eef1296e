"""The adapt recipe's arms on the dev tasks, paired: finished runs (``ctxsim adapt`` or ``ctxsim
run``) named ROOT:RUN_ID, each run's trained model scored on every dev task under --eval-dir
(the evaluators of readers/evaluators through bench/common.py), with paired bootstrap intervals
against the encoder each run started from (the --reference of that name; LABEL=DIR scores a model
folder that is no run's under a label of its own; --merge the weights of two models interpolated)
and between arms
(--vs A=B: the recipe against the same run with the `context` objective alone, with the labels
alone, ...; --vs A1,A2,A3=B1,B2,B3: the mean over training seeds, each seed paired with its
own), each run's CPU-seconds by stage from its manifests (and all-in from a
``/usr/bin/time -v`` file beside its log, if any), and how far two arms' labels agree
(--agree A=B: Spearman on the pairs both labelled).

    python -m bench.bench_adapt --eval-dir ../shared/data/domain \\
        --arm recipe=/tmp/e55/root:econ-recipe --arm context=/tmp/e55/root:econ-context \\
        --vs recipe=context --reference minilm --name adapt_recipe_two_fields
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _record(spec: str) -> tuple[Path, dict[str, Any]]:
    root, run_id = spec.rsplit(":", 1)
    return Path(root), json.loads((Path(root) / "runs" / f"{run_id}.json").read_text())


def sts_sets(root: Path, names: list[str]) -> list[Any]:
    """The STS sets named (``STSb.dev``) under ``root``: one line if one is not there."""
    from ctxsim.readers.evaluators import StsEvaluator

    if not names:
        return []
    found = {e.name: e for e in StsEvaluator.discover(root)}
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"--sts {', '.join(missing)}: not under {root} (it has {sorted(found)})")
    return [found[n] for n in names]


def stage_cpu(record: dict[str, Any]) -> dict[str, float]:
    """CPU-seconds by stage from each stage artefact's manifest (reused stages included: the
    cost of the run as if alone)."""
    return {name: round(_artefact(record, name).cpu_seconds or 0.0, 1) for name in record["stages"]}


def scorer_cpu(spec: str, record: dict[str, Any]) -> dict[str, float]:
    """CPU-seconds by stage of the in-domain scorer's run ``ctxsim adapt`` made before the
    recipe's (``RUN-scorer``), for the stages it did not share with the recipe's run (its own
    train; embed and label where it ran them), as ``scorer STAGE``; none without such a run."""
    root, run_id = spec.rsplit(":", 1)
    path = Path(root) / "runs" / f"{run_id}-scorer.json"
    if not path.exists():
        return {}
    scorer = json.loads(path.read_text())
    own = {
        name
        for name, st in scorer["stages"].items()
        if record["stages"].get(name, {}).get("fingerprint") != st.get("fingerprint")
    }
    return {f"scorer {k}": v for k, v in stage_cpu(scorer).items() if k in own}


def _artefact(record: dict[str, Any], stage: str) -> Any:
    """The run's ``stage`` artefact, read through the store's own type (its manifest's parts)."""
    from ctxsim.store.artefacts import Artefact

    st = record["stages"][stage]
    path = Path(st["path"])
    manifest = json.loads((path / "_MANIFEST.json").read_text())
    return Artefact(stage, str(st.get("fingerprint", path.name)), path, manifest)


def all_in_cpu(time_file: Path) -> float | None:
    """User + system seconds of a ``/usr/bin/time -v`` file."""
    if not time_file.exists():
        return None
    fields = dict(
        line.strip().split(": ", 1) for line in time_file.read_text().splitlines() if ": " in line
    )
    try:
        return float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
    except KeyError:
        return None


def label_agreement(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Spearman (x100) and the largest gap between two runs' labels on the pairs both labelled
    (by pair_id): whether a cheaper setting (bf16 embeddings, ...) changes what train learns."""
    import numpy as np
    from scipy.stats import spearmanr

    def labels(record: dict[str, Any]) -> dict[str, float]:
        table = _artefact(record, "label").read_table(["pair_id", "label"])
        return dict(zip(table["pair_id"].to_pylist(), table["label"].to_pylist(), strict=True))

    la, lb = labels(a), labels(b)
    both = sorted(la.keys() & lb.keys())
    x, y = np.array([la[k] for k in both]), np.array([lb[k] for k in both])
    rho = float(spearmanr(x, y)[0]) if len(both) > 1 else float("nan")
    return {
        "pairs in both": len(both),
        "label Spearman x100": round(100 * rho, 4),
        "max |label gap|": round(float(np.abs(x - y).max()), 5) if both else None,
    }


def main(argv: list[str] | None = None) -> None:
    from bench.common import arm_similarities, intervals, merged_model, summarise
    from bench.harness import write_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval-dir", required=True, help="folder with domain/ dev tasks or them")
    ap.add_argument("--arm", action="append", default=[], help="NAME=ROOT:RUN_ID")
    ap.add_argument(
        "--reference", action="append", default=[], help="NAME (registry), DIR or LABEL=DIR"
    )
    ap.add_argument(
        "--vs",
        action="append",
        default=[],
        help="A=B: paired intervals of A - B; A1,A2,A3=B1,B2,B3: of the mean over training "
        "seeds (the same items for every seed)",
    )
    ap.add_argument(
        "--merge",
        action="append",
        default=[],
        help="LABEL=START:END:W scores (1-W)*START + W*END, each a registry name, a model "
        "DIR, or the label of an --arm or an earlier --merge (a soup of two seeds' runs: "
        "A=s0:s1:0.5; of three: B=A:s2:0.3333)",
    )
    ap.add_argument(
        "--sts",
        action="append",
        default=[],
        help="an STS set scored beside them (STSb.dev; one training seed an arm), under --sts-dir",
    )
    ap.add_argument(
        "--resample-seeds",
        action="store_true",
        help="each A1,A2,..=B1,B2,.. interval also as a two-stage bootstrap (seeds, then items; "
        "seed k of A paired with seed k of B): a second row, its vs marked 'seeds resampled'",
    )
    ap.add_argument("--sts-dir", default=None, help="the STS sets' folder (default: ../sts)")
    ap.add_argument("--time", action="append", default=[], help="NAME=/usr/bin/time -v file")
    ap.add_argument("--agree", action="append", default=[], help="A=B: label agreement of A, B")
    ap.add_argument("--cache", default="/tmp/bench_adapt_cache")
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--name", default="adapt_recipe_two_fields")
    ap.add_argument("--out-dir", default=None, help="default bench/results")
    args = ap.parse_args(argv)

    from ctxsim.models.registry import resolve_model
    from ctxsim.readers.evaluators import discover_eval_dir

    sets = [e for e in discover_eval_dir(args.eval_dir) if e.format in ("pairs", "qa")]
    sets += sts_sets(Path(args.sts_dir or Path(args.eval_dir).parent / "sts"), args.sts)
    times = dict(kv.split("=", 1) for kv in args.time)
    cache = Path(args.cache)
    scores: dict[str, dict] = {}
    rows, cost = [], []
    backbone: dict[str, str] = {}  # arm -> the model it started from (its reference)
    records: dict[str, dict[str, Any]] = {}
    references = []
    model_dirs: dict[str, str] = {}  # arm or merge -> its model folder
    for kv in args.reference:
        name, model = kv.split("=", 1) if "=" in kv else (kv, kv)
        scores[name] = arm_similarities(str(resolve_model(model)), sets, cache, args.max_seq_length)
        references.append(name)
        run = "as downloaded" if name == model else model
        rows.append({"arm": name, "run": run} | summarise(scores[name], sets))
    for kv in args.arm:
        name, spec = kv.split("=", 1)
        _, record = _record(spec)
        records[name] = record
        model_dirs[name] = str(Path(record["stages"]["train"]["path"]) / "files" / "model")
        scores[name] = arm_similarities(model_dirs[name], sets, cache, args.max_seq_length)
        backbone[name] = str(record["config"].get("train", {}).get("backbone", ""))
        rows.append({"arm": name, "run": spec} | summarise(scores[name], sets))
        cpu = stage_cpu(record) | scorer_cpu(spec, record)
        total = all_in_cpu(Path(times[name])) if name in times else None
        cost.append({"arm": name, "all-in CPU-s": total} | cpu)
    for kv in args.merge:  # START and END: a model, or the label of an arm or merge above
        name, spec = kv.split("=", 1)
        start, end, weight = spec.rsplit(":", 2)
        ends = [model_dirs.get(x) or str(resolve_model(x)) for x in (start, end)]
        model_dirs[name] = str(merged_model(*ends, float(weight), cache))
        scores[name] = arm_similarities(model_dirs[name], sets, cache, args.max_seq_length)
        rows.append({"arm": name, "run": f"merged {spec}"} | summarise(scores[name], sets))
    ci_rows = []
    pairs = [v.split("=", 1) for v in args.vs]
    pairs += [(a, backbone[a]) for a in backbone if backbone[a] in references]
    for a, b in pairs:
        seeds_a, seeds_b = ([scores[x] for x in side.split(",")] for side in (a, b))
        ci_rows.append({"arm": a, "vs": b} | intervals(seeds_a, seeds_b, sets, args.resamples, 0))
        if args.resample_seeds and len(seeds_a) > 1:
            two_stage = intervals(seeds_a, seeds_b, sets, args.resamples, 0, resample_seeds=True)
            ci_rows.append({"arm": a, "vs": f"{b} (seeds resampled)"} | two_stage)
    meta = {
        "command": "python -m bench.bench_adapt "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "eval": {ev.name: ev.describe() for ev in sets},
        "note": "paired bootstrap 95% intervals of A - B on the same items (AP for pairs, "
        "nDCG@10 for QA, Spearman for STS)",
    }
    agree = [
        {"arm": a, "vs": b} | label_agreement(records[a], records[b])
        for a, b in (v.split("=", 1) for v in args.agree)
    ]
    tables = {"paired intervals": ci_rows, "cost": cost, "label agreement": agree}
    write_results(args.name, rows, meta, args.out_dir, tables)


if __name__ == "__main__":
    main()
