"""The adapt recipe's corpus stages at 1x, 4x and 16x the corpus: CPU-s per 1 M words, peak RSS.

What it measures (one run, same machine): the corpus is cut into nested prefixes (each work's
first k/K of its sections, so every work and its structure is in every size), `ctxsim adapt
--dump-config` sizes the recipe for each, and each stage runs in a fresh process
(`ctxsim run --until STAGE`, the earlier stages reused) so that its peak RSS is its own
(``os.wait4``'s ``ru_maxrss``: the process and its waited-for children, Prefect included).
Per stage and size: the stage's CPU-s from its manifest (its shards and summary, not the
process's imports), CPU-s per 1 M corpus words, process peak RSS, and disk per 1 M words;
the ratios to the smallest size are the issue's goals (RSS within 1.5x, CPU-s per word within
1.2x). Stages whose work does not grow with the corpus (queries, pairs, label and train are
sized by the recipe's caps) are reported in CPU-s, not per word.

``--repeat R`` adds a corpus R times the whole one (size ``R x top``, e.g. 160x): the first copy
as is, every other copy with each section's paragraphs in a seeded order and each paragraph's
sentences in a seeded order (the section renamed), so no unit's text repeats and the encoder
does the whole work again; ``--scales`` then names the smaller sizes to run beside it (with
``--top``, the whole corpus's scale, when the full corpus itself is not run).

``--ray-at K`` also runs shard through label at size K twice in fresh roots on the machine's
two cores: sequentially with 2 torch threads, and on a local Ray instance with 2 workers of 1
thread (``run.task_runner=ray``): wall time per stage, the same artefacts (fingerprints)
expected.

Usage: ``python -m bench.bench_corpus_scale --corpus 'CORPUS/*.jsonl.gz' --root ROOT
--scales 1 4 16 [--train-at 1 16] [--ray-at 4] [--repeat 10 [--top 16]] [--set KEY=VALUE]
[--stages shard contexts queries] [--cut-only]``; ``--cut-only`` writes the cuts and prints
their sizes (``ROOT/corpora/x<k>/``: e.g. a 100 k-word corpus of the same works to adapt on).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import math
import os
import random
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from bench.harness import (
    current_rss_mb,
    peak_rss_mb,
    reset_peak_rss,
    sole_manifest,
    write_results,
)

CORPUS_STAGES = ("shard", "contexts", "queries", "embed", "pairs", "label")
#: stages whose work grows with the corpus (the others are capped by the recipe's sizes)
PER_WORD = ("shard", "contexts", "embed")
#: a model inside an artefact, left out of its disk figure
MODEL_DIR = "adapted-encoder"
CLI = "from ctxsim.flows.cli import main; main()"
ENV = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "TOKENIZERS_PARALLELISM": "false",
}


def _records(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line for line in f if line.strip()]


def _words(line: str) -> int:
    rec = json.loads(line)
    paras = rec.get("paragraphs") or [rec.get("text") or ""]
    return sum(len(p.split()) for p in paras)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def shuffled_copy(line: str, copy: int, seed: int) -> str:
    """A record of the ``copy``-th repeat: its paragraphs in a seeded order, each paragraph's
    sentences in a seeded order, its section renamed (copy 0: the record itself)."""
    if copy == 0:
        return line
    rec = json.loads(line)
    rng = random.Random(f"{seed}:{copy}")
    paras = list(rec.get("paragraphs") or [rec.get("text") or ""])
    rng.shuffle(paras)
    out = []
    for p in paras:
        sents = _SENTENCE_END.split(p)
        rng.shuffle(sents)
        out.append(" ".join(sents))
    rec.pop("text", None)
    rec["paragraphs"] = out
    rec["section"] = f"{rec.get('section', '')}#copy{copy}"
    return json.dumps(rec, ensure_ascii=False) + "\n"


def cut_corpus(
    pattern: str, scales: list[int], out: Path, top: int | None = None, repeat: int = 1
) -> dict[int, dict[str, Any]]:
    """Nested prefixes of the corpus: size k of K (``top``, default the largest scale) keeps
    each file's first ceil(n * k / K) records; with ``repeat`` R > 1 also size R * K, the whole
    corpus R times (``shuffled_copy``). Written once per size as plain JSON Lines under
    ``out/x<k>/``."""
    files = sorted(Path(p) for p in glob.glob(pattern))
    if not files:
        raise SystemExit(f"--corpus {pattern!r} matches no file")
    top = top or max(scales)
    if max(scales) > top:
        raise SystemExit(f"--scales {max(scales)} is above --top {top}")
    sizes: dict[int, dict[str, Any]] = {}
    records = {f: _records(f) for f in files}
    for k in scales:
        folder = out / f"x{k}"
        done = folder / "_WORDS.json"
        if done.exists():
            sizes[k] = json.loads(done.read_text())
            continue
        folder.mkdir(parents=True, exist_ok=True)
        words = n_rec = 0
        for f, lines in records.items():
            keep = lines[: math.ceil(len(lines) * k / top)]
            words += sum(_words(line) for line in keep)
            n_rec += len(keep)
            name = f.name.removesuffix(".gz")
            (folder / name).write_text("".join(keep), encoding="utf-8")
        sizes[k] = {"words": words, "records": n_rec, "glob": str(folder / "*.jsonl")}
        done.write_text(json.dumps(sizes[k]))
    if repeat > 1:
        sizes[top * repeat] = _repeat(records, repeat, out / f"x{top * repeat}")
    return sizes


def _repeat(records: dict[Path, list[str]], repeat: int, folder: Path) -> dict[str, Any]:
    """The whole corpus ``repeat`` times (``shuffled_copy``), one file per source file."""
    done = folder / "_WORDS.json"
    if done.exists():
        return json.loads(done.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    words = n_rec = 0
    for f, lines in records.items():
        name = f.name.removesuffix(".gz")
        with (folder / name).open("w", encoding="utf-8") as dst:
            for copy in range(repeat):
                for i, line in enumerate(lines):
                    dst.write(shuffled_copy(line, copy, hash_seed(name, i)))
        words += repeat * sum(_words(line) for line in lines)
        n_rec += repeat * len(lines)
    size = {"words": words, "records": n_rec, "glob": str(folder / "*.jsonl")}
    done.write_text(json.dumps(size))
    return size


def hash_seed(name: str, index: int) -> int:
    """A seed of a file's record that does not depend on Python's hash salt."""
    return zlib.crc32(f"{name}:{index}".encode())


def _cli(args: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One ctxsim command in a fresh process: wall, CPU and peak RSS of it and its children."""
    t0 = time.perf_counter()
    with log.open("a") as out:
        out.write(f"$ ctxsim {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen(
            [sys.executable, "-c", CLI, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENV, **(env or {})},
        )
        _, status, usage = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"ctxsim {' '.join(args)} failed (rc {rc}); see {log}")
    return {
        "wall_s": round(time.perf_counter() - t0, 2),
        "process_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
    }


