"""Do ctxsim's labels teach? The surrogate trained on them against the cheap peers.

Every arm is the `train` stage of one run (``ctxsim run --until train``), so the pipeline's own
code trains it and the artefact store reuses what is done: the same label artefact (same pairs and
sentences), backbone, optimizer steps, batch size and seed; only ``train.objective`` /
``train.loss`` / ``train.label_scale`` differ (``simcse+ctxsim`` first trains SimCSE, then ctxsim's
labels from that model). Each trained model is then scored on every STS set found under
``--sts-dir`` (Spearman x100, "all" convention; ``--max-pairs`` caps each subset with a seeded
sample), and compared pairwise with paired BCa 95% intervals (models.metrics.bootstrap_diff_ci)
against the reference arms. CPU-seconds: labels from the run's manifests (Eq. 4 = generator +
gencontexts + score + label stages; pair mining, shared by ctxsim and TF-IDF labels, apart),
training from the trainer (``train_cpu_seconds``: every thread, the STSb-dev evaluations included).

Usage::

    .venv/bin/python -m bench.archive.bench_surrogate_compare --config configs/books.yaml \\
        --set queries.n_corpus=100 --set generator.n_eval=5 --backbone minilm --max-pairs 500
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import arm_label_cpu, label_and_pair_stages
from bench.harness import RESULTS_DIR, write_results
from ctxsim.models.training.objectives import get_objective
from ctxsim.store.artefacts import total_cpu_seconds

#: arm name -> train overrides. ctxsim-L2 is the paper's literal target (L2 on the raw labels).
ARMS: dict[str, dict[str, str]] = {
    "none": {"objective": "none"},
    "simcse": {"objective": "simcse"},
    "tfidf-L2-rank": {"objective": "tfidf", "loss": "cosine", "label_scale": "rank"},
    "tfidf-CoSENT": {"objective": "tfidf", "loss": "cosent", "label_scale": "none"},
    "ctxsim-L2": {"objective": "ctxsim", "loss": "cosine", "label_scale": "none"},
    "ctxsim-L2-rank": {"objective": "ctxsim", "loss": "cosine", "label_scale": "rank"},
    "ctxsim-CoSENT": {"objective": "ctxsim", "loss": "cosent", "label_scale": "none"},
    "ctxsim-AnglE": {"objective": "ctxsim", "loss": "angle", "label_scale": "none"},
}
#: every arm gets paired CIs against these (the paper's loss, the label-free peer, the backbone)
REFERENCES = ("ctxsim-L2", "simcse", "none")


def train_arm(
    config: str,
    base: list[str],
    backbone: str,
    arm: str,
    run_prefix: str,
    arm_sets: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Run the pipeline through `train` for one arm; its record and metrics.json.
    ``arm_sets``: overrides for one arm only (its learning rate chosen on dev, say); in
    ``simcse+ARM`` the SimCSE stage takes simcse's and the second stage ARM's."""
    from ctxsim.flows.pipeline import run_pipeline

    arm_sets = arm_sets or {}
    sets = [*base, f"train.backbone={backbone}"]
    first = arm
    if arm.startswith("simcse+"):  # SimCSE, then the labelled arm from SimCSE's model
        first = arm.split("+", 1)[1]
        pre = train_arm(config, base, backbone, "simcse", run_prefix, arm_sets)
        sets[-1] = f"train.backbone={pre['model']}"
    sets += [f"train.{k}={v}" for k, v in ARMS[first].items()]
    sets += arm_sets.get(first, [])
    run_id = f"{run_prefix}-{backbone}-{arm}".replace("+", "-then-")
    rec = run_pipeline(config, sets, None, "train", run_id)
    train = rec["stages"]["train"]["path"]
    metrics = json.loads((Path(train) / "files" / "metrics.json").read_text())
    if arm.startswith("simcse+"):
        metrics["train_cpu_seconds"] += pre["metrics"]["train_cpu_seconds"]
        metrics["steps"] += pre["metrics"]["steps"]
    return {
        "record": rec,
        "model": str(Path(train) / "files" / "model"),
        "metrics": metrics,
        "label_path": rec["stages"]["label"]["path"],
    }


def model_similarities(
    model_dir: str, sets: list, cache: Path, max_seq_length: int, tag: str = ""
) -> dict[str, np.ndarray]:
    """Cosine of every pair of every set (cached per model directory and set sizes)."""
    from ctxsim.tasks.evaluate import load_st, pair_similarities

    key = f"{Path(model_dir).parent.parent.name}-{sum(len(s) for s in sets)}"
    if tag:  # a subset of the sets (--only): name it so it cannot pass for another subset
        key += f"-{zlib.crc32(tag.encode()):08x}"
    path = cache / f"{key}.npz"
    if path.exists():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    model = load_st(model_dir, "cpu", max_seq_length)
    out = {s.name: pair_similarities(model, s.s1, s.s2, 64, ("cosine",))["cosine"] for s in sets}
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    return out


