"""The encoder route's recipe on a domain corpus: students of whole-corpus Origin labels against
the encoder as downloaded.

The recipe (configs/medquad.yaml): all-MiniLM-L6-v2 is the contextual model (S(c, s) = cosine),
every paragraph of the corpus a context (`embed`), Origin over all of them in closed form
(`label.contextual: encoder`), pairs = each query's encoder neighbours + random queries, and
MiniLM trained on those labels (CoSENT). Arms, each the `train` stage of one run of the config
with its own overrides (``ctxsim run --until train``), or a model scored as it is:

- ``none``: the backbone as downloaded (the reference of every interval);
- ``closed-form``: the scorer + M^(1/2) (the embed artefact's adapted encoder): Origin with no
  training and no corpus at inference;
- ``student``: the recipe as configured; ``student-angle`` / ``student-mse``: its loss swapped
  (AnglE; the regression loss on the label); ``student-from-adapted``: training starts from the
  adapted encoder (``train.backbone=DIR``);
- ``cosine-labels``: the same pairs labelled by the backbone's own cosine (``objective teacher``,
  ``teacher minilm``): whether the gain is the labels' or the pairs'.

More arms: ``--arm NAME:KEY=VALUE[,KEY=VALUE...]`` (config overrides, the student's otherwise).
Each model is scored on every domain file under ``--eval-dir`` (pair AP, retrieval nDCG@10) and
STSb dev through bench/bench_domain_adapt.py's scorer (cached by model content), with paired
bootstrap intervals against ``none``. CPU-seconds per stage come from the run's manifests.

Usage::

    .venv/bin/python -m bench.archive.bench_encoder_route --config configs/medquad.yaml \\
        --set run.root=/tmp/mq_enc --arms none closed-form student --name encoder_route_medquad
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

#: built-in arms: config overrides of a trained arm, or None for a model scored as it is
ARMS: dict[str, list[str] | None] = {
    "none": None,
    "closed-form": None,
    "student": [],
    "student-angle": ["train.loss=angle"],
    "student-mse": ["train.loss=cosine", "train.label_scale=none"],
    "student-from-adapted": [],  # train.backbone = the adapted encoder, filled at run time
    "cosine-labels": ["train.objective=teacher", "train.teacher=minilm"],
}


def stage_cpu(record: dict[str, Any]) -> dict[str, float]:
    """CPU-seconds of each stage of a run record, from the artefacts' manifests (a reused
    artefact reports what computing it cost)."""
    from bench.harness import manifest_stages

    stages = manifest_stages(record)
    return {k: round(m["cpu_s"], 1) for k, m in stages.items() if m["cpu_s"] is not None}


def adapted_encoder(embed_path: Path, cache: Path) -> Path:
    """The embed artefact's adapted encoder; built into ``cache`` from its scatter when the
    artefact predates it."""
    from ctxsim.models.registry import resolve_model
    from ctxsim.product.adapted import build_adapted_encoder
    from ctxsim.tasks.embed import ADAPTED_DIR, SCATTER_FILE, load_scatter

    own = embed_path / "files" / ADAPTED_DIR
    if (own / "modules.json").exists():
        return own
    out = cache / f"adapted-{embed_path.name}"
    if not (out / "modules.json").exists():
        manifest = json.loads((embed_path / "_MANIFEST.json").read_text())
        m = load_scatter(embed_path / "files" / SCATTER_FILE).matrix(centred=True)
        cache.mkdir(parents=True, exist_ok=True)
        build_adapted_encoder(resolve_model(manifest["params"]["model"]), m, out)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/medquad.yaml")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override")
    ap.add_argument("--arms", nargs="+", default=["none", "closed-form", "student"])
    ap.add_argument("--arm", dest="extra_arms", action="append", default=[], metavar="NAME:K=V,..")
    ap.add_argument("--run-prefix", default="encroute")
    ap.add_argument("--eval-dir", default="../shared/data/domain")
    ap.add_argument("--sts-dir", default="../shared/data/sts")
    ap.add_argument("--sts-sets", nargs="*", default=["STSb.dev"])
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default="data/cache/encoder_route")
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--name", default="encoder_route_medquad")
    args = ap.parse_args(argv)

    arms = dict(ARMS)
    for spec in args.extra_arms:
        name, sep, kvs = spec.partition(":")
        if not sep or not all("=" in kv for kv in kvs.split(",")):
            ap.error(f"--arm {spec!r}: use NAME:KEY=VALUE[,KEY=VALUE...]")
        arms[name] = kvs.split(",")
        if name not in args.arms:
            args.arms.append(name)
    for arm in args.arms:
        if arm not in arms:
            ap.error(f"unknown arm {arm!r}: use {list(arms)} or --arm NAME:KEY=VALUE")

    from bench.common import arm_similarities, intervals, summarise
    from bench.harness import RESULTS_DIR, write_results
    from ctxsim.flows.config import load_config
    from ctxsim.flows.pipeline import execute
    from ctxsim.models.registry import resolve_model
    from ctxsim.readers.domain import discover_domain
    from ctxsim.readers.sts import discover

    cfg = load_config(args.config, args.sets)

    def run_until(stage: str, sets: list[str], run_id: str) -> dict[str, Any]:
        """The config's stages through ``stage``, in this process (no Prefect server: a bench
        beside a running pipeline on a busy machine need not start one); reuses artefacts."""
        return execute(
            load_config(args.config, sets), until=stage, run_id=run_id, use_prefect=False
        )

    pair_sets, qa_sets = discover_domain(args.eval_dir)
    if not pair_sets and not qa_sets:
        ap.error(f"--eval-dir {args.eval_dir}: no *.pairs.tsv or *_qa.jsonl found")
    sts = [s for s in discover(args.sts_dir) if s.name in set(args.sts_sets)]
    cache = Path(args.cache)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    scores: dict[str, dict] = {}
    cpu: dict[str, dict[str, float]] = {}
    backbone = cfg.stages["train"].backbone
    adapted: Path | None = None
    for arm in args.arms:
        overrides = arms[arm]
        metrics: dict[str, Any] = {}
        if adapted is None and arm in ("closed-form", "student-from-adapted"):
            rec = run_until("embed", args.sets, f"{args.run_prefix}-embed")
            adapted = adapted_encoder(Path(rec["stages"]["embed"]["path"]), cache / "models")
        if overrides is None:
            model = str(resolve_model(backbone)) if arm == "none" else str(adapted)
        else:
            if arm == "student-from-adapted":
                overrides = [f"train.backbone={adapted}"]
            sets = [*args.sets, *overrides]
            rec = run_until("train", sets, f"{args.run_prefix}-{arm}")
            cpu[arm] = stage_cpu(rec)
            train = Path(rec["stages"]["train"]["path"])
            model = str(train / "files" / "model")
            metrics = json.loads((train / "files" / "metrics.json").read_text())
        scores[arm] = arm_similarities(
            model, pair_sets, qa_sets, sts, cache / "scores", args.max_seq_length
        )
        rows.append(
            {
                "arm": arm,
                **summarise(scores[arm], pair_sets, qa_sets, sts),
                "overrides": " ".join(overrides or []) or "-",
                "steps": metrics.get("steps", 0),
                "train CPU-s": round(float(metrics.get("train_cpu_seconds") or 0.0), 1),
                "model": model,
            }
        )
        ci_rows = [
            {
                "arm": a,
                "vs": "none",
                **intervals(
                    scores[a], scores["none"], pair_sets, qa_sets, sts, args.resamples, args.seed
                ),
            }
            for a in scores
            if a != "none" and "none" in scores
        ]
        cpu_rows = [{"arm": a, **by_stage} for a, by_stage in cpu.items()]
        meta = {
            "command": "python -m bench.archive.bench_encoder_route "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "config": args.config,
            "sets": args.sets,
            "adapted_encoder": str(adapted) if adapted else None,
            "eval": {p.name: len(p) for p in pair_sets}
            | {q.name: f"{len(q)} questions, {len(q.answers)} answers" for q in qa_sets}
            | {s.name: len(s) for s in sts},
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        write_results(
            args.name,
            rows,
            meta,
            args.out_dir or RESULTS_DIR,
            tables={
                "paired bootstrap 95% CI against the download": ci_rows,
                "CPU-seconds by stage (manifests)": cpu_rows,
            },
        )
        print(f"{arm}: {rows[-1]}", flush=True)


if __name__ == "__main__":
    main()
