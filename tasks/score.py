"""Stage `score`: S(s, c) of Eq. (3) for every (sentence, context) pair that labelling needs.

Which pairs: for every labelled pair (a, b) of `pairs`, both a and b against every context of
Cs_a ∪ Cs_b (Cs from `select`), deduplicated (models/contextual/origin.py ``required_scores``, the
same rule
the `label` stage looks scores up by), so each distinct (query, context) is scored once.

S itself (its terms, PMI baselines, generated slots and the score cache) is computed by
``scores/eq3.py``, which `select` shares.

Sharded like the queries: shard k scores the pairs whose query is in queries' shard k.

With ``adaptive_rounds`` (adaptive |Cs|, models/contextual/adaptive_cs.py) the stage scores in
rounds of
growing |Cs| prefixes and stops each pair once its Eq. 4 label has settled; it runs as one shard
and writes ``files/adaptive.parquet`` (pair_id, cs_size), by which `label` labels each pair.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ctxsim.models.contextual.adaptive_cs import adaptive_origin
from ctxsim.models.contextual.origin import ContextSets, ScoreLookup, required_scores
from ctxsim.scores import SCORE_SCHEMA, ScoreParams, query_texts, score_rows
from ctxsim.scores.views import ADAPTIVE_FILE, score_views
from ctxsim.store.atomic import atomic_path
from ctxsim.store.cost_model import PerQueryRows
from ctxsim.store.stage import Stage, StageContext

__all__ = ["ADAPTIVE_FILE", "SCORE_SCHEMA", "ScoreParams", "ScoreStage", "required_pairs"]


def _sets_and_pairs(
    ctx: StageContext, columns: tuple[str, ...] = ("s1_query_id", "s2_query_id")
) -> tuple[ContextSets, pa.Table]:
    sel = ctx.input("select").read_table(["query_id", "context_id", "position"])
    pairs = ctx.input("pairs").read_table()
    for col in columns:
        if col not in pairs.column_names:
            raise ValueError(f"score: the pairs artefact lacks column {col!r} ({pairs.schema})")
    cs = ContextSets.from_rows(
        sel.column("query_id").to_numpy(),
        sel.column("context_id").to_numpy(),
        sel.column("position").to_numpy(),
    )
    return cs, pairs


def required_pairs(ctx: StageContext) -> tuple[np.ndarray, np.ndarray]:
    """(query_id, context_id), unique and sorted: {a, b} x (Cs_a ∪ Cs_b) over labelled pairs."""
    cs, pairs = _sets_and_pairs(ctx)
    return required_scores(
        cs, pairs.column("s1_query_id").to_numpy(), pairs.column("s2_query_id").to_numpy()
    )


class ScoreStage(Stage):
    name = "score"
    # 2: null_* columns (pmi); 3: adaptive |Cs|; 4: a target's last token not run, and on CPU
    # attention as grouped products (scores move by float rounding)
    version = "4"
    Params = ScoreParams
    inputs = ("queries", "contexts", "shard", "generator", "select", "pairs")
    shard_by = "queries"
    optional_inputs = ("screen", "discriminator", "gencontexts")
    run_fields = ()
    cost = PerQueryRows(gpu_tokens="padded_tokens")  # scored rows per query; GPU: its tokens
    per_query = True
    labelling = True

    def num_shards(self, ctx: StageContext) -> int:
        return 1 if ctx.params.adaptive_rounds else super().num_shards(ctx)

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        total = super().summarize(ctx, shard_stats)
        total["directions"] = ",".join(ctx.params.directions())  # the generative terms computed
        return total

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: ScoreParams = ctx.params
        t0 = time.perf_counter()
        queries = ctx.input("queries").read_table(["query_id", "text", "shard"])
        if p.adaptive_rounds:
            return self._adaptive(ctx, p, queries, t0)
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

    def _adaptive(
        self, ctx: StageContext, p: ScoreParams, queries: pa.Table, t0: float
    ) -> tuple[pa.Table, dict[str, Any]]:
        """Rounds of growing |Cs| prefixes; each round scores only the windows not yet scored
        that the still-unsettled pairs need (models/contextual/adaptive_cs.py decides who
        settles)."""
        cs, pairs = _sets_and_pairs(ctx, ("pair_id", "s1_query_id", "s2_query_id"))
        s1 = pairs.column("s1_query_id").to_numpy()
        s2 = pairs.column("s2_query_id").to_numpy()
        full = int(np.diff(cs.offsets).max(initial=0))
        rounds = sorted({k for k in p.adaptive_rounds if k < full} | {max(full, 1)})
        parts: list[pa.Table] = []
        done = np.zeros((0, 2), np.int64)
        totals: dict[str, Any] = {}

        def score_round(qid: np.ndarray, cid: np.ndarray) -> ScoreLookup:
            nonlocal done
            want = np.stack([qid, cid], 1)
            new = want[~_rows_in(want, done)] if len(done) else want
            if len(new):
                table, stats = score_rows(
                    ctx, p, new[:, 0], new[:, 1], query_texts(queries, new[:, 0])
                )
                totals["backend"] = stats.pop("backend")
                for k, v in stats.items():
                    if isinstance(v, int | float) and not isinstance(v, bool):
                        totals[k] = totals.get(k, 0) + v
                parts.append(table)
                done = np.concatenate([done, new])
            scored = pa.concat_tables(parts) if parts else SCORE_SCHEMA.empty_table()
            _, values = score_views(scored)
            return ScoreLookup(
                scored.column("query_id").to_numpy(), scored.column("context_id").to_numpy(), values
            )

        res = adaptive_origin(cs, s1, s2, score_round, rounds, p.adaptive_tol)
        table = pa.concat_tables(parts) if parts else SCORE_SCHEMA.empty_table()
        table = table.sort_by([("query_id", "ascending"), ("context_id", "ascending")])
        sizes = pa.table(
            {"pair_id": pairs.column("pair_id").cast(pa.int64()), "cs_size": res.k_used}
        )
        with atomic_path(ctx.files_dir / ADAPTIVE_FILE) as tmp:
            pq.write_table(sizes, tmp)
        q_full, _ = required_scores(cs, s1, s2)
        backend = totals.pop("backend", "")
        stats = {
            **totals,
            "pairs": table.num_rows,
            "queries": len(np.unique(table.column("query_id").to_numpy())),
            "adaptive_rounds": ",".join(map(str, rounds)),
            "adaptive_tol": p.adaptive_tol,
            "windows_full_cs": len(q_full),
            "windows_saved": round(1.0 - table.num_rows / max(len(q_full), 1), 4),
            "mean_cs_size": round(float(res.k_used.mean()), 3) if len(res.k_used) else 0.0,
            "seconds": round(time.perf_counter() - t0, 3),
        }
        ctx.logger.info(
            f"score (adaptive |Cs| {stats['adaptive_rounds']}, tol {p.adaptive_tol}): "
            f"{table.num_rows} of {len(q_full)} windows, mean |Cs| {stats['mean_cs_size']}, "
            f"backend {backend}"
        )
        return table, stats


def _rows_in(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Which rows of the (n, 2) int array ``a`` occur in ``b``."""
    view = np.dtype((np.void, 16))
    return np.isin(
        np.ascontiguousarray(a, np.int64).view(view).ravel(),
        np.ascontiguousarray(b, np.int64).view(view).ravel(),
    )
