"""Adapt an encoder to a corpus without labels: ctxsim's labels against the label-free peers.

Every arm is the `train` stage of one run of the same config (``ctxsim run --until train``): the
same label artefact (its sentences are every arm's data), backbone, optimizer steps, batch size
and seed; only ``train.objective`` / ``train.loss`` differ, and each arm may take its own learning
rate (``--arm-set ARM:train.lr=...``, chosen on the dev tasks). Arms: the backbone as downloaded
(``none``), SimCSE and TSDAE on the corpus sentences, TF-IDF labels and ctxsim labels (CoSENT) on
the mined pairs, and ``joint`` (ctxsim CoSENT + SimCSE in one multi-dataset training); two
diagnostics: ``context`` (each sentence's real right context in the corpus as its MNRL positive:
the paper's premise without Eq. 4 scores; ``context-6k`` adds 6,100 sampled corpus sentences,
which cost no labels) and ``teacher-CoSENT`` (the same pairs labelled by a
larger downloaded encoder, all-mpnet-base-v2: what the pairs and the loss teach when the labels
are good). ``--reference-models`` scores downloaded encoders as they are (e.g. the teacher).

Each model is scored on every domain file under ``--eval-dir`` (pair classification AP, retrieval
nDCG@10 / MRR@10: tasks/evaluate/domain.py) and on STSb dev (Spearman x100); each arm gets paired
bootstrap intervals against the reference arms (``none``, ``simcse``, ``tsdae``). CPU-seconds of
labels come from the run's manifests (Eq. 4 = generator + gencontexts + score + label stages;
pair mining apart; TF-IDF and teacher labels from the train stage's metrics), of training from
the trainer.

Usage::

    .venv/bin/python -m bench.archive.bench_domain_adapt --config configs/medquad.yaml \\
        --arms none simcse tsdae tfidf-CoSENT ctxsim-CoSENT joint --name domain_medquad
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    arm_label_cpu,
    arm_similarities,
    intervals,
    label_and_pair_stages,
    summarise,
)
from bench.harness import RESULTS_DIR, write_results

#: arm name -> train overrides
ARMS: dict[str, dict[str, str]] = {
    "none": {"objective": "none"},
    "simcse": {"objective": "simcse"},
    "tsdae": {"objective": "tsdae"},
    "tfidf-CoSENT": {"objective": "tfidf", "loss": "cosent", "label_scale": "none"},
    "ctxsim-CoSENT": {"objective": "ctxsim", "loss": "cosent", "label_scale": "none"},
    "joint": {"objective": "joint", "loss": "cosent", "label_scale": "none"},
    "context": {"objective": "context"},
    # the same, with 6,100 more corpus sentences (no labels needed): each example seen ~once
    "context-6k": {"objective": "context", "context_corpus_sentences": "6100"},
    "teacher-CoSENT": {"objective": "teacher", "loss": "cosent", "label_scale": "none"},
}
REFERENCES = ("none", "simcse", "tsdae")


def arm_overrides(base: list[str], arm: str, extra: list[str]) -> list[str]:
    """An arm's config overrides: the shared ``--set``s, the arm's train keys, its own."""
    return [*base, *(f"train.{k}={v}" for k, v in ARMS[arm].items()), *extra]


def train_arm(config: str, base: list[str], arm: str, prefix: str, extra: list[str]) -> dict:
    """Run the pipeline through `train` for one arm; its record, model and metrics."""
    from ctxsim.flows.pipeline import run_pipeline

    rec = run_pipeline(config, arm_overrides(base, arm, extra), None, "train", f"{prefix}-{arm}")
    train = rec["stages"]["train"]["path"]
    return {
        "record": rec,
        "model": str(Path(train) / "files" / "model"),
        "metrics": json.loads((Path(train) / "files" / "metrics.json").read_text()),
    }


#: the label columns that decide what an arm trains on
_TRAINING_DATA = ["s1", "s2", "label", "split"]


def arm_lr(config: str, base: list[str], arm: str, extra: list[str]) -> float:
    """The learning rate an arm trains with (the config, then --set, then the arm's own)."""
    from ctxsim.flows.config import load_config

    return float(load_config(config, arm_overrides(base, arm, extra)).stages["train"].lr)


def check_reuse(config: str, base: list[str], arm: str, extra: list[str], fp: str) -> Any:
    """The train artefact ``fp`` an arm may be taken from, checked before anything is labelled:
    a safe name, published on the config's root, trained with the arm's train and run settings.
    Else a one-line SystemExit saying why."""
    from ctxsim.flows.config import load_config
    from ctxsim.store.artefacts import ArtefactStore, StoreError, safe_name

    try:
        safe_name(fp, "train fingerprint")
    except StoreError as e:
        raise SystemExit(f"--reuse {arm}={fp}: {e}") from None
    cfg = load_config(config, arm_overrides(base, arm, extra))
    store = ArtefactStore(cfg.run.root, create=False)
    old = store.get("train", fp)
    if old is None:
        raise SystemExit(f"--reuse {arm}={fp}: no published train artefact {fp} under {store.root}")
    params = cfg.stages["train"].model_dump(mode="json")
    if old.manifest["params"] != params:
        diff = sorted(
            k
            for k in params.keys() | old.manifest["params"].keys()
            if params.get(k) != old.manifest["params"].get(k)
        )
        raise SystemExit(f"--reuse {arm}={fp}: trained with other train settings: {diff}")
    run_then = old.manifest["fingerprint_payload"]["run"]
    if run_then != {k: getattr(cfg.run, k) for k in run_then}:
        raise SystemExit(f"--reuse {arm}={fp}: trained with other run settings: {run_then}")
    return old


def reuse_arm(config: str, base: list[str], arm: str, prefix: str, extra: list[str], fp: str):
    """An arm trained before (train artefact ``fp`` of the same root), taken instead of training
    again when it is what training now would give: ``check_reuse``'s settings, and labels whose
    pairs, values and splits equal the current label artefact's (a label version bump that left
    the labels as they were changes every fingerprint, not the data). Else an error saying why."""
    from ctxsim.flows.pipeline import run_pipeline
    from ctxsim.store.artefacts import artefact_at

    old = check_reuse(config, base, arm, extra, fp)
    rec = run_pipeline(config, arm_overrides(base, arm, extra), None, "label", f"{prefix}-{arm}")
    metrics = json.loads((old.files_dir / "metrics.json").read_text())
    now = artefact_at(rec["stages"]["label"]["path"], verify=True)
    then = artefact_at(now.path.parent / metrics["label_run"], verify=True) if now else None
    if then is None or not then.read_table(_TRAINING_DATA).equals(now.read_table(_TRAINING_DATA)):
        raise SystemExit(f"--reuse {arm}={fp}: trained on other labels ({metrics['label_run']})")
    return {"record": rec, "model": str(old.files_dir / "model"), "metrics": metrics}


def label_agreement(label: Any, encoders: list[str]) -> list[dict[str, Any]]:
    """How each way of labelling the training pairs agrees with each encoder's cosine on them
    (Spearman x100; all train pairs, the mined ones, the random ones): the labels a student sees,
    against the teacher that lifted it and the backbone it starts from. ``label``: the label
    stage's Artefact."""
    from scipy.stats import spearmanr

    from ctxsim.models.registry import resolve_model
    from ctxsim.models.training.objectives import teacher_cosine, tfidf_cosine
    from ctxsim.models.training.sentence_encoder import build_model

    t = label.read_table(["s1", "s2", "label", "split", "source"])
    train = np.asarray(t.column("split").to_pylist()) == "train"
    s1 = [x for x, k in zip(t.column("s1").to_pylist(), train, strict=True) if k]
    s2 = [x for x, k in zip(t.column("s2").to_pylist(), train, strict=True) if k]
    source = np.asarray(t.column("source").to_pylist(), dtype=object)[train]
    labels = {
        "ctxsim (Eq. 4)": np.asarray(t.column("label").to_numpy())[train],
        "TF-IDF cosine": tfidf_cosine(s1, s2),
    }
    cos = {
        e: teacher_cosine(s1, s2, build_model(str(resolve_model(e)), 128, "cpu")) for e in encoders
    }
    labels |= {f"{e} cosine": c for e, c in cos.items()}
    rows = []
    for name, lab in labels.items():
        for subset in ("all", *sorted(set(source))):
            m = np.ones(len(lab), bool) if subset == "all" else source == subset
            row: dict[str, Any] = {"labels": name, "pairs": f"{subset} ({int(m.sum())})"}
            for e, c in cos.items():
                row[f"vs {e}"] = round(100 * float(spearmanr(lab[m], c[m])[0]), 1)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/medquad.yaml")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), help=f"of {list(ARMS)}")
    ap.add_argument("--arm-set", action="append", default=[], metavar="ARM:KEY=VALUE")
    ap.add_argument(
        "--reuse",
        action="append",
        default=[],
        metavar="ARM=TRAIN_FINGERPRINT",
        help="take an arm trained before on the same labels and settings (checked) instead",
    )
    ap.add_argument("--with-tfidf", action="store_true", help="TF-IDF 1-2 grams as a row too")
    ap.add_argument(
        "--reference-models",
        nargs="*",
        default=[],
        help="registry names scored as downloaded, a row each (e.g. mpnet, the teacher)",
    )
    ap.add_argument("--run-prefix", default="domain")
    ap.add_argument("--eval-dir", default="../shared/data/domain")
    ap.add_argument("--sts-dir", default="../shared/data/sts")
    ap.add_argument("--sts-sets", nargs="*", default=["STSb.dev"])
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default="data/cache/domain_adapt")
    ap.add_argument("--out-dir", default=str(RESULTS_DIR))
    ap.add_argument("--name", default="domain_medquad")
    args = ap.parse_args(argv)

    from ctxsim.flows.config import load_config
    from ctxsim.flows.prefect_env import configure_prefect
    from ctxsim.store.artefacts import total_cpu_seconds

    configure_prefect(load_config(args.config, args.sets).run.root)
    from ctxsim.readers.domain import discover_domain
    from ctxsim.readers.sts import discover

    arm_sets: dict[str, list[str]] = {}
    for spec in args.arm_set:
        arm, sep, kv = spec.partition(":")
        if not sep or "=" not in kv or arm not in ARMS:
            ap.error(f"--arm-set {spec!r}: use ARM:KEY=VALUE with ARM in {list(ARMS)}")
        arm_sets.setdefault(arm, []).append(kv)
    for arm in args.arms:
        if arm not in ARMS:
            ap.error(f"unknown arm {arm!r}: use {list(ARMS)}")
    reuse: dict[str, str] = {}
    for spec in args.reuse:
        arm, sep, fp = spec.partition("=")
        if not sep or arm not in ARMS:
            ap.error(f"--reuse {spec!r}: use ARM=TRAIN_FINGERPRINT with ARM in {list(ARMS)}")
        reuse[arm] = fp
    for arm, fp in reuse.items():  # every reused arm checked before anything is labelled
        check_reuse(args.config, args.sets, arm, arm_sets.get(arm, []), fp)
    pair_sets, qa_sets = discover_domain(args.eval_dir)
    if not pair_sets and not qa_sets:
        ap.error(f"--eval-dir {args.eval_dir}: no *.pairs.tsv or *_qa.jsonl found")
    sts = [s for s in discover(args.sts_dir) if s.name in set(args.sts_sets)]
    t0 = time.perf_counter()
    cache = Path(args.cache)
    rows: list[dict[str, Any]] = []
    scores: dict[str, dict] = {}
    if args.with_tfidf:
        scores["tfidf 1-2 grams"] = arm_similarities(
            "tfidf", pair_sets, qa_sets, sts, cache, args.max_seq_length
        )
        rows.append(
            {
                "arm": "tfidf 1-2 grams",
                **summarise(scores["tfidf 1-2 grams"], pair_sets, qa_sets, sts),
            }
        )
    for name in args.reference_models:
        from ctxsim.models.registry import resolve_model

        row_name = f"{name} as downloaded"
        scores[row_name] = arm_similarities(
            str(resolve_model(name)), pair_sets, qa_sets, sts, cache, args.max_seq_length
        )
        rows.append({"arm": row_name, **summarise(scores[row_name], pair_sets, qa_sets, sts)})
    label_cpu = pair_cpu = None
    ci_rows: list[dict[str, Any]] = []
    for arm in args.arms:
        extra = arm_sets.get(arm, [])
        if arm in reuse:
            t = reuse_arm(args.config, args.sets, arm, args.run_prefix, extra, reuse[arm])
        else:
            t = train_arm(args.config, args.sets, arm, args.run_prefix, extra)
        stages = t["record"]["stages"]
        if label_cpu is None:
            labelling, pairing = label_and_pair_stages()
            label_cpu = total_cpu_seconds(stages[s]["path"] for s in labelling if s in stages)
            pair_cpu = total_cpu_seconds(stages[s]["path"] for s in pairing if s in stages)
        scores[arm] = arm_similarities(
            t["model"], pair_sets, qa_sets, sts, cache, args.max_seq_length
        )
        m = t["metrics"]
        rows.append(
            {
                "arm": arm,
                **summarise(scores[arm], pair_sets, qa_sets, sts),
                "lr": arm_lr(args.config, args.sets, arm, extra),
                "steps": m.get("steps"),
                "label CPU-s": round(arm_label_cpu(ARMS[arm]["objective"], label_cpu, m), 1),
                "train CPU-s": round(float(m.get("train_cpu_seconds") or 0.0), 1),
                "model": t["model"],
            }
        )
        ci_rows = [
            {
                "arm": a,
                "vs": ref,
                **intervals(
                    scores[a], scores[ref], pair_sets, qa_sets, sts, args.resamples, args.seed
                ),
            }
            for a in scores
            for ref in REFERENCES
            if ref in scores and a != ref and a in ARMS
        ]
        meta = {
            "command": "python -m bench.archive.bench_domain_adapt "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "config": args.config,
            "sets": args.sets,
            "arm_sets": arm_sets,
            "reused": reuse,
            "eval": {p.name: len(p) for p in pair_sets}
            | {q.name: f"{len(q)} questions, {len(q.answers)} answers" for q in qa_sets}
            | {s.name: len(s) for s in sts},
            "label_cpu_seconds (generator+gencontexts+score+label)": round(label_cpu or 0.0, 1),
            "pair_cpu_seconds (shard..pairs)": round(pair_cpu or 0.0, 1),
            "labelled_pairs": stages["label"].get("rows"),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        write_results(
            args.name, rows, meta, args.out_dir, tables={"paired bootstrap 95% CI": ci_rows}
        )
    if args.reference_models and args.arms:
        from ctxsim.store.artefacts import ArtefactStore

        label_path = Path(t["record"]["stages"]["label"]["path"])
        label = ArtefactStore(label_path.parent.parent, create=False).get("label", label_path.name)
        agreement = label_agreement(label, ["minilm", *args.reference_models])
        write_results(
            args.name,
            rows,
            meta,
            args.out_dir,
            tables={
                "paired bootstrap 95% CI": ci_rows,
                "labels on the training pairs (Spearman x100)": agreement,
            },
        )


if __name__ == "__main__":
    main()
