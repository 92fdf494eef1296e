"""The score artefact as Eq. 4 reads it: one value column per view (S and each Eq. 3 term), and
the |Cs| each pair stopped at under adaptive |Cs|, and the ablation views of Eq. 3's terms;
shared by `score`, `label` and the Origin benches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ctxsim.models.contextual.adaptive_cs import prefix_sets
from ctxsim.models.contextual.origin import (
    TERM_COLUMNS,
    TERMS,
    ContextSets,
    ScoreLookup,
    origin_labels,
    recover_lambdas,
)

ADAPTIVE_FILE = "adaptive.parquet"  # in the score artefact's files: (pair_id, cs_size)


def score_views(score: pa.Table) -> tuple[list[str], np.ndarray]:
    """(names, values[n, k]) of the score views: S and each Eq. 3 term (NaN where absent)."""
    if "S" not in score.column_names:
        raise ValueError("score artefact has no column 'S' (Eq. 3)")
    names = ["S", *TERMS]
    cols = []
    for name in names:
        col = "S" if name == "S" else TERM_COLUMNS[name]
        if col in score.column_names:
            arr = score.column(col).cast(pa.float64()).to_numpy(zero_copy_only=False)
            cols.append(np.where(np.isnan(arr), np.nan, arr))
        else:
            cols.append(np.full(score.num_rows, np.nan))
    return names, np.stack(cols, axis=1) if cols else np.zeros((0, len(names)))


def ablation_views(
    score: pa.Table, ablations: bool
) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """Score views, plus S without each term (Table 9) and without both context terms when
    ``ablations`` and the λ of Eq. 3 can be recovered from the rows; returns (names, values, λ)."""
    names, values = score_views(score)
    if not ablations:
        return names, values, None
    lam = recover_lambdas(values[:20000, 0], values[:20000, 1:])
    if lam is None:
        return names, values, None
    tiny = 1e-4 * max(1.0, float(np.nanmax(np.abs(values[:, 0]), initial=0.0)))

    def without(col: np.ndarray) -> np.ndarray:
        # S had no other term: what is left is float rounding of λ, not a score (NaN, no view)
        return np.full_like(col, np.nan) if np.nanmax(np.abs(col), initial=0.0) <= tiny else col

    for k, term in enumerate(TERMS):
        if lam[k] != 0 and not np.all(np.isnan(values[:, 1 + k])):
            names.append(f"wo_{term}")
            rest = without(values[:, 0] - lam[k] * values[:, 1 + k])
            values = np.column_stack([values, rest])
    both = lam[2] * np.nan_to_num(values[:, 3]) + lam[3] * np.nan_to_num(values[:, 4])
    names.append("wo_both_contexts")
    return names, np.column_stack([values, without(values[:, 0] - both)]), lam


def read_cs_sizes(score_files: Path, pair_ids: np.ndarray) -> np.ndarray | None:
    """The |Cs| each pair (by ``pair_ids``) stopped at, or None when `score` was not adaptive."""
    path = score_files / ADAPTIVE_FILE
    if not path.exists():
        return None
    t = pq.read_table(path)
    keys = t.column("pair_id").to_numpy()
    order = np.argsort(keys, kind="stable")
    pos = np.searchsorted(keys[order], pair_ids)
    pos = np.minimum(pos, len(keys) - 1) if len(keys) else pos
    if len(pair_ids) and (not len(keys) or np.any(keys[order][pos] != pair_ids)):
        raise ValueError(f"{path}: does not name every labelled pair_id")
    return t.column("cs_size").to_numpy()[order][pos].astype(np.int64)


def labels_at(
    cs: ContextSets,
    s1: np.ndarray,
    s2: np.ndarray,
    lookup: ScoreLookup,
    cs_size: np.ndarray | None,
    block_pairs: int,
    similarity: str,
) -> np.ndarray:
    """Eq. 4 labels, each pair over the first ``cs_size`` contexts of its sets (all when None)."""
    if cs_size is None:
        return origin_labels(cs, s1, s2, lookup, block_pairs, similarity)
    out = np.full((len(s1), lookup.values.shape[1]), np.nan)
    for k in np.unique(cs_size):
        m = cs_size == k
        out[m] = origin_labels(
            prefix_sets(cs, int(k)), s1[m], s2[m], lookup, block_pairs, similarity
        )
    return out