def _disk_mb(path: Path) -> float:
    """The artefact's bytes on disk, less a model it carries (embed's adapted encoder: a fixed
    size, not data that grows with the corpus)."""
    return (
        sum(
            f.stat().st_size
            for f in path.rglob("*")
            if f.is_file() and MODEL_DIR not in f.relative_to(path).parts
        )
        / 2**20
    )


def dump_config(corpus_glob: str, root: Path, log: Path, sets: list[str]) -> Path:
    """The recipe as `ctxsim adapt` sizes it for this corpus, written to ``root/adapt.yaml``."""
    cfg = root / "adapt.yaml"
    if not cfg.exists():
        root.mkdir(parents=True, exist_ok=True)
        # one config: the in-domain scorer adds a training, not corpus-sized work
        args = ["adapt", corpus_glob, "--root", str(root), "--dump-config"]
        args += ["--set", "adapt.scorer=download"]
        for s in sets:
            args += ["--set", s]
        text = subprocess.run(
            [sys.executable, "-c", CLI, *args],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **ENV},
        ).stdout
        log.open("a").write(f"$ ctxsim {' '.join(args)}\n")
        cfg.write_text(text)
    return cfg


def run_stages(
    cfg: Path, root: Path, stages: tuple[str, ...], log: Path, sets: list[str]
) -> list[dict[str, Any]]:
    """Each stage in its own process, in order (the earlier ones reused from the root)."""
    rows = []
    extra = [a for s in sets for a in ("--set", s)]
    for stage in stages:
        proc = _cli(["run", "--config", str(cfg), "--until", stage, "--no-progress", *extra], log)
        man = sole_manifest(root, stage)
        stats = man.get("stats", {})
        rows.append(
            {
                "stage": stage,
                "fingerprint": man["fingerprint"],
                "stage_cpu_s": float(stats.get("cpu_seconds") or 0.0),
                "disk_mb": round(_disk_mb(root / stage / man["fingerprint"]), 2),
                **proc,
            }
        )
    return rows


