"""Stage `score`: S(s, c) of Eq. (3) for every (sentence, context) pair that labelling needs.

Which pairs: for every labelled pair (a, b) of `pairs`, both a and b against every context of
Cs_a ∪ Cs_b (Cs from `select`), deduplicated (models/origin.py ``required_scores``, the same rule
the `label` stage looks scores up by), so each distinct (query, context) is scored once.

S itself (its terms, PMI baselines, generated slots and the score cache) is computed by
``scores/eq3.py``, which `select` shares.

Sharded like the queries: shard k scores the pairs whose query is in queries' shard k.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctxsim.models.origin import ContextSets, required_scores
from ctxsim.scores import SCORE_SCHEMA, ScoreParams, query_texts, score_rows
from ctxsim.store.stage import Stage, StageContext

__all__ = ["SCORE_SCHEMA", "ScoreParams", "ScoreStage", "required_pairs"]


def required_pairs(ctx: StageContext) -> tuple[np.ndarray, np.ndarray]:
    """(query_id, context_id), unique and sorted: {a, b} x (Cs_a ∪ Cs_b) over labelled pairs."""
    sel = ctx.input("select").read_table(["query_id", "context_id", "position"])
    pairs = ctx.input("pairs").read_table()
    for col in ("s1_query_id", "s2_query_id"):
        if col not in pairs.column_names:
            raise ValueError(f"score: the pairs artefact lacks column {col!r} ({pairs.schema})")
    cs = ContextSets.from_rows(
        sel.column("query_id").to_numpy(),
        sel.column("context_id").to_numpy(),
        sel.column("position").to_numpy(),
    )
    return required_scores(
        cs, pairs.column("s1_query_id").to_numpy(), pairs.column("s2_query_id").to_numpy()
    )


class ScoreStage(Stage):
    name = "score"
    version = "2"  # 2: null_* columns (pmi)
    Params = ScoreParams
    inputs = ("queries", "contexts", "shard", "generator", "select", "pairs")
    shard_by = "queries"
    optional_inputs = ("screen", "discriminator", "gencontexts")
    run_fields = ()

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        total = super().summarize(ctx, shard_stats)
        total["directions"] = ",".join(ctx.params.directions())  # the generative terms computed
        return total

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: ScoreParams = ctx.params
        t0 = time.perf_counter()
        queries = ctx.input("queries").read_table(["query_id", "text", "shard"])
        in_shard = queries.filter(pc.equal(queries.column("shard"), shard))
        q_all, c_all = required_pairs(ctx)
        keep = np.isin(q_all, in_shard.column("query_id").to_numpy())
        qid, cid = q_all[keep], c_all[keep]
        n = len(qid)
        if n == 0:
            return SCORE_SCHEMA.empty_table(), {"pairs": 0, "queries": 0}

        table, stats = score_rows(ctx, p, qid, cid, query_texts(in_shard, qid))
        backend = stats.pop("backend")
        stats["seconds"] = round(time.perf_counter() - t0, 3)
        ctx.logger.info(
            f"score shard {shard}: {n} pairs in {stats['gen_seconds']:.1f}s "
            f"({n / max(stats['gen_seconds'], 1e-9):.1f} pairs/s, backend {backend})"
        )
        return table, stats