def grouped(sets: list, preds: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Predictions and gold pooled per dataset ("all" convention: a year of STS12-16 is one
    correlation over its subsets; other sets stand alone)."""
    from ctxsim.readers.sts import dataset_key

    out: dict[str, tuple[list, list]] = {}
    for s in sets:
        p, g = out.setdefault(dataset_key(s), ([], []))
        p.append(preds[s.name])
        g.append(np.asarray(s.gold, float))
    return {k: (np.concatenate(p), np.concatenate(g)) for k, (p, g) in out.items()}


def label_plot(label_path: str, out: Path) -> dict[str, Any]:
    """Histogram of the train labels: Eq. 4 raw, after rank normalisation, and TF-IDF cosine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctxsim.models.contextual.origin import rescale_labels
    from ctxsim.models.training.objectives import tfidf_cosine

    t = pa.concat_tables(
        [pq.read_table(f) for f in sorted(Path(label_path).glob("part-*.parquet"))]
    )
    split = np.asarray(t.column("split").to_pylist(), dtype=object)
    lab = np.asarray(t.column("label").to_pylist(), dtype=float)
    m = (split == "train") & np.isfinite(lab)
    raw = lab[m]
    s1 = [x for x, k in zip(t.column("s1").to_pylist(), m, strict=True) if k]
    s2 = [x for x, k in zip(t.column("s2").to_pylist(), m, strict=True) if k]
    tf = tfidf_cosine(s1, s2)
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.2))
    ax[0].hist(raw, bins=40)
    ax[0].set_title(f"Eq. 4 labels (n={len(raw)})")
    ax[1].hist(rescale_labels(raw, "rank"), bins=20)
    ax[1].set_title("after rank normalisation")
    ax[2].hist(tf, bins=40)
    ax[2].set_title("TF-IDF cosine, same pairs")
    for a in ax:
        a.set_xlabel("label")
    ax[0].set_ylabel("pairs")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    from scipy.stats import spearmanr

    return {
        "n_train_pairs": int(len(raw)),
        "eq4_min": float(raw.min()),
        "eq4_max": float(raw.max()),
        "eq4_mean": float(raw.mean()),
        "eq4_std": float(raw.std()),
        "tfidf_mean": float(tf.mean()),
        "tfidf_std": float(tf.std()),
        "spearman_eq4_vs_tfidf": float(spearmanr(raw, tf)[0]),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/books.yaml")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override")
    ap.add_argument("--backbone", default="minilm")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), help=f"of {list(ARMS)}, simcse+ARM")
    ap.add_argument(
        "--arm-set",
        action="append",
        default=[],
        metavar="ARM:KEY=VALUE",
        help="an override for one arm only, e.g. simcse:train.lr=5e-5 (lr chosen per arm on dev)",
    )
    ap.add_argument("--run-prefix", default="cmp")
    ap.add_argument("--sts-dir", default="../shared/data/sts")
    ap.add_argument("--max-pairs", type=int, default=None, help="seeded sample per subset")
    ap.add_argument(
        "--only",
        nargs="+",
        default=None,
        help="evaluate only these sets (STS12 ... for a year, STSb.dev ...): an lr search on dev",
    )
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default="data/cache/surrogate_compare")
    ap.add_argument("--out-dir", default=str(RESULTS_DIR))
    ap.add_argument("--name", default=None, help="result name (default surrogate_compare_BACKBONE)")
    args = ap.parse_args(argv)

    from ctxsim.flows.config import load_config
    from ctxsim.flows.prefect_env import configure_prefect

    configure_prefect(load_config(args.config, args.sets).run.root)  # before prefect is imported
    from ctxsim.models.evaluation import metrics as M
    from ctxsim.readers.sts import dataset_key, discover, sample_pairs
    from ctxsim.tasks.evaluate import SEVEN

    for arm in args.arms:
        if arm.split("+", 1)[-1] not in ARMS or ("+" in arm and not arm.startswith("simcse+")):
            ap.error(f"unknown arm {arm!r}: use {list(ARMS)} or simcse+ARM")
    arm_sets: dict[str, list[str]] = {}
    for spec in args.arm_set:
        arm, sep, kv = spec.partition(":")
        if not sep or "=" not in kv or arm not in ARMS:
            ap.error(f"--arm-set {spec!r}: use ARM:KEY=VALUE with ARM in {list(ARMS)}")
        arm_sets.setdefault(arm, []).append(kv)
    t0 = time.perf_counter()
    found = discover(args.sts_dir)
    if args.only:
        missing = set(args.only) - {dataset_key(s) for s in found}
        if missing:
            ap.error(f"--only {sorted(missing)}: not found under {args.sts_dir}")
        found = [s for s in found if dataset_key(s) in args.only]
    sets = [sample_pairs(s, args.max_pairs, args.seed) for s in found]
    cache = Path(args.cache)
    name = args.name or f"surrogate_compare_{args.backbone}"
    plot = Path(args.out_dir) / f"{name}_labels.png"
    plot.parent.mkdir(parents=True, exist_ok=True)
    trained: dict[str, dict[str, Any]] = {}
    preds: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    cis: dict[tuple[str, str, str], dict[str, Any]] = {}
    label_stats: dict[str, Any] = {}
    for arm in args.arms:  # the report is rewritten after every arm: a cut run keeps its rows
        trained[arm] = train_arm(
            args.config, args.sets, args.backbone, arm, args.run_prefix, arm_sets
        )
        tag = " ".join(sorted(args.only)) if args.only else ""
        scores = model_similarities(trained[arm]["model"], sets, cache, args.max_seq_length, tag)
        preds[arm] = grouped(sets, scores)
        if not label_stats:
            label_stats = label_plot(trained[arm]["label_path"], plot)
        rows, ci_rows, meta = _tables(args, trained, preds, cis, M.bootstrap_diff_ci, SEVEN)
        meta.update(
            {
                "command": "python -m bench.archive.bench_surrogate_compare "
                + " ".join(sys.argv[1:] if argv is None else argv),
                "max_pairs_per_subset": args.max_pairs,
                "sets": {s.name: len(s) for s in sets},
                "label_stats": label_stats,
                "label_plot": plot.name,
                "wall_s": round(time.perf_counter() - t0, 1),
            }
        )
        write_results(
            name, rows, meta, args.out_dir, tables={"paired BCa 95% CI (Spearman x100)": ci_rows}
        )