def scale_rows(
    sizes: dict[int, dict[str, Any]], runs: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Per stage and size: CPU-s per 1 M words, RSS and their ratios to the smallest size."""
    base_k = min(runs)
    base = {r["stage"]: r for r in runs[base_k]}
    out = []
    for k in sorted(runs):
        mw = sizes[k]["words"] / 1e6
        for r in runs[k]:
            b = base.get(r["stage"])
            per_word = r["stage"] in PER_WORD
            cpw = r["stage_cpu_s"] / mw
            b_cpw = b["stage_cpu_s"] / (sizes[base_k]["words"] / 1e6) if b else None
            out.append(
                {
                    "scale": f"{k}x",
                    "words_m": round(mw, 3),
                    "stage": r["stage"],
                    "stage_cpu_s": round(r["stage_cpu_s"], 2),
                    "cpu_s_per_mword": round(cpw, 2) if per_word else None,
                    "cpu_per_word_vs_1x": round(cpw / b_cpw, 3) if per_word and b_cpw else None,
                    "cpu_vs_1x": round(r["stage_cpu_s"] / b["stage_cpu_s"], 3)
                    if b and b["stage_cpu_s"]
                    else None,
                    "peak_rss_mb": r["peak_rss_mb"],
                    "rss_vs_1x": round(r["peak_rss_mb"] / b["peak_rss_mb"], 3) if b else None,
                    "disk_mb_per_mword": round(r["disk_mb"] / mw, 2),
                    "process_cpu_s": r["process_cpu_s"],
                    "wall_s": r["wall_s"],
                }
            )
    return out


def _units_probe(root: Path, mode: str, n_shards: int) -> dict[str, Any]:
    """In this (fresh) process: peak RSS growth of building one embed shard's unit texts, the
    whole corpus's texts then the piece (``whole``: embed before) or the piece alone
    (``piece``: ``context_unit_index``)."""
    import numpy as np

    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.chunks import chunk_texts, context_unit_index

    store = ArtefactStore(root)
    arts = {s: store.get(s, sole_manifest(root, s)["fingerprint"]) for s in ("shard", "contexts")}
    reset_peak_rss()
    base, c0 = current_rss_mb(), time.process_time()
    if mode == "whole":
        ids, texts = chunk_texts(arts["contexts"], arts["shard"])
        keep = [i for i, t in enumerate(texts) if len(t.split()) >= 8]
        take = np.array_split(np.asarray(keep), n_shards)[0]
        piece = [texts[i] for i in take]
    else:
        units = context_unit_index(arts["contexts"], arts["shard"], "chunk", 8)
        piece = units.texts(np.array_split(np.arange(len(units.ids)), n_shards)[0])
    return {
        "mode": mode,
        "units_in_shard": len(piece),
        "cpu_s": round(time.process_time() - c0, 2),
        "peak_rss_growth_mb": round(peak_rss_mb() - base, 1),
    }


def units_rows(sizes: dict[int, dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    """Embed's unit texts for its first shard (of 4), built the whole-corpus way and the
    piece's way, each in a fresh process, at every size."""
    rows = []
    for k in sorted(sizes):
        root = work / f"x{k}"
        if not (root / "contexts").is_dir():
            continue
        for mode in ("whole", "piece"):
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.bench_corpus_scale",
                    "--units-probe",
                    str(root),
                    mode,
                ],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, **ENV},
            ).stdout
            rows.append(
                {
                    "scale": f"{k}x",
                    "words_m": round(sizes[k]["words"] / 1e6, 3),
                    **json.loads(out.strip().splitlines()[-1]),
                }
            )
    return rows


