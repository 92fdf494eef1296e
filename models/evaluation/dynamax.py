"""DynaMax-Jaccard (Zhelezniak et al. 2019, Algorithm 1): a model-free STS baseline.

The two sentences' word vectors are stacked into a universe U; each sentence is the element-wise
max over its words of ``w U^T`` (clipped at 0 by the all-zero row z), and the similarity is the
fuzzy Jaccard index ``sum(min(x, y)) / sum(max(x, y))``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def dynamax_jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """DynaMax-Jaccard of two sentences given their word vectors (k, d) and (l, d)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"expected (k, d) and (l, d) word vectors, got {x.shape} and {y.shape}")
    if len(x) == 0 or len(y) == 0:
        return 0.0
    u = np.concatenate([x, y], axis=0)
    fx = np.maximum((x @ u.T).max(axis=0), 0.0)
    fy = np.maximum((y @ u.T).max(axis=0), 0.0)
    den = np.maximum(fx, fy).sum()
    return float(np.minimum(fx, fy).sum() / den) if den > 0 else 0.0


def dynamax_pairs(
    ids1: Sequence[Sequence[int]], ids2: Sequence[Sequence[int]], vectors: np.ndarray
) -> np.ndarray:
    """DynaMax-Jaccard for many pairs of token-id sequences over one word-vector table."""
    if len(ids1) != len(ids2):
        raise ValueError(f"{len(ids1)} first sentences but {len(ids2)} second sentences")
    vec = np.asarray(vectors, dtype=np.float32)
    return np.array(
        [dynamax_jaccard(vec[list(a)], vec[list(b)]) for a, b in zip(ids1, ids2, strict=True)],
        dtype=np.float64,
    )
