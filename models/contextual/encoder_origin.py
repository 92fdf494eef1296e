"""Origin (Sun et al. 2022, Eq. 4) with an encoder as the contextual model.

The fit score of a sentence s in a context c is S(c, s) = cos(E(c), E(s)) for a sentence encoder
E: the discriminative reading of the paper's contextual model (Sec. 3, step 1; Eq. 3's first term).
A sentence's profile is v_s = [S(c, s)]_c over a context set C, and the label of a pair is the
correlation of the two profiles. Three ways of computing it:

(a) **All contexts, linear fit score: a closed form.** With unit context vectors c and their mean
    c̄, the Pearson correlation of two profiles over every context is
    e1ᵀ M e2 / sqrt(e1ᵀ M e1 · e2ᵀ M e2), M = Σ_c (c - c̄)(c - c̄)ᵀ (the d x d scatter matrix),
    i.e. the cosine of M^(1/2) e1 and M^(1/2) e2. The corpus enters through one matrix built in
    one streaming pass (:class:`ScatterStats`, a sum over shards), and labels cost only the
    sentence encodings. Uncentred profiles (cosine instead of Pearson) use Σ_c c cᵀ.
(b) **A calibrated, non-linear fit score:** p(c | s) = softmax_c(cos(c, s) / τ) over all contexts.
    Its log-profile is the linear one shifted by a constant per sentence, so with centred profiles
    it equals (a) exactly; the probability profile (``space="prob"``) is not linear, so it is
    computed explicitly, blocked over sentences so memory stays at ``block x n_contexts``.
    Small τ approaches a hard top-K set, large τ the linear profile.
(c) **Top-K unions** (the paper's C = Cs1 + Cs2): each sentence's K best contexts by inner product
    (faiss, exact up to ``exact_max`` contexts, IVF beyond it), the profiles over their union.

Everything here is numpy (faiss for search); reading and writing artefacts is the stages' job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), float64."""
    x = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norm > 0, norm, 1.0)


@dataclass
class ScatterStats:
    """n, Σ c and Σ c cᵀ of unit context vectors: enough for the centred or uncentred M.

    Additive, so shards are summed in any order (float64 keeps the sum stable at corpus size).
    """

    n: int
    total: np.ndarray  # (d,)
    outer: np.ndarray  # (d, d)

    @classmethod
    def of(cls, emb: np.ndarray) -> ScatterStats:
        c = unit_rows(emb)
        return cls(n=len(c), total=c.sum(axis=0), outer=c.T @ c)

    @classmethod
    def empty(cls, dim: int) -> ScatterStats:
        return cls(n=0, total=np.zeros(dim), outer=np.zeros((dim, dim)))

    @property
    def dim(self) -> int:
        return int(self.total.shape[0])

    def merge(self, other: ScatterStats) -> ScatterStats:
        if other.dim != self.dim:
            raise ValueError(f"scatter stats of dimension {self.dim} and {other.dim} cannot merge")
        return ScatterStats(self.n + other.n, self.total + other.total, self.outer + other.outer)

    def matrix(self, centred: bool = True) -> np.ndarray:
        """M = Σ (c - c̄)(c - c̄)ᵀ (centred) or Σ c cᵀ, divided by n (scale does not matter)."""
        if self.n == 0:
            raise ValueError("scatter matrix of no contexts")
        m = self.outer - np.outer(self.total, self.total) / self.n if centred else self.outer
        m = (m + m.T) / (2 * self.n)  # symmetric to the last bit
        return m

    def save(self, path: str | Path) -> None:
        with open(path, "wb") as f:
            np.savez(f, n=np.int64(self.n), total=self.total, outer=self.outer)

    @classmethod
    def load(cls, path: str | Path) -> ScatterStats:
        """Read and check a saved scatter: finite, square, consistent shapes."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                n, total, outer = int(z["n"]), z["total"], z["outer"]
        except (OSError, KeyError, ValueError) as exc:
            raise ValueError(f"{path}: not a scatter file ({exc})") from exc
        d = total.shape[0] if total.ndim == 1 else -1
        if d < 1 or outer.shape != (d, d) or n < 0:
            raise ValueError(f"{path}: scatter of shapes {total.shape} / {outer.shape}, n={n}")
        if not (np.isfinite(total).all() and np.isfinite(outer).all()):
            raise ValueError(f"{path}: the scatter matrix is not finite (NaN or inf)")
        return cls(n=n, total=total.astype(np.float64), outer=outer.astype(np.float64))


def psd_sqrt(m: np.ndarray) -> np.ndarray:
    """The symmetric square root of a positive semi-definite matrix (tiny negative eigenvalues,
    rounding error, are clipped to 0)."""
    w, v = np.linalg.eigh((m + m.T) / 2)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def adapted_embeddings(e: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Unit rows of e · M^(1/2): their cosine is the closed-form Origin of (a)."""
    return unit_rows(unit_rows(e) @ psd_sqrt(m))


