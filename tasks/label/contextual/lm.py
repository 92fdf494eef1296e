"""The LM route (``contextual: lm``, the paper): Eq. 4 over the context sets of `select`, with the
Eq. 3 scores of `score` looked up (never recomputed), vectorised over blocks of pairs
(models/contextual/origin.py); the label from each Eq. 3 term alone and the ablation views (S
without each term) come from the same rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from ctxsim.models.contextual.origin import (
    SIMILARITIES,
    ContextSets,
    ScoreLookup,
    required_scores,
)
from ctxsim.scores.views import ablation_views, labels_at, read_cs_sizes
from ctxsim.store.stage import knob
from ctxsim.tasks.label.contextual.base import (
    LABEL_COLUMNS,
    ContextualLabels,
    ContextualModel,
    ContextualSettings,
    PairsToLabel,
    register,
)

if TYPE_CHECKING:
    from ctxsim.store.stage import StageContext


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


class LmSettings(ContextualSettings):
    """`label.lm`: the LM route (Eq. 3 scores of `score` over the context sets of `select`)."""

    similarity: Literal["cosine", "pearson", "neg_rmse", "cross_fit"] = Field(
        "cosine",
        description=(
            "How the context vectors v_s1 and v_s2 are compared (models/contextual/origin.py "
            "SIMILARITIES); the paper's Eq. 4 is cosine."
        ),
    )
    ablations: bool = Field(
        True,
        description=(
            "For given pairs, also report each Eq. 3 term's labels alone and without it (Spearman "
            "against gold)."
        ),
    )
    block_pairs: int = knob(
        20_000,
        ge=1,
        description=(
            "Pairs labelled per vectorised block; bounds memory, each pair's label does not depend "
            "on it. Out of the fingerprint."
        ),
    )

    flat_keys: ClassVar[dict[str, str]] = {
        "similarity": "similarity",
        "ablations": "ablations",
        "block_pairs": "block_pairs",
    }


@register
class LmContextual(ContextualModel):
    """Eq. 3 scores over Cs (``label.lm``: how the two score vectors are compared, the ablation
    views, the block size)."""

    name = "lm"
    inputs = ("select", "score")
    #: the generator's backbone gives the mean-pooled-cosine baseline of the Origin report;
    #: retrieve and screen give the per-query yields of the diagnostics
    optional_inputs = ("generator", "retrieve", "screen")
    columns = LABEL_COLUMNS
    n_ctx = "|Cs| of the sentence (from select; the prefix it stopped at under adaptive |Cs|)"

    settings = LmSettings

    def labels(
        self, ctx: StageContext, settings: LmSettings, pairs: PairsToLabel
    ) -> ContextualLabels:
        """Eq. 4 over the context sets of `select` with the Eq. 3 scores of `score`, for S and
        each term; S under every other vector similarity for given pairs."""
        lm = settings
        sel = ctx.input("select").read_table(["query_id", "context_id", "position"])
        score = ctx.input("score").read_table()
        cs = ContextSets.from_rows(
            sel.column("query_id").to_numpy(),
            sel.column("context_id").to_numpy(),
            sel.column("position").to_numpy(),
        )
        s1, s2 = pairs.s1, pairs.s2
        names, values, lam = ablation_views(score, pairs.given and lm.ablations)
        lookup = ScoreLookup(
            score.column("query_id").to_numpy(), score.column("context_id").to_numpy(), values
        )
        # adaptive |Cs| (score.adaptive_rounds): each pair over the contexts it stopped at
        cs_size = read_cs_sizes(
            ctx.input("score").files_dir,
            pairs.table.column("pair_id").to_numpy().astype(np.int64),
        )
        labels = labels_at(cs, s1, s2, lookup, cs_size, lm.block_pairs, lm.similarity)
        # each term alone and S without each (ablations), then S under every other vector
        # similarity (the S column only), for given pairs
        views = {names[k]: labels[:, k] for k in range(1, len(names)) if lm.ablations}
        if pairs.given:
            s_only = ScoreLookup(
                score.column("query_id").to_numpy(),
                score.column("context_id").to_numpy(),
                values[:, :1],
            )
            views |= {
                f"sim_{how}": labels_at(cs, s1, s2, s_only, cs_size, lm.block_pairs, how)[:, 0]
                for how in SIMILARITIES
                if how != lm.similarity
            }
        n1, n2 = cs.sizes(s1), cs.sizes(s2)
        if cs_size is not None:
            n1, n2 = np.minimum(n1, cs_size), np.minimum(n2, cs_size)
        return ContextualLabels(
            columns={c: labels[:, k] for k, c in enumerate(LABEL_COLUMNS)},
            n_ctx1=n1,
            n_ctx2=n2,
            views=views,
            lambdas=lam,
            score_lookups=lookup.n_lookups,
        )
