"""Every peer arm at one budget, each arm's learning rate chosen on the dev tasks, on one device:
the encoder route's students against the label-free peers, a larger encoder's labels (teacher)
and the LM route's labels.

Three steps, so that the training can run where a GPU is lent (whose carry holds a pack):

- ``pack`` (where the artefacts are): for each arm the pipeline through `label` (artefacts
  reused), then the train stage's own ``objective_examples``: the arm's training data as Parquet
  and its train settings; the dev files; the backbone, exact on every packed text (only the
  embedding rows those texts use travel: the others are zeros when unpacked, which changes no
  output or gradient of a sentence-embedding loss on these texts).
- ``run`` (any device): each arm x learning rate, then more seeds for the best arms, through the
  train stage's own trainer and its arguments (``training_args``, ``make_trainer``: no stand-in
  for a stage context) and the shared domain scorer (``model_similarities``); per-item scores
  and one JSON line per model, written as they come (a run cut short by ``--budget-s`` or a
  timeout keeps what it finished).
- ``report`` (anywhere): each arm's learning rate chosen on dev (the mean of the pair AP and the
  retrieval nDCG@10, the two dev tasks of the goal; ties to the lower rate), the arms at their
  chosen rate with paired bootstrap intervals against the download and the teacher, the seeds,
  and reference models scored as they are (``--reference NAME=DIR``: the closed form, mpnet).

TSDAE is not an arm here: its loss is a softmax over the whole vocabulary, so the trimmed
backbone would not be exact for it (the removed bench_domain_adapt measured it, commit 21ebbe8).

Usage::

    .venv/bin/python -m bench.bench_student_grid pack --config configs/medquad.yaml \\
        --set run.root=/tmp/mq_enc --out .grid
    python -m bench.bench_student_grid run --pack .grid --out OUT --lrs 1e-5 2e-5 4e-5
    .venv/bin/python -m bench.bench_student_grid report --pack .grid --runs OUT \\
        --name student_grid_medquad
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

#: arm -> (its config, None: --config; its overrides). Every arm gets the bench's step budget.
ARMS: dict[str, tuple[str | None, list[str]]] = {
    "none": (None, ["train.objective=none"]),
    "simcse": (None, ["train.objective=simcse"]),
    "context": (None, ["train.objective=context"]),
    "teacher": (None, ["train.objective=teacher", "train.teacher=mpnet"]),
    "lm-labels": ("configs/medquad_lm.yaml", ["train.objective=ctxsim"]),
    "minilm-labels": (None, ["train.objective=ctxsim"]),
    "recipe": (None, []),
    "recipe-angle": (None, ["train.loss=angle"]),
    "recipe-mse": (None, ["train.loss=cosine", "train.label_scale=none"]),
    "softmax-recipe": (None, ["label.encoder.form=softmax"]),
    "mpnet-recipe": (None, ["embed.model=mpnet"]),
}
DEFAULT_ARMS = ["none", "simcse", "context", "teacher", "minilm-labels", "recipe"]
PACK_MANIFEST = "MANIFEST.json"
#: written into every pack; ``pack --overwrite`` replaces only a folder that holds it
PACK_MARKER = ".ctxsim-pack.json"
TRIM_FILE = "trim.json"
RESULTS_FILE = "results.jsonl"
#: what a packed backbone's word-embedding matrix is called in its safetensors file
EMBEDDING_SUFFIX = "word_embeddings.weight"


def parse_arm(spec: str) -> tuple[str, tuple[str | None, list[str]]]:
    """``NAME[@CONFIG]:KEY=VALUE[,KEY=VALUE...]`` (or ``NAME[@CONFIG]``) -> an arm."""
    head, _, kvs = spec.partition(":")
    name, _, config = head.partition("@")
    sets = [kv for kv in kvs.split(",") if kv]
    if not name or not all("=" in kv for kv in sets):
        raise ValueError(f"--arm {spec!r}: use NAME[@CONFIG]:KEY=VALUE[,KEY=VALUE...]")
    return name, (config or None, sets)


# ---------------------------------------------------------------------------------------- pack


def _texts_of(table: Any) -> list[str]:
    return [
        str(x)
        for name in table.column_names
        if str(table.schema.field(name).type) in ("string", "large_string")
        for x in table.column(name).to_pylist()
        if x is not None
    ]


def trim_backbone(src: Path, texts: list[str], out: Path, dtype: str = "float32") -> dict[str, Any]:
    """Copy the sentence-transformers model ``src`` to ``out`` keeping only the word-embedding
    rows the tokenizer gives ``texts`` (and its special tokens); ``unpack_backbone`` restores the
    full matrix with zeros elsewhere. Exact for any output computed from those texts; ``dtype``
    float16 also rounds every weight (half the bytes: all-MiniLM-L6-v2 trimmed to MedQuAD and
    STSb dev is 66 MB in float32, more than a lent GPU's 64 MiB carry with the rest of a pack)."""
    from safetensors.numpy import load_file, save_file
    from transformers import AutoTokenizer

    shutil.copytree(src, out, dirs_exist_ok=True)
    weights = sorted(out.rglob("model.safetensors"))
    if len(weights) != 1:
        raise SystemExit(f"{src}: expected one model.safetensors, found {len(weights)}")
    tok = AutoTokenizer.from_pretrained(str(weights[0].parent))
    used = set(tok.all_special_ids)
    for i in range(0, len(texts), 4096):
        for ids in tok(texts[i : i + 4096], add_special_tokens=True)["input_ids"]:
            used.update(ids)
    tensors = load_file(str(weights[0]))
    keys = [k for k in tensors if k.endswith(EMBEDDING_SUFFIX)]
    if len(keys) != 1:
        raise SystemExit(f"{weights[0]}: no single *{EMBEDDING_SUFFIX} tensor ({keys})")
    full = tensors[keys[0]]
    ids = np.array(sorted(used), dtype=np.int64)
    tensors[keys[0]] = np.ascontiguousarray(full[ids])
    if dtype != "float32":
        tensors = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in tensors.items()}
    tensors["trim.ids"] = ids
    save_file(tensors, str(weights[0]))
    info = {
        "key": keys[0],
        "vocab": int(full.shape[0]),
        "rows_kept": len(ids),
        "texts": len(texts),
        "dtype": dtype,
    }
    (out / TRIM_FILE).write_text(json.dumps(info))
    return info


