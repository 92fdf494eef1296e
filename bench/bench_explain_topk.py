"""Benchmark for `ctxsim explain` on an encoder-route run: the top-K contexts of a closed-form
label, exact by numpy against faiss candidates (product/explain_encoder.py).

The label is Σ_c t_c with t_c = (a·c')(b·c'); the exact way computes every t_c (one pass over
the N x d embeddings); the faiss way searches the four directions ±u+, ±u- of the rank-2 form
for candidates and reranks them exactly. On synthetic unit vectors (d 384, clustered like
sentence embeddings: 256 seeded centres plus noise), for N = 10k, 100k, 1M it reports median
seconds per explained pair of

- ``exact``       numpy over the embeddings in memory (``top_terms(exact_terms(...))``);
- ``faiss flat``  faiss IndexFlatIP search of the four directions + exact rerank (exact search);
- ``faiss ivf``   faiss IndexIVFFlat (√N lists, nprobe 32) search + rerank, and the seconds to
                  build that index once (cached per embed artefact by explain);

then the same as a fresh explain process pays it, from the files (page cache warm): the exact
pass over memory-mapped .npy shards against the cached IVF index read memory-mapped and searched;
and the recall of each faiss way against exact: the share of the exact top-k (k 10, up and
down) it finds, over 20 pairs of sentences near the data.

Run: ``OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_explain_topk [--quick]``
(``--quick``: 10k and 100k).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.harness import median, timeit, write_results
from ctxsim.models.contextual.encoder_origin import ScatterStats, unit_rows
from ctxsim.product.explain_encoder import (
    EmbeddingRows,
    cached_ivf_index,
    exact_terms,
    faiss_top_terms,
    ivf_index,
    term_weights,
    top_terms,
)

D, K, PAIRS = 384, 10, 20


def synthetic(n: int, d: int = D, seed: int = 0) -> np.ndarray:
    """n clustered unit vectors (float32): 256 seeded centres, noise of norm ~0.8."""
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((256, d))).astype(np.float32)
    out = np.empty((n, d), np.float32)
    for lo in range(0, n, 100_000):
        m = min(n, lo + 100_000) - lo
        x = centres[rng.integers(0, 256, m)] + 0.8 * rng.standard_normal((m, d)).astype(
            np.float32
        ) / np.sqrt(d)
        out[lo : lo + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


class _InMemory(EmbeddingRows):
    def __init__(self, emb: np.ndarray) -> None:  # the bench's rows, not files
        self.parts, self.n, self.dim = [emb], len(emb), emb.shape[1]
        self.starts = np.array([0, len(emb)], np.int64)


def measure(n: int, seed: int = 0) -> dict:
    import faiss

    emb = synthetic(n, seed=seed)
    rows = _InMemory(emb)
    scatter = ScatterStats.of(emb)
    rng = np.random.default_rng(seed + 1)
    pick = rng.integers(0, n, (PAIRS, 2))
    noise = 0.5 * rng.standard_normal((PAIRS, 2, D)) / np.sqrt(D)
    sents = unit_rows((emb[pick] + noise).reshape(-1, D)).reshape(PAIRS, 2, D)
    weights = [term_weights(s[0], s[1], scatter) for s in sents]
    flat = faiss.IndexFlatIP(D)
    flat.add(emb)
    t0 = time.perf_counter()
    ivf = ivf_index(rows)
    build = time.perf_counter() - t0
    out = {"contexts": n, "ivf_build_s": round(build, 2)}
    exact = [top_terms(exact_terms(emb, a, b, c), K) for a, b, c, _ in weights]
    for name, ix in (("flat", flat), ("ivf", ivf)):
        hits = total = 0
        for (a, b, c, _), (up, down) in zip(weights, exact, strict=True):
            fu, fd, _ = faiss_top_terms(ix.search, rows.take, n, a, b, c, K)
            hits += len(np.intersect1d(fu, up)) + len(np.intersect1d(fd, down))
            total += len(up) + len(down)
        out[f"recall_{name}"] = round(hits / total, 4)
    a, b, c, _ = weights[0]
    out["exact_s"] = median(timeit(lambda: top_terms(exact_terms(emb, a, b, c), K), repeat=3))
    for name, ix in (("flat", flat), ("ivf", ivf)):
        out[f"faiss_{name}_s"] = median(
            timeit(
                lambda ix=ix: faiss_top_terms(ix.search, rows.take, n, a, b, c, K),
                repeat=3,
            )
        )
    out["exact_over_ivf"] = round(out["exact_s"] / out["faiss_ivf_s"], 1)
    out.update(from_files(emb, ivf, a, b, c))
    return out


def from_files(emb: np.ndarray, ivf: object, a, b, c) -> dict:
    """What a fresh `ctxsim explain` process pays (page cache warm): the exact pass over the
    embed artefact's .npy files (memory-mapped, 4 shards) against the cached IVF index read
    memory-mapped (product/explain_encoder.py ``cached_ivf_index``) and searched."""
    import faiss

    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, part in enumerate(np.array_split(emb, 4)):
            files.append(Path(tmp) / f"emb-{i:05d}.npy")
            np.save(files[-1], part)
        faiss.write_index(ivf, str(Path(tmp) / "ivf.index"))

        def exact() -> None:
            rows = EmbeddingRows(files)
            top_terms(rows.terms(a, b, c), K)

        def cached() -> None:
            rows = EmbeddingRows(files)
            ix = cached_ivf_index(rows, Path(tmp))
            faiss_top_terms(ix.search, rows.take, rows.n, a, b, c, K)

        return {
            "files_exact_s": median(timeit(exact, repeat=3)),
            "files_ivf_mmap_s": median(timeit(cached, repeat=3)),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k and 100k contexts only")
    ap.add_argument("--sizes", type=int, nargs="*", default=None)
    ap.add_argument("--name", default=None)
    args = ap.parse_args(argv)
    sizes = args.sizes or ([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000])
    rows = []
    for n in sizes:
        rows.append(measure(n))
        print(rows[-1], flush=True)
    name = args.name or ("explain_topk_quick" if args.quick else "explain_topk")
    meta = {
        "command": "python -m bench.bench_explain_topk" + (" --quick" if args.quick else ""),
        "data": f"synthetic clustered unit vectors, d {D}, 256 centres; {PAIRS} sentence pairs "
        f"near the data; top {K} up and down",
        "note": "median seconds per explained pair; ivf_build_s once per embed artefact",
    }
    write_results(name, rows, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
