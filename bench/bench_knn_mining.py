"""The pairs stage's nearest-neighbour mining (models/corpus/pairs.py ``knn_search``): exact
faiss up to ``pairs.flat_max`` queries, IVF above. At what size does the approximate index pay,
and how many of the exact neighbours does it find there?

Compared in one run, on real sentence-encoder embeddings (an `embed` artefact's unit
vectors: MiniLM, unit-normalised, the space the stage mines in), at growing n:

* ``numpy exact`` (the naive way: blocked ``x @ x.T`` and ``argpartition``);
* ``faiss flat`` (what the stage runs up to ``flat_max``: ``IndexFlatIP``);
* ``faiss ivf`` (above it: ``IndexIVFFlat``, nlist 4 sqrt(n), at each ``--nprobe``; 0 is the
  stage's default, 128 or all clusters when fewer), its training included (on
  ``--train-per-list`` sampled rows per cluster: the stage's 64, or others);
* ``scikit-learn`` (the library a user would pick: ``NearestNeighbors`` brute force, cosine).

Per variant: CPU-s (``time.process_time``, one thread), peak RSS growth, and recall@k against
numpy exact (faiss flat's above ``--numpy-max``: both exact): the share of the k found
neighbours at least as similar as the k-th exact one, so that tied duplicates count (k = the
recipe's 3, and 10).

Usage: ``python -m bench.bench_knn_mining --emb-dir ROOT/embed/FP/files --sizes 10000 50000
150000 --name knn_mining``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import current_rss_mb, peak_rss_mb, reset_peak_rss, write_results
from ctxsim.models.corpus.pairs import IVF_TRAIN_PER_LIST, default_nprobe, knn_search

BLOCK = 4096


def numpy_exact(x: np.ndarray, k: int) -> np.ndarray:
    """Each row's k nearest others by inner product, in blocks of rows (self excluded)."""
    out = np.empty((len(x), k), dtype=np.int64)
    for lo in range(0, len(x), BLOCK):
        sim = x[lo : lo + BLOCK] @ x.T
        sim[np.arange(len(sim)), np.arange(lo, lo + len(sim))] = -np.inf
        part = np.argpartition(-sim, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sim, part, 1), axis=1)
        out[lo : lo + len(sim)] = np.take_along_axis(part, order, 1)
    return out


def sklearn_exact(x: np.ndarray, k: int) -> np.ndarray:
    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(x)
    idx = nn.kneighbors(x, return_distance=False)
    keep = idx != np.arange(len(x))[:, None]
    return np.stack([row[m][:k] for row, m in zip(idx, keep, strict=True)])


def recall(x: np.ndarray, found: np.ndarray, exact: np.ndarray, k: int) -> float:
    """Share of the k found neighbours at least as similar as the k-th exact one (ties count:
    a corpus repeats paragraphs, and which of equal neighbours comes first is arbitrary)."""
    kth = np.einsum("nd,nd->n", x, x[exact[:, k - 1]]) - 1e-5
    f = found[:, :k]
    sims = np.einsum("nd,nkd->nk", x, x[np.where(f >= 0, f, 0)])
    ok = (f >= 0) & (f != np.arange(len(x))[:, None]) & (sims >= kth[:, None])
    return float(ok.sum() / (k * len(x)))


def timed(fn: Any) -> tuple[Any, float, float]:
    """(result, CPU-s, peak RSS growth in MB): the peak is reset first."""
    reset_peak_rss()
    r0, c0 = current_rss_mb(), time.process_time()
    out = fn()
    return out, time.process_time() - c0, max(peak_rss_mb() - r0, 0.0)