def _tables(args, trained, preds, cis, bootstrap, seven) -> tuple[list, list, dict[str, Any]]:
    """Main rows (one per arm), CI rows (each arm against each reference arm present, computed
    once and kept in ``cis``) and the run-level meta."""
    from ctxsim.models.evaluation import metrics as M

    keys = list(next(iter(preds.values())))
    avg_keys = [k for k in seven if k in keys]
    first = next(iter(trained.values()))
    rec = first["record"]["stages"]
    label_stages, pair_stages = label_and_pair_stages()
    pair_cpu = total_cpu_seconds(rec[s]["path"] for s in pair_stages if s in rec)
    eq4_cpu = total_cpu_seconds(rec[s]["path"] for s in label_stages if s in rec)
    rows, ci_rows = [], []
    for arm, t in trained.items():
        m = t["metrics"]
        sp = {k: M.spearman(*preds[arm][k]) for k in keys}  # x100 already
        objective = ARMS[arm.split("+", 1)[-1]]["objective"]
        label_cpu = arm_label_cpu(objective, eq4_cpu, m)
        row: dict[str, Any] = {"backbone": args.backbone, "arm": arm}
        row.update({k: round(v, 2) for k, v in sp.items()})
        row["avg"] = round(float(np.mean([sp[k] for k in avg_keys])), 2) if avg_keys else None
        row["steps"] = m["steps"]
        row["best_dev_during_training"] = (
            round(m["best_dev_spearman"], 2) if m.get("best_dev_spearman") is not None else None
        )
        row["label_cpu_s"] = round(float(label_cpu), 1)
        labelled = get_objective(objective).labelled  # trains on the mined pairs' labels
        row["pair_mining_cpu_s"] = round(pair_cpu, 1) if labelled else 0.0
        row["train_cpu_s"] = round(float(m["train_cpu_seconds"]), 1)
        rows.append(row)
        for ref in REFERENCES:
            if ref not in preds or ref == arm:
                continue
            for k in keys:
                if (arm, ref, k) not in cis:
                    (pa_, g), (pb, _) = preds[arm][k], preds[ref][k]
                    cis[(arm, ref, k)] = bootstrap(
                        g, pa_, pb, n_resamples=args.resamples, seed=args.seed
                    )
            if avg_keys and (arm, ref, "avg") not in cis:  # one interval for the average
                cis[(arm, ref, "avg")] = M.bootstrap_avg_diff_ci(
                    {k: (preds[arm][k][1], preds[arm][k][0], preds[ref][k][0]) for k in avg_keys},
                    n_resamples=args.resamples,
                    seed=args.seed,
                )
            for k in keys + (["avg"] if avg_keys else []):
                ci = cis[(arm, ref, k)]
                ci_rows.append(
                    {
                        "arm": arm,
                        "vs": ref,
                        "set": k,
                        "delta": round(ci["delta"], 2),
                        "ci_low": round(ci["ci_low"], 2),
                        "ci_high": round(ci["ci_high"], 2),
                        "significant": ci["significant"],
                    }
                )
    meta = {
        "config": args.config,
        "overrides": args.sets,
        "arm_overrides": args.arm_set,
        "label_run": first["metrics"]["label_run"],
        "n_train_pairs": first["metrics"]["n_train_pairs"],
        "fairness": "same train.* settings (steps, batch, seed; lr too unless arm_overrides "
        "set it per arm) for every arm; SimCSE takes the pair arms' steps",
        "avg_of": avg_keys,
        "eq4_label_cpu_s": round(eq4_cpu, 1),
        "pair_mining_cpu_s": round(pair_cpu, 1),
    }
    return rows, ci_rows, meta


if __name__ == "__main__":
    main()