def unpack_backbone(packed: Path, out: Path) -> Path:
    """The packed backbone with its full word-embedding matrix (zeros for the rows not kept)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(packed, out, dirs_exist_ok=True)
    info = json.loads((out / TRIM_FILE).read_text())
    weights = next(iter(sorted(out.rglob("model.safetensors"))))
    tensors = load_file(str(weights))
    ids = tensors.pop("trim.ids")
    rows = tensors[info["key"]]
    full = np.zeros((info["vocab"], rows.shape[1]), dtype=rows.dtype)
    full[ids] = rows
    tensors[info["key"]] = full
    # a float16 pack trains in float32 from the rounded weights, as the train stage would
    tensors = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in tensors.items()}
    save_file(tensors, str(weights), metadata={"format": "pt"})
    (out / TRIM_FILE).unlink()
    return out


def pack_arm(config: str, sets: list[str], run_id: str, out: Path) -> dict[str, Any]:
    """The arm's pipeline through `label`, then its training data exactly as `train` builds it:
    Parquet files under ``out/data`` named by content (one per dataset of a multi-dataset
    objective) and its settings."""
    import logging

    from ctxsim.flows.config import load_config
    from ctxsim.flows.pipeline import execute
    from ctxsim.models.training.objectives import ObjectiveContext
    from ctxsim.models.training.training_data import label_columns, objective_examples
    from ctxsim.store.artefacts import artefact_at, content_digest

    cfg = load_config(config, sets)
    p = cfg.stages["train"]
    rec = execute(cfg, until="label", run_id=run_id, use_prefect=False)
    paths = {k: v["path"] for k, v in rec["stages"].items()}
    label = artefact_at(paths["label"], verify=True)
    cols = label_columns(label.read_table(), p, str(label.path))

    def read_input(stage: str, columns: list[str]) -> Any:
        return artefact_at(paths[stage], verify=True).read_table(columns)

    oc = ObjectiveContext(p, "cpu", cfg.run.seed, logging.getLogger("bench"), read_input)
    objective, pairs, examples, max_steps = objective_examples(cols, oc, str(label.path))
    data = examples.data if isinstance(examples.data, dict) else {"train": examples.data}
    files = {}
    if objective.trains:
        (out / "data").mkdir(parents=True, exist_ok=True)
        for part, ds in data.items():
            tmp = out / "data" / f".{part}.parquet"
            ds.to_parquet(str(tmp))
            # arms sharing a dataset (the recipe's right contexts) carry it once
            rel = f"data/{content_digest(tmp)[:16]}.parquet"
            tmp.replace(out / rel)
            files[part] = rel
    return {
        "objective": objective.name,
        "multi": isinstance(examples.data, dict),
        "files": files,
        "params": p.model_dump(mode="json"),
        "seed": cfg.run.seed,
        "max_steps": max_steps,
        "examples": len(examples),
        "pairs": len(pairs),
        "label": label.path.name,
        "label_cpu_seconds": round(float(examples.label_cpu_seconds), 1),
    }


def _make_pack(
    args: argparse.Namespace, arms: dict[str, tuple[str | None, list[str]]], tmp: Path
) -> dict[str, Any]:
    """The pack, written into the fresh folder ``tmp``; returns its manifest."""
    import pyarrow.parquet as pq

    from ctxsim.flows.config import load_config
    from ctxsim.models.registry import resolve_model
    from ctxsim.readers.evaluators import discover_eval_dir
    from ctxsim.readers.sts import discover

    budget = [f"train.max_steps={args.steps}", f"train.batch_size={args.batch_size}"]
    manifest: dict[str, Any] = {"arms": {}, "steps": args.steps, "batch_size": args.batch_size}
    texts: list[str] = []
    for arm in args.arms:
        config, sets = arms[arm]
        t0 = time.perf_counter()
        spec = pack_arm(
            config or args.config, [*args.sets, *sets, *budget], f"{args.run_prefix}-{arm}", tmp
        )
        spec |= {"config": config or args.config, "overrides": sets}
        manifest["arms"][arm] = spec
        for f in spec["files"].values():
            texts += _texts_of(pq.read_table(tmp / f))
        print(f"packed {arm}: {spec['examples']} examples ({time.perf_counter() - t0:.0f} s)")
    # the dev files, as the readers find them
    eval_dir = tmp / "eval"
    for ev in discover_eval_dir(args.eval_dir):
        if ev.format not in ("pairs", "qa"):
            continue
        rel = Path(ev.data.path).resolve().relative_to(Path(args.eval_dir).resolve())
        (eval_dir / "domain" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ev.data.path, eval_dir / "domain" / rel)
        d = ev.data
        texts += d.s1 + d.s2 if ev.format == "pairs" else d.questions + d.answers
    for s in discover(args.sts_dir):
        if s.name in set(args.sts_sets):
            (eval_dir / "sts" / s.dataset).mkdir(parents=True, exist_ok=True)
            shutil.copy2(s.path, eval_dir / "sts" / s.dataset / Path(s.path).name)
            texts += s.s1 + s.s2
    backbone = load_config(args.config, args.sets).stages["train"].backbone
    src = Path(resolve_model(backbone))
    trim = trim_backbone(src, texts, tmp / "backbone", args.dtype)
    manifest["backbone"] = {"name": backbone} | trim
    manifest["sts_sets"] = list(args.sts_sets)
    (tmp / PACK_MANIFEST).write_text(json.dumps(manifest, indent=1))
    (tmp / PACK_MARKER).write_text(json.dumps({"writer": "bench_student_grid pack"}))
    return manifest  # renamed into place by staged_dir: a pack is whole or absent


def pack(args: argparse.Namespace, arms: dict[str, tuple[str | None, list[str]]]) -> None:
    from ctxsim.product.export_target import staged_dir
    from ctxsim.store.errors import InputError

    # the package's guard, as `ctxsim export` uses it: a new or empty folder, or with
    # --overwrite a previous pack (its PACK_MARKER), never an artefact root or anything inside
    # or containing one, never the working directory; checked before any work
    out = Path(args.out).expanduser().absolute()
    if (out / PACK_MANIFEST).is_file() and not args.overwrite:
        raise SystemExit(f"--out {out}: a pack is already there (remove it or pass --overwrite)")
    try:
        with staged_dir(out, args.overwrite, None, PACK_MARKER, "pack") as tmp:
            manifest = _make_pack(args, arms, tmp)
    except InputError as e:
        raise SystemExit(str(e)) from None
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20
    print(f"pack {out}: {len(manifest['arms'])} arms, {size:.1f} MiB")


# ----------------------------------------------------------------------------------------- run


def load_eval(pack_dir: Path, sts_sets: list[str]) -> list:
    """The packed dev files as evaluators (bench/common.py ``eval_sets``)."""
    from bench.common import eval_sets

    return eval_sets(pack_dir / "eval", sts_sets)


def train_one(
    spec: dict[str, Any], pack_dir: Path, backbone: Path, lr: float, seed: int, device: str, work
) -> tuple[Any, float, int]:
    """One arm at one learning rate and seed, as the train stage trains it; (model, wall s,
    steps)."""
    import logging

    import torch
    from datasets import Dataset, DatasetDict

    from ctxsim.models.training.objectives import ObjectiveContext, get_objective
    from ctxsim.models.training.sentence_encoder import build_student
    from ctxsim.tasks.train import TrainParams
    from ctxsim.tasks.train.trainer import make_trainer, training_args, use_bf16

    p = TrainParams.model_validate(spec["params"] | {"lr": lr})
    objective = get_objective(spec["objective"])
    log = logging.getLogger("bench")
    torch.manual_seed(seed)
    model = build_student(str(backbone), p.max_seq_length, device, p.dropout, p.freeze_embeddings)
    if not objective.trains:
        return model, 0.0, 0
    parts = {k: Dataset.from_parquet(str(pack_dir / f)) for k, f in spec["files"].items()}
    data = DatasetDict(parts) if spec["multi"] else parts["train"]

    def refuse(stage: str, columns: list[str]) -> Any:
        raise RuntimeError(f"a packed arm reads no stage input ({stage})")

    oc = ObjectiveContext(p, device, seed, log, refuse)
    loss = objective.loss(model, oc, str(backbone))
    args = training_args(p, work, spec["max_steps"], device, seed, use_bf16(p, device), None)
    trainer = make_trainer(model, args, data, loss, None, log)
    t0 = time.perf_counter()
    trainer.train()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    return model, wall, int(trainer.state.global_step)


def criterion(scores: dict[str, np.ndarray], sets: list) -> float:
    """The dev figure a learning rate is chosen by: the mean of the primary metric (x100) of
    every set but STS (each pair set's AP, each QA set's nDCG@10)."""
    from bench.common import primary

    return float(np.mean([primary(scores, ev) for ev in sets if ev.format != "sts"]))


def best_rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each arm's seed-0 model with the highest ``criterion`` (ties: the lower rate): the rate
    the seeds and the report take."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        b = best.get(r["arm"])
        if r["seed"] == 0 and (
            b is None or (r["criterion"], -r["lr"]) > (b["criterion"], -b["lr"])
        ):
            best[r["arm"]] = r
    return best


def run(args: argparse.Namespace) -> None:
    import torch

    from bench.common import model_similarities
    from ctxsim.tasks.evaluate import load_st

    pack_dir = Path(args.pack)
    manifest = json.loads((pack_dir / PACK_MANIFEST).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    work = Path(args.work)
    backbone = unpack_backbone(pack_dir / "backbone", work / "backbone")
    sets = load_eval(pack_dir, manifest["sts_sets"])
    arms = args.arms or list(manifest["arms"])
    info = {
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
    }
    (out / "device.json").write_text(json.dumps(info))
    t_start = time.perf_counter()
    finished: list[dict[str, Any]] = []
    spent: list[float] = []

    def one(arm: str, lr: float, seed: int) -> bool:
        if args.budget_s and spent:
            if time.perf_counter() - t_start + max(spent) > args.budget_s:
                return False
        t0 = time.perf_counter()
        spec = manifest["arms"][arm]
        model, wall, steps = train_one(spec, pack_dir, backbone, lr, seed, device, work / "ckpt")
        model.save(str(work / "model"))  # scored as the CPU benches score a saved model
        del model
        model = load_st(work / "model", device, args.max_seq_length)
        t1 = time.perf_counter()
        scores = model_similarities(model, sets, args.eval_batch)
        tag = f"{arm}__lr{lr:g}__s{seed}"
        np.savez(out / f"{tag}.npz", **scores)
        row = {
            "arm": arm,
            "lr": lr,
            "seed": seed,
            "steps": steps,
            "train_s": round(wall, 1),
            "eval_s": round(time.perf_counter() - t1, 1),
            "criterion": round(criterion(scores, sets), 3),
            "scores": f"{tag}.npz",
        }
        with open(out / RESULTS_FILE, "a") as f:
            f.write(json.dumps(row) + "\n")
        finished.append(row)
        spent.append(time.perf_counter() - t0)
        print(json.dumps(row), flush=True)
        return True

    lrs = [float(x) for x in args.lrs]
    trained = [a for a in arms if manifest["arms"][a]["objective"] != "none"]
    seed_runs = min(args.seed_arms, len(trained)) * (args.seeds - 1)
    for i, lr in enumerate(lrs):  # every arm at one rate before the next: a cut keeps whole rates
        if i and args.budget_s and spent:
            # a further rate only while it and the seeds of the best arms still fit the budget
            per_run = float(np.mean(spent[-len(trained) :]))
            left = args.budget_s - (time.perf_counter() - t_start)
            if (len(trained) + seed_runs) * per_run > left:
                print(f"budget: rates {lrs[i:]} skipped for the seeds", flush=True)
                break
        for arm in arms:
            if (arm in trained or i == 0) and not one(arm, lr, 0):
                return
    best = {a: r for a, r in best_rows(finished).items() if a in trained}
    top = sorted(best, key=lambda a: -best[a]["criterion"])[: args.seed_arms]
    for seed in range(1, args.seeds):
        for arm in top:
            if not one(arm, best[arm]["lr"], seed):
                return


# -------------------------------------------------------------------------------------- report


def report(args: argparse.Namespace) -> None:
    from bench.common import arm_similarities, intervals, summarise
    from bench.harness import RESULTS_DIR, write_results

    pack_dir, runs = Path(args.pack), Path(args.runs)
    manifest = json.loads((pack_dir / PACK_MANIFEST).read_text())
    sets = load_eval(pack_dir, manifest["sts_sets"])
    rows = [json.loads(x) for x in (runs / RESULTS_FILE).read_text().splitlines() if x.strip()]
    if not rows:
        raise SystemExit(f"{runs / RESULTS_FILE}: no finished model")
    device = json.loads((runs / "device.json").read_text())

    def scores_of(r: dict[str, Any]) -> dict[str, np.ndarray]:
        with np.load(runs / r["scores"]) as z:
            return {k: z[k] for k in z.files}

    grid = [
        {"arm": r["arm"], "lr": r["lr"], "seed": r["seed"]}
        | summarise(scores_of(r), sets)
        | {"criterion": r["criterion"], "train s": r["train_s"], "steps": r["steps"]}
        for r in rows
    ]
    chosen = best_rows(rows)
    scores = {a: scores_of(r) for a, r in chosen.items()}
    refs = dict(kv.split("=", 1) for kv in args.reference)
    for name, model_dir in refs.items():
        cache = Path(args.cache)
        scores[name] = arm_similarities(model_dir, sets, cache, args.max_seq_length)
    main_rows = []
    for a, s in scores.items():
        r = chosen.get(a)
        spec = manifest["arms"].get(a, {})
        main_rows.append(
            {"arm": a}
            | summarise(s, sets)
            | {
                "lr (best on dev)": r["lr"] if r and r["steps"] else "-",
                "rates tried": len({q["lr"] for q in rows if q["arm"] == a and q["seed"] == 0})
                if r and r["steps"]
                else 0,
                "objective": spec.get("objective", "as downloaded"),
                "overrides": " ".join(spec.get("overrides", [])) or "-",
                "training examples": spec.get("examples", 0),
                "label": spec.get("label", "-"),
            }
        )
    ci_rows = []
    for ref in [x for x in args.vs if x in scores]:
        for a in scores:
            if a != ref:
                ci = intervals(scores[a], scores[ref], sets, args.resamples, 0)
                ci_rows.append({"arm": a, "vs": ref} | ci)
    seed_rows = []
    for r in rows:
        c = chosen.get(r["arm"])
        if (
            "none" in scores
            and c
            and r["lr"] == c["lr"]
            and any(q["arm"] == r["arm"] and q["seed"] != 0 for q in rows)
        ):
            ci = intervals(scores_of(r), scores["none"], sets, args.resamples, 0)
            seed_rows.append({"arm": r["arm"], "lr": r["lr"], "seed": r["seed"]} | ci)
    meta = {
        "command": "python -m bench.bench_student_grid " + " ".join(sys.argv[1:]),
        "device": device,
        "steps": manifest["steps"],
        "batch_size": manifest["batch_size"],
        "backbone": manifest["backbone"],
        "choice": "each arm's lr: the highest mean of dev pair AP and dev QA nDCG@10 (seed 0)"
        " among the rates it was trained with",
        "eval": {ev.name: ev.describe() for ev in sets},
    }
    write_results(
        args.name,
        main_rows,
        meta,
        args.out_dir or RESULTS_DIR,
        tables={
            "paired bootstrap 95% CI (best lr, seed 0)": ci_rows,
            "seeds (best lr) against the download": seed_rows,
            "every model trained (the lr grid and the seeds)": grid,
        },
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="the arms' training data, the dev files, the backbone")
    pk.add_argument("--config", default="configs/medquad.yaml")
    pk.add_argument("--set", dest="sets", action="append", default=[], help="config override")
    pk.add_argument("--arms", nargs="+", default=DEFAULT_ARMS)
    pk.add_argument("--arm", dest="extra_arms", action="append", default=[], metavar="SPEC")
    pk.add_argument("--steps", type=int, default=250, help="every arm's optimizer steps")
    pk.add_argument("--batch-size", type=int, default=32)
    pk.add_argument("--run-prefix", default="grid")
    pk.add_argument("--eval-dir", default="../shared/data/domain")
    pk.add_argument("--sts-dir", default="../shared/data/sts")
    pk.add_argument("--sts-sets", nargs="*", default=["STSb.dev"])
    pk.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    pk.add_argument("--out", required=True)
    pk.add_argument(
        "--overwrite", action="store_true", help="replace a previous pack (never anything else)"
    )
    rn = sub.add_parser("run", help="train and score every arm x lr, then seeds")
    rn.add_argument("--pack", required=True)
    rn.add_argument("--out", required=True)
    rn.add_argument("--work", default="/tmp/student_grid")
    rn.add_argument("--arms", nargs="*", default=None)
    rn.add_argument("--lrs", nargs="+", default=["1e-5", "2e-5", "4e-5"])
    rn.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 for the best arms")
    rn.add_argument("--seed-arms", type=int, default=2)
    rn.add_argument("--budget-s", type=float, default=0.0, help="stop before passing it")
    rn.add_argument("--device", default=None)
    rn.add_argument("--max-seq-length", type=int, default=256)
    rn.add_argument("--eval-batch", type=int, default=64)
    rp = sub.add_parser("report", help="choose each arm's lr on dev; intervals; seeds")
    rp.add_argument("--pack", required=True)
    rp.add_argument("--runs", required=True)
    rp.add_argument("--reference", action="append", default=[], metavar="NAME=MODEL_DIR")
    rp.add_argument(
        "--vs", nargs="+", default=["none", "teacher"], help="arms or references to compare with"
    )
    rp.add_argument("--cache", default="data/cache/encoder_route/scores")
    rp.add_argument("--max-seq-length", type=int, default=256)
    rp.add_argument("--resamples", type=int, default=1000)
    rp.add_argument("--out-dir", default=None)
    rp.add_argument("--name", default="student_grid_medquad")
    args = ap.parse_args(argv)
    if args.cmd == "pack":
        try:
            extra = dict(parse_arm(s) for s in args.extra_arms)
        except ValueError as e:
            ap.error(str(e))
        arms = ARMS | extra
        args.arms = [*args.arms, *(a for a in extra if a not in args.arms)]
        unknown = [a for a in args.arms if a not in arms]
        if unknown:
            ap.error(f"unknown arms {unknown}: use {list(arms)} or --arm NAME[@CONFIG]:K=V,..")
        pack(args, arms)
    elif args.cmd == "run":
        run(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
