"""`ctxsim explain S1 S2` on an encoder-route run, the arithmetic: which corpus context units
pull the pair's closed-form label up and down most.

The closed form (models/contextual/encoder_origin.py (a), ``label.encoder.form: closed``) is the
cosine of M^(1/2) e1 and M^(1/2) e2, M = Σ_c c' c'ᵀ with c' = c - c̄ (centred) or c (uncentred)
over the N unit context embeddings of the `embed` artefact. So the label is a sum over contexts:

    label = Σ_c t_c,   t_c = (e1·c')(e2·c') / sqrt(e1ᵀMe1 · e2ᵀMe2) = (a·c')(b·c')

with a = e1 / sqrt(e1ᵀMe1), b = e2 / sqrt(e2ᵀMe2) (:func:`term_weights`): exact, each context's
term its share of the label. The softmax and top-K forms are not such a sum; explain refuses
them (flows/explain.py) rather than decompose them approximately.

Finding the top terms. Exactly, t for every context is one pass over the embeddings, O(N d)
(:func:`exact_terms`, :func:`top_terms`). Beyond :data:`EXACT_MAX` contexts, a faiss search
finds candidates (:func:`faiss_top_terms`): t_c = c'ᵀ S c' with S = (a bᵀ + b aᵀ)/2, a rank-2
form whose eigenvectors are u± ∝ â ± b̂ with eigenvalues λ± = |a||b|(cos θ ± 1)/2 (λ+ ≥ 0 ≥ λ-),
so t_c = λ+ (u+·c')² + λ- (u-·c')²: a large positive term needs a large |u+·c'|, a large
negative one a large |u-·c'|. Since u·c' = u·c - u·c̄, the largest |u·c'| are among the largest
u·c and -u·c: four inner-product searches (±u+, ±u-) over the uncentred unit vectors give the
candidates, reranked exactly (bench/bench_explain_topk.py measures when this pays and its
recall).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.models.contextual.encoder_origin import ScatterStats, unit_rows

#: contexts up to which the top terms are found exactly by numpy, faiss candidates beyond.
#: Measured (bench/results/explain_topk.md, d 384, a loaded 2-core machine): the exact pass of a
#: fresh explain costs 0.2 s at 10k contexts, 0.8 s at 100k, 11.3 s at 1M (linear); the IVF
#: index 0.04, 0.34 and 1.5 s (recall 0.995-1.0) but must first be built, 18 s at 100k and 103 s
#: at 1M, once per embed artefact. At 100k the build costs 40 explains' savings, at 1M 10:
#: exact below 250k contexts (about 3 s), faiss above.
EXACT_MAX = 250_000
#: candidates per faiss search (of four) for each requested top term, and at least this many
MIN_CANDIDATES = 256
#: contexts per block of the exact pass (memory: block x d floats)
BLOCK = 65_536


def term_weights(
    e1: np.ndarray, e2: np.ndarray, scatter: ScatterStats, centred: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(a, b, c̄, label): t_c = (a·(c - c̄))(b·(c - c̄)) sums to the closed-form label over the
    scatter's contexts (c̄ = 0 when uncentred). A sentence with no variance over the contexts
    (e Me = 0) has label 0 and every term 0."""
    a = unit_rows(np.asarray(e1, np.float64)[None])[0]
    b = unit_rows(np.asarray(e2, np.float64)[None])[0]
    m = scatter.matrix(centred) * scatter.n  # Σ c' c'ᵀ, not divided by n: the terms' scale
    qa, qb = float(a @ m @ a), float(b @ m @ b)
    cbar = scatter.total / scatter.n if centred else np.zeros(scatter.dim)
    if qa <= 0 or qb <= 0:
        return np.zeros_like(a), np.zeros_like(b), cbar, 0.0
    a, b = a / math.sqrt(qa), b / math.sqrt(qb)
    return a, b, cbar, float(a @ m @ b)