def ray_rows(
    sizes: dict[int, dict[str, Any]], k: int, work: Path, log: Path
) -> list[dict[str, Any]]:
    """Shard through label at size k, sequential (2 threads) against Ray (2 workers x 1)."""
    rows = []
    arms = {
        "sequential, 2 threads": ["run.task_runner=sequential", "run.torch_threads=2"],
        "ray, 2 workers x 1 thread": [
            "run.task_runner=ray",
            "run.max_workers=2",
            "run.torch_threads=1",
        ],
    }
    for arm, sets in arms.items():
        root = work / f"ray-x{k}-{arm.split(',')[0]}"
        cfg = dump_config(sizes[k]["glob"], root, log, [])
        for r in run_stages(cfg, root, CORPUS_STAGES, log, sets):
            rows.append({"arm": arm, "scale": f"{k}x", **r})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="glob of the corpus files (JSON Lines)")
    ap.add_argument("--root", required=True, type=Path, help="scratch folder (corpora, roots)")
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--train-at", type=int, nargs="*", default=[], help="sizes to train at too")
    ap.add_argument("--ray-at", type=int, default=None, help="a size to run under Ray too")
    ap.add_argument("--skip-scale", action="store_true", help="only the Ray comparison (--ray-at)")
    ap.add_argument(
        "--units-memory", action="store_true", help="also embed's unit texts, whole vs piece"
    )
    ap.add_argument(
        "--stages",
        nargs="+",
        default=list(CORPUS_STAGES),
        choices=CORPUS_STAGES,
        help="the corpus stages to run (default all; e.g. shard contexts queries)",
    )
    ap.add_argument("--threads", type=int, default=1, help="run.torch_threads of the scale runs")
    ap.add_argument("--repeat", type=int, default=1, help="also the whole corpus this many times")
    ap.add_argument("--top", type=int, default=None, help="the whole corpus's scale (default: max)")
    ap.add_argument(
        "--set", dest="sets", action="append", default=[], help="KEY=VALUE for the scale runs"
    )
    ap.add_argument(
        "--cut-only", action="store_true", help="write the cuts and print their sizes, no runs"
    )
    ap.add_argument("--name", default="corpus_scale")
    ap.add_argument("--out-dir", type=Path, default=None)
    if argv is None and sys.argv[1:2] == ["--units-probe"]:
        print(json.dumps(_units_probe(Path(sys.argv[2]), sys.argv[3], 4)))
        return
    args = ap.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    log = args.root / "bench.log"
    sizes = cut_corpus(args.corpus, args.scales, args.root / "corpora", args.top, args.repeat)
    if args.cut_only:  # smaller corpora of the same works, e.g. for `ctxsim adapt` on each
        for k in sorted(sizes):
            print(json.dumps({"scale": k, **sizes[k]}))
        return
    sets = [f"run.torch_threads={args.threads}", *args.sets]
    runs = {}
    for k in [] if args.skip_scale else sorted(sizes):
        root = args.root / f"x{k}"
        cfg = dump_config(sizes[k]["glob"], root, log, sets)
        stages = tuple(s for s in CORPUS_STAGES if s in args.stages)
        stages += ("train",) if k in args.train_at else ()
        runs[k] = run_stages(cfg, root, stages, log, sets)
        print(json.dumps({"scale": k, **sizes[k], "rows": runs[k]}), flush=True)
    rows = scale_rows(sizes, runs) if runs else []
    tables = {}
    if args.units_memory:
        tables["units_memory"] = units_rows(sizes, args.root)
    if args.ray_at is not None:
        tables["ray"] = ray_rows(sizes, args.ray_at, args.root, log)
    meta = {
        "corpus": args.corpus,
        "sizes": {f"{k}x": v["words"] for k, v in sizes.items()},
        "threads": args.threads,
        "sets": sets,
        "command": "python -m bench.bench_corpus_scale " + " ".join(sys.argv[1:]),
    }
    md, js = write_results(args.name, rows, meta=meta, out_dir=args.out_dir, tables=tables)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    main()