def load(emb_dir: Path) -> np.ndarray:
    files = sorted(emb_dir.glob("emb-*.npy"))
    if not files:
        raise SystemExit(f"{emb_dir}: no emb-*.npy (an embed artefact's files folder)")
    x = np.concatenate([np.load(f) for f in files]).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def first_copy(emb_dir: Path, copies: int) -> np.ndarray:
    """Which rows of ``load(emb_dir)`` are paragraphs of the first of ``copies`` copies of a
    repeated corpus (``bench_corpus_scale --repeat``: every document's sections are its copies'
    in turn, so the first 1/copies of a document's sections are the original), so that mining
    is not measured on a corpus whose every paragraph has shuffled twins."""
    import pyarrow.parquet as pq

    art = emb_dir.parent
    root = art.parents[1]
    ids = np.concatenate(
        [pq.read_table(f, columns=["context_id"])[0].to_numpy() for f in sorted(art.glob("part-*"))]
    )

    def sole(stage: str, pattern: str) -> list[Path]:
        found = sorted(root.glob(f"{stage}/*/{pattern}"))
        if not found:
            raise SystemExit(f"--first-of-copies: no {stage}/*/{pattern} under {root}")
        return found

    chunks = pq.read_table(sole("contexts", "files/chunks.parquet")[0]).to_pandas()
    sents = pq.ParquetDataset(sole("shard", "part-*.parquet")).read(
        columns=["sent_id", "doc_id", "section_id"]
    )
    where = sents.to_pandas().set_index("sent_id").loc[chunks["first_sent_id"]]
    chunks["doc_id"], chunks["section_id"] = (
        where["doc_id"].to_numpy(),
        where["section_id"].to_numpy(),
    )
    sections = chunks[["doc_id", "section_id"]].drop_duplicates().sort_values("section_id")
    sections["rank"] = sections.groupby("doc_id").cumcount()
    sections["first"] = (
        sections["rank"] < sections.groupby("doc_id")["rank"].transform("size") / copies
    )
    keep = chunks.merge(sections, on=["doc_id", "section_id"]).set_index("chunk_id")["first"]
    return keep.loc[ids].to_numpy()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emb-dir", type=Path, required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 150_000])
    ap.add_argument("--k", type=int, nargs="+", default=[3, 10])
    ap.add_argument("--nprobe", type=int, nargs="+", default=[16, 64], help="0: the default")
    ap.add_argument(
        "--train-per-list",
        type=int,
        nargs="+",
        default=[IVF_TRAIN_PER_LIST],
        help="IVF training rows per cluster (knn_search's train_per_list; 64 the stage's)",
    )
    ap.add_argument("--sklearn-max", type=int, default=50_000, help="sklearn up to this n")
    ap.add_argument("--numpy-max", type=int, default=50_000, help="numpy exact up to this n")
    ap.add_argument(
        "--first-of-copies",
        type=int,
        default=None,
        help="vectors of a corpus repeated this many times: keep the first copy's only",
    )
    ap.add_argument("--name", default="knn_mining")
    ap.add_argument("--out-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    import faiss

    faiss.omp_set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    x_all = load(args.emb_dir)
    if args.first_of_copies:
        x_all = x_all[first_copy(args.emb_dir, args.first_of_copies)]
    rng = np.random.default_rng(0)
    kmax = max(args.k)
    rows = []
    for n in args.sizes:
        if n > len(x_all):
            print(f"skip n={n}: the artefact has {len(x_all)} vectors")
            continue
        x = np.ascontiguousarray(x_all[np.sort(rng.choice(len(x_all), n, replace=False))])
        variants = {"faiss flat": timed(lambda x=x, n=n: knn_search(x, kmax, flat_max=n)[0])}
        if n <= args.numpy_max:
            variants["numpy exact"] = timed(lambda x=x: numpy_exact(x, kmax))
        nl = int(4 * np.sqrt(n))
        for per_list in args.train_per_list:
            for probe in args.nprobe:
                name = f"faiss ivf nprobe {probe or default_nprobe(nl)}" + (
                    " (the default)" if probe == 0 else ""
                )
                if per_list != IVF_TRAIN_PER_LIST:
                    name += f", trained on {per_list}/list"
                variants[name] = timed(
                    lambda x=x, probe=probe, per_list=per_list: knn_search(
                        x, kmax, flat_max=0, nprobe=probe or None, train_per_list=per_list
                    )[0]
                )
        # the reference: numpy's exact neighbours where run, else faiss flat's (exact too:
        # recall 1.0 against numpy wherever both ran)
        exact = variants.get("numpy exact", variants["faiss flat"])[0]
        if n <= args.sklearn_max:
            variants["scikit-learn"] = timed(lambda x=x: sklearn_exact(x, kmax))
        base = variants["faiss flat"][1]
        for name, (found, cpu, mem) in variants.items():
            row = {
                "n": n,
                "variant": name,
                "cpu_s": round(cpu, 2),
                "x_faiss_flat": round(base / cpu, 2) if cpu else None,
                "peak_rss_growth_mb": round(mem, 1),
            }
            for k in args.k:
                row[f"recall@{k}"] = round(recall(x, found, exact, k), 4)
            rows.append(row)
            print(row, flush=True)
    meta = {
        "emb_dir": str(args.emb_dir),
        "vectors": int(len(x_all)),
        "first_of_copies": args.first_of_copies,
        "dim": int(x_all.shape[1]),
        "nprobe": args.nprobe,
        "train_per_list": args.train_per_list,
        "nlist": "4 sqrt(n)",
        "threads": 1,
        "command": "python -m bench.bench_knn_mining " + " ".join(sys.argv[1:]),
    }
    md, js = write_results(args.name, rows, meta=meta, out_dir=args.out_dir)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    main()