def exact_terms(
    emb: np.ndarray, a: np.ndarray, b: np.ndarray, cbar: np.ndarray, block: int = BLOCK
) -> np.ndarray:
    """t_c for every row of ``emb`` (unit-normalised here, as the scatter was), float64, in
    blocks of ``block`` rows."""
    out = np.empty(len(emb), np.float64)
    ab = np.stack([a, b], axis=1)
    shift = cbar @ ab
    for lo in range(0, len(emb), block):
        x = np.asarray(emb[lo : lo + block], np.float64)
        norm = np.sqrt(np.einsum("ij,ij->i", x, x))
        p = (x @ ab) / np.where(norm > 0, norm, 1.0)[:, None] - shift
        out[lo : lo + block] = p[:, 0] * p[:, 1]
    return out


def top_terms(t: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows of the k largest positive terms, largest first; rows of the k most negative,
    most negative first); ties by row. Fewer when fewer terms have that sign."""

    def best(v: np.ndarray) -> np.ndarray:
        cand = np.flatnonzero(v > 0)
        if len(cand) > k:
            cand = cand[np.argpartition(-v[cand], k - 1)[:k]]
        return cand[np.lexsort((cand, -v[cand]))]

    return best(t), best(-t)


def eigen_directions(a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray, float, np.ndarray]:
    """(λ+, u+, λ-, u-) of S = (a bᵀ + b aᵀ)/2: (a·x)(b·x) = λ+ (u+·x)² + λ- (u-·x)² for all x."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    d = len(a)
    if na == 0 or nb == 0:
        return 0.0, np.zeros(d), 0.0, np.zeros(d)
    ah, bh = a / na, b / nb
    cos = float(np.clip(ah @ bh, -1.0, 1.0))
    up, um = ah + bh, ah - bh
    nu, nm = float(np.linalg.norm(up)), float(np.linalg.norm(um))
    up = up / nu if nu > 0 else np.zeros(d)
    um = um / nm if nm > 0 else np.zeros(d)
    return na * nb * (cos + 1) / 2, up, na * nb * (cos - 1) / 2, um


def faiss_top_terms(
    search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
    rows: Callable[[np.ndarray], np.ndarray],
    n: int,
    a: np.ndarray,
    b: np.ndarray,
    cbar: np.ndarray,
    k: int,
    candidates: int | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """top_terms by candidates: ``search(queries, m)`` returns (scores, ids) of each query's m
    largest inner products with the unit context vectors (a faiss index's search), ``rows(ids)``
    their embeddings. The candidates of ±u+ (for the positive terms) and of ±u- (the negative
    ones) are reranked exactly. A context not among them has |u·c'| at most B, the m-th score
    shifted by u·c̄, so its term at most λ+ B² (at least λ- B²): while the k-th reranked term
    does not beat that bound, m doubles. With an exact index the result is then exact; with an
    IVF index as exact as its search. Returns (up, down, stats)."""
    lam_p, up_dir, lam_m, down_dir = eigen_directions(a, b)
    out, rounds = [], []
    for u, lam, sign in ((up_dir, lam_p, 1.0), (down_dir, lam_m, -1.0)):
        m = min(n, candidates or max(MIN_CANDIDATES, 8 * k))
        while True:
            q = np.ascontiguousarray(np.stack([u, -u]), dtype=np.float32)
            scores, ids = search(q, m)
            cand = np.unique(ids[ids >= 0])
            t = sign * exact_terms(rows(cand), a, b, cbar)
            best = top_terms(t, k)[0]
            shift = float(u @ cbar)
            bound = abs(lam) * max(abs(scores[0, -1] - shift), abs(scores[1, -1] + shift)) ** 2
            done = len(best) == k and t[best[-1]] >= bound
            exhausted = bool((ids[:, -1] < 0).any())  # an IVF search ran out of probed lists
            if done or exhausted or m >= n:
                break
            m = min(n, 2 * m)
        out.append(cand[best])
        rounds.append({"candidates_per_search": m, "bounded": bool(done or m >= n)})
    return out[0], out[1], {"path": "faiss", "up": rounds[0], "down": rounds[1]}


class EmbeddingRows:
    """The `embed` artefact's embeddings (``emb-*.npy``, in row order), memory-mapped: all of
    them in blocks, or some rows by index, without reading the rest."""

    def __init__(self, files: list[Path]) -> None:
        self.parts = [np.load(f, mmap_mode="r", allow_pickle=False) for f in files]
        sizes = [len(p) for p in self.parts]
        self.starts = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        self.n = int(self.starts[-1])
        self.dim = int(self.parts[0].shape[1]) if self.parts else 0

    def take(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, np.int64)
        out = np.empty((len(idx), self.dim), np.float32)
        part = np.searchsorted(self.starts, idx, side="right") - 1
        for p in np.unique(part):
            sel = part == p
            out[sel] = self.parts[p][idx[sel] - self.starts[p]]
        return out

    def terms(self, a: np.ndarray, b: np.ndarray, cbar: np.ndarray) -> np.ndarray:
        return np.concatenate([exact_terms(p, a, b, cbar) for p in self.parts] or [np.empty(0)])


def ivf_index(emb: EmbeddingRows, nprobe: int = 32, seed: int = 0) -> Any:
    """A faiss IVF inner-product index of the unit context vectors (√N lists, trained on a
    seeded sample of 64 per list), ``nprobe`` lists searched."""
    import faiss

    d, n = emb.dim, emb.n
    nlist = max(1, int(math.sqrt(n)))
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(n, min(n, 64 * nlist), replace=False))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
    index.train(np.ascontiguousarray(unit_rows(emb.take(sample)), dtype=np.float32))
    for lo in range(0, n, BLOCK):
        idx = np.arange(lo, min(n, lo + BLOCK))
        index.add(np.ascontiguousarray(unit_rows(emb.take(idx)), dtype=np.float32))
    index.nprobe = nprobe
    return index


