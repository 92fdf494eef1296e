"""The LM route of the `label` stage: Eq. 4 over the context sets of `select`, with the Eq. 3
scores of `score` looked up (never recomputed), vectorised over blocks of pairs
(models/contextual/origin.py); the ablation views (S without each term) come from the same
rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ctxsim.models.contextual.origin import (
    SIMILARITIES,
    TERMS,
    ContextSets,
    ScoreLookup,
    recover_lambdas,
    required_scores,
)
from ctxsim.scores.views import labels_at, read_cs_sizes, score_views
from ctxsim.store.stage import StageContext

if TYPE_CHECKING:
    from ctxsim.tasks.label import LabelParams


def required_score_table(select: pa.Table, pairs: pa.Table) -> pa.Table:
    """The (query_id, context_id) pairs whose S the `score` stage must compute so that every
    pair can be labelled: {s1, s2} x (Cs1 ∪ Cs2), each once, sorted."""
    cs = ContextSets.from_rows(
        select.column("query_id").to_numpy(),
        select.column("context_id").to_numpy(),
        select.column("position").to_numpy() if "position" in select.column_names else None,
    )
    q, c = required_scores(
        cs, pairs.column("s1_query_id").to_numpy(), pairs.column("s2_query_id").to_numpy()
    )
    return pa.table({"query_id": q, "context_id": c})


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


def lm_labels(ctx: StageContext, p: LabelParams, pairs: pa.Table, given: bool) -> tuple[Any, ...]:
    """Eq. 4 over the context sets of `select` with the Eq. 3 scores of `score`: (labels
    [n, 5] of S and each term, n_ctx1, n_ctx2, view names, λ, other similarities, lookups)."""
    sel = ctx.input("select").read_table(["query_id", "context_id", "position"])
    score = ctx.input("score").read_table()
    cs = ContextSets.from_rows(
        sel.column("query_id").to_numpy(),
        sel.column("context_id").to_numpy(),
        sel.column("position").to_numpy(),
    )
    s1 = pairs.column("s1_query_id").to_numpy()
    s2 = pairs.column("s2_query_id").to_numpy()
    names, values, lam = ablation_views(score, given and p.ablations)
    lookup = ScoreLookup(
        score.column("query_id").to_numpy(), score.column("context_id").to_numpy(), values
    )
    # adaptive |Cs| (score.adaptive_rounds): each pair over the contexts it stopped at
    cs_size = read_cs_sizes(
        ctx.input("score").files_dir, pairs.column("pair_id").to_numpy().astype(np.int64)
    )
    labels = labels_at(cs, s1, s2, lookup, cs_size, p.block_pairs, p.similarity)
    # S under every other vector similarity, for given pairs (the S column only)
    other: dict[str, np.ndarray] = {}
    if given:
        s_only = ScoreLookup(
            score.column("query_id").to_numpy(),
            score.column("context_id").to_numpy(),
            values[:, :1],
        )
        other = {
            f"sim_{how}": labels_at(cs, s1, s2, s_only, cs_size, p.block_pairs, how)[:, 0]
            for how in SIMILARITIES
            if how != p.similarity
        }

    n1, n2 = cs.sizes(s1), cs.sizes(s2)
    if cs_size is not None:
        n1, n2 = np.minimum(n1, cs_size), np.minimum(n2, cs_size)
    return labels, n1, n2, names, lam, other, lookup.n_lookups