def closed_form_similarity(e1: np.ndarray, e2: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Origin of each pair (rows of e1, e2) over all contexts: e1ᵀMe2 / sqrt(e1ᵀMe1 e2ᵀMe2)."""
    a, b = unit_rows(e1), unit_rows(e2)
    am, bm = a @ m, b @ m
    num = (am * b).sum(axis=1)
    den = np.sqrt(np.clip((am * a).sum(axis=1), 0, None) * np.clip((bm * b).sum(axis=1), 0, None))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def _profile_similarity(p1: np.ndarray, p2: np.ndarray, centred: bool) -> np.ndarray:
    """Row-wise Pearson (centred) or cosine of two profile blocks."""
    if centred:
        p1 = p1 - p1.mean(axis=1, keepdims=True)
        p2 = p2 - p2.mean(axis=1, keepdims=True)
    num = (p1 * p2).sum(axis=1)
    den = np.sqrt((p1 * p1).sum(axis=1) * (p2 * p2).sum(axis=1))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def softmax_profiles(
    e: np.ndarray, contexts: np.ndarray, tau: float, space: str = "prob"
) -> np.ndarray:
    """[p(c | s)]_c (``prob``) or [log p(c | s)]_c (``log``), p = softmax_c(cos(c, s) / τ)."""
    if tau <= 0 or not math.isfinite(tau):
        raise ValueError(f"softmax temperature must be a positive number, got {tau}")
    if space not in ("prob", "log"):
        raise ValueError(f"profile space must be 'prob' or 'log', got {space!r}")
    z = (unit_rows(e) @ unit_rows(contexts).T) / tau
    z -= z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z).sum(axis=1, keepdims=True))
    return np.exp(z - log_norm) if space == "prob" else z - log_norm


def softmax_profile_similarity(
    e1: np.ndarray,
    e2: np.ndarray,
    contexts: np.ndarray,
    tau: float,
    centred: bool = True,
    space: str = "prob",
    block: int = 1024,
) -> np.ndarray:
    """Origin with the calibrated fit score p(c | s), exact over every context, ``block`` pairs at
    a time (memory ~ 2 · block · n_contexts floats)."""
    c = unit_rows(contexts)
    out = np.empty(len(e1))
    for i in range(0, len(e1), block):
        p1 = softmax_profiles(e1[i : i + block], c, tau, space)
        p2 = softmax_profiles(e2[i : i + block], c, tau, space)
        out[i : i + block] = _profile_similarity(p1, p2, centred)
    return out


def top_k_contexts(
    e: np.ndarray, contexts: np.ndarray, k: int, exact_max: int = 200_000, nprobe: int = 32
) -> np.ndarray:
    """Each sentence's k best contexts by cosine: faiss IndexFlatIP (exact) up to ``exact_max``
    contexts, IVF (inner product, ``nprobe`` lists) beyond it; GPU when faiss has one."""
    import faiss

    c = np.ascontiguousarray(unit_rows(contexts), dtype=np.float32)
    q = np.ascontiguousarray(unit_rows(e), dtype=np.float32)
    k = min(k, len(c))
    d = c.shape[1]
    if len(c) <= exact_max:
        index = faiss.IndexFlatIP(d)
    else:
        nlist = int(4 * math.sqrt(len(c)))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(0)
        index.train(c[rng.choice(len(c), min(len(c), 64 * nlist), replace=False)])
        index.nprobe = nprobe
    if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:  # pragma: no cover - GPU
        index = faiss.index_cpu_to_all_gpus(index)
    index.add(c)
    _, ids = index.search(q, k)
    return ids


def topk_union_similarity(
    e1: np.ndarray,
    e2: np.ndarray,
    contexts: np.ndarray,
    k: int,
    centred: bool = True,
    exact_max: int = 200_000,
) -> np.ndarray:
    """Origin over C = Cs1 ∪ Cs2, each Cs the sentence's k nearest contexts (Sec. 3.3)."""
    c = unit_rows(contexts)
    a, b = unit_rows(e1), unit_rows(e2)
    top_a = top_k_contexts(a, c, k, exact_max)
    top_b = top_k_contexts(b, c, k, exact_max)
    out = np.empty(len(a))
    for i in range(len(a)):
        union = np.union1d(top_a[i][top_a[i] >= 0], top_b[i][top_b[i] >= 0])
        cu = c[union]
        out[i] = _profile_similarity((cu @ a[i])[None], (cu @ b[i])[None], centred)[0]
    return out


def explicit_profile_similarity(
    e1: np.ndarray, e2: np.ndarray, contexts: np.ndarray, centred: bool = True
) -> np.ndarray:
    """The naive way of (a), profiles written out over every context: the check of the closed
    form and the baseline of its bench."""
    c = unit_rows(contexts)
    return _profile_similarity(unit_rows(e1) @ c.T, unit_rows(e2) @ c.T, centred)