def cached_ivf_index(emb: EmbeddingRows, cache: Path, nprobe: int = 32) -> Any:
    """:func:`ivf_index`, written to ``cache/ivf.index`` on first use and memory-mapped from it
    after, so a search reads only the lists it probes (the embeddings of an artefact never
    change: the folder is keyed by its fingerprint)."""
    import faiss

    from ctxsim.store.atomic import atomic_path

    path = cache / "ivf.index"
    if path.exists():
        index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP)
        index.nprobe = nprobe
        return index
    index = ivf_index(emb, nprobe)
    cache.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".index") as tmp:
        faiss.write_index(index, str(tmp))
    return index


def find_top(
    emb: EmbeddingRows,
    a: np.ndarray,
    b: np.ndarray,
    cbar: np.ndarray,
    k: int,
    exact_max: int | None = None,
    index: Callable[[], Any] | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(rows pushing the label up, rows pulling it down, how they were found): exact up to
    ``exact_max`` (default :data:`EXACT_MAX`) contexts, faiss candidates (``index()`` builds or
    reads the index) beyond."""
    if emb.n <= (EXACT_MAX if exact_max is None else exact_max) or index is None:
        t = emb.terms(a, b, cbar)
        up, down = top_terms(t, k)
        stats = {"path": "exact", "contexts": emb.n, "abs_total": float(np.abs(t).sum())}
        return up, down, {**stats, "sum_of_terms": float(t.sum())}
    ix = index()
    up, down, stats = faiss_top_terms(ix.search, emb.take, emb.n, a, b, cbar, k)
    return up, down, {**stats, "contexts": emb.n}


def render_encoder_table(result: dict[str, Any], width: int = 70) -> str:
    """The encoder-route explanation as plain-text tables, like the LM route's."""

    def cut(s: str, n: int) -> str:
        return s if len(s) <= n else s[: n - 1] + "…"

    def pct(x: float | None, n: int) -> str:
        return f"{x:>{n}.2%}" if x is not None and math.isfinite(x) else f"{'-':>{n}}"

    in_run = result["label_in_run"]
    lines = [
        f"run {result['run_id']}  route=encoder ({result['form']}, "
        f"{'centred' if result['centred'] else 'uncentred'})  label={result['label']:.6f}"
        + (f"  (run's label {in_run:.6f})" if in_run is not None else ""),
        f"encoder {result['encoder']}: label = sum over {result['contexts']:,} context units "
        f"({result['unit']}s) of t_c"
        + (f"; sum |t_c| = {result['abs_total']:.6f}" if result["abs_total"] else "")
        + f"; top terms found {result['search']['path']}",
    ]
    for k, s in enumerate(result["sentences"], 1):
        lines.append(f"s{k}: {cut(s['text'], width)}  ({s['encoded_by']})")
    for title, key in (
        ("contexts pushing the label up", "top_up"),
        ("contexts pulling the label down", "top_down"),
    ):
        lines += ["", title + ":"]
        lines.append(
            f"  {'unit':>7} {'t_c':>10} {'of label':>9} {'of |t|':>7} {'cos1':>6} {'cos2':>6}  "
            "source / text"
        )
        for r in result[key]:
            src = r.get("source", {})
            lines.append(
                f"  {r['context_id']:>7} {r['term']:>10.3e} {pct(r['share_of_label'], 9)} "
                f"{pct(r['share_of_abs'], 7)} {r['cos1']:>6.3f} {r['cos2']:>6.3f}  "
                f"{src.get('document')} §{src.get('section_id')}"
            )
            lines.append(f"{'':>12}{cut(r.get('text', ''), width)}")
    if result.get("note"):
        lines += ["", f"note: {result['note']}"]
    return "\n".join(lines)


def unit_info(arts: dict[str, Any], unit: str, ids: np.ndarray) -> dict[int, dict[str, Any]]:
    """Text and provenance of context units: a chunk's sentences with the document and section
    of its first one (``unit: chunk``), a window's two sides c< + c> (``unit: window``), as the
    `embed` stage encoded them (tasks/embed.py ``context_units``)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if unit == "window":
        from ctxsim.product.explain import context_info

        info = context_info(arts, np.asarray(ids, np.int64))
        return {
            cid: {"text": r["left"] + " " + r["right"], "source": r["source"]}
            for cid, r in info.items()
        }
    path = arts["contexts"].files_dir / "chunks.parquet"
    chunks = pq.read_table(path, columns=["chunk_id", "first_sent_id", "n_sents"])
    chunks = chunks.filter(pc.is_in(chunks.column("chunk_id"), pa.array(np.unique(ids))))
    sh = arts["shard"].read_table(["sent_id", "text", "doc_name", "doc_id", "section_id"])
    sh = sh.sort_by("sent_id")
    sent_ids = sh.column("sent_id").to_numpy()
    text = sh.column("text").to_pylist()
    out = {}
    for r in chunks.to_pylist():
        at = int(np.searchsorted(sent_ids, r["first_sent_id"]))
        if at >= len(sent_ids) or sent_ids[at] != r["first_sent_id"]:
            continue
        out[r["chunk_id"]] = {
            "text": " ".join(text[at : at + r["n_sents"]]),
            "source": {
                "kind": "corpus",
                "document": sh.column("doc_name")[at].as_py(),
                "doc_id": sh.column("doc_id")[at].as_py(),
                "section_id": sh.column("section_id")[at].as_py(),
                "chunk_id": r["chunk_id"],
            },
        }
    return out


def pair_label_in_run(label: Any, s1: str, s2: str) -> float | None:
    """The run's own label of the pair (s1, s2) in either order, or None."""
    t = label.read_table(["s1", "s2", "label"])
    a, b = t.column("s1").to_pylist(), t.column("s2").to_pylist()
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if (x, y) in ((s1, s2), (s2, s1)):
            return float(t.column("label")[i].as_py())
    return None


def term_rows(
    emb: EmbeddingRows,
    ids: np.ndarray,
    rows: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    cbar: np.ndarray,
    label: float,
    abs_total: float | None,
    e: np.ndarray,
    info: dict[int, dict[str, Any]],
) -> list[dict[str, Any]]:
    """One dict per row of ``rows``: its unit id, term, shares, fit scores cos(c, s) and text."""
    c = unit_rows(emb.take(rows))
    t = exact_terms(c, a, b, cbar)
    cos = c @ unit_rows(np.asarray(e, np.float64)).T
    out = []
    for k, r in enumerate(rows.tolist()):
        cid = int(ids[r])
        out.append(
            {
                "context_id": cid,
                "term": float(t[k]),
                "share_of_label": float(t[k] / label) if label else None,
                "share_of_abs": float(t[k] / abs_total) if abs_total else None,
                "cos1": float(cos[k, 0]),
                "cos2": float(cos[k, 1]),
                **info.get(cid, {}),
            }
        )
    return out
