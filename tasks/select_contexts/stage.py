"""Stage `select`: a diverse context set Cs for every query (Sec. 3.3, "Constructing C").

The class; the package's docstring (__init__.py) says what it does and which file does what.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctxsim.models.corpus.selection import select as select_contexts
from ctxsim.models.corpus.selection import token_ranks
from ctxsim.scores import query_texts, score_rows
from ctxsim.scores.slots import contexts_with_generated, sentences_with_generated
from ctxsim.store.cost_model import PerQueryRows
from ctxsim.store.errors import InputError
from ctxsim.store.stage import Stage, StageContext
from ctxsim.tasks.select_contexts.lookups import ContextIndex, SentenceTexts
from ctxsim.tasks.select_contexts.params import SelectParams

SELECT_SCHEMA = pa.schema(
    [
        ("query_id", pa.int64()),
        ("context_id", pa.int64()),
        ("position", pa.int32()),
        ("chunk_id", pa.int64()),
        ("rank", pa.int32()),
        ("order_score", pa.float32()),
    ]
)


def generated_ranks(query_id: np.ndarray, sample: np.ndarray, left: np.ndarray) -> np.ndarray:
    """Each generated slot's rank among its query's slots: sample order, right before left, no
    gaps (a side not sampled, or an empty sample, leaves none), so that ``source: both`` puts
    the r-th sample beside the r-th screened context whatever k_left and k_right are."""
    q = np.asarray(query_id, np.int64)
    order = np.lexsort((np.asarray(left, np.int64), np.asarray(sample, np.int64), q))
    sq = q[order]
    first = np.searchsorted(sq, sq)  # where each query's run starts in the sorted order
    ranks = np.empty(len(q), np.int64)
    ranks[order] = np.arange(len(q)) - first
    return ranks


class SelectStage(Stage):
    name = "select"
    # 2: generated slots ranked 0, 1, 2 ... (were 0, 2, 4 ... without left samples); 3: order_by
    # score reranks with the score stage's version 4 arithmetic (near ties may swap)
    version = "3"
    Params = SelectParams
    inputs = ("queries", "contexts", "shard")
    shard_by = "queries"
    optional_inputs = ("screen", "generator", "discriminator", "gencontexts")
    #: context-set rows per query (up to max_size; more where retrieve finds more), and the
    #: generative re-scoring of its reranked rows
    cost = PerQueryRows(
        cap="max_size",
        chunks="contexts",
        feeder="retrieve",
        feeder_cap="top_k",
        gpu_rows="reranked",
    )
    per_query = True

    def optional_inputs_for(self, params: SelectParams) -> tuple[str, ...]:
        used = self.optional_inputs if params.order_by == "score" else ("screen",)
        if params.source != "retrieve":
            used = (*used, "gencontexts") if "gencontexts" not in used else used
        else:
            used = tuple(u for u in used if u != "gencontexts")
        return used

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: SelectParams = ctx.params
        queries = ctx.input("queries").read_table(["query_id", "sent_id", "shard"])
        queries = queries.filter(pc.equal(queries["shard"], shard))
        qids = queries.column("query_id").to_numpy()
        qsent = queries.column("sent_id").to_pylist()
        contexts = ContextIndex(contexts_with_generated(ctx))
        if p.strategy == "random":
            rows = self._random(ctx, p, qids, qsent, contexts)
            n_cand, rerank = 0, {}
        else:
            rows, n_cand, rerank = self._ranked(ctx, p, shard, qids, qsent, contexts)
        table = pa.table(rows, schema=SELECT_SCHEMA)
        sizes = np.bincount(
            np.searchsorted(qids, table.column("query_id").to_numpy()), minlength=len(qids)
        )
        stats = {
            "queries": int(len(qids)),
            "selected": int(table.num_rows),
            "candidates": int(n_cand),
            "queries_short": int((sizes < p.max_size).sum()),  # |Cs| below max_size
            "queries_empty": int((sizes == 0).sum()),
            **rerank,
        }
        return table, stats

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        total = super().summarize(ctx, shard_stats)
        total["mean_cs"] = round(total.get("selected", 0) / max(1, total.get("queries", 0)), 3)
        p: SelectParams = ctx.params
        total.update(strategy=p.strategy, max_size=p.max_size, method=p.method, order_by=p.order_by)
        return total

    # ---- strategies ---------------------------------------------------------------------------
    def _ranked(
        self,
        ctx: StageContext,
        p: SelectParams,
        shard: int,
        qids: np.ndarray,
        qsent: list[int | None],
        contexts: ContextIndex,
    ) -> tuple[dict[str, list], int, dict[str, Any]]:
        cand = self._candidates(ctx, p, shard, qids)
        order = np.lexsort((cand["generated"], cand["rank"], cand["query_id"]))
        sq = cand["query_id"][order]
        sc = cand["context_id"][order]
        sch = cand["chunk_id"][order]
        srank = cand["rank"][order]
        sown = cand["is_own"][order]
        sgen = cand["generated"][order]
        prev_ids = contexts.prev_sent_ids(sc)
        texts = SentenceTexts(sentences_with_generated(ctx))
        sets = texts.word_sets(prev_ids)
        # one token order for the whole shard (rare first) keeps prefix-filter lists short
        ranks = (
            token_ranks(list({id(x): x for x in sets}.values())) if p.method == "prefix" else None
        )
        bounds = np.searchsorted(sq, qids), np.searchsorted(sq, qids, side="right")
        candidates = []
        for qi in range(len(qids)):
            lo, hi = int(bounds[0][qi]), int(bounds[1][qi])
            idx = np.arange(lo, hi)
            if p.exclude_own:
                keep = ~sown[lo:hi]
                if qsent[qi] is not None:
                    keep &= ~contexts.window_contains(sc[lo:hi], int(qsent[qi]))
                idx = idx[keep | sgen[lo:hi]]
            candidates.append(idx)
        order_score = np.full(len(sq), np.nan, np.float32)
        rerank: dict[str, Any] = {}
        if p.order_by == "score":
            candidates, rerank = self._order_by_score(ctx, p, qids, candidates, sq, sc, order_score)
        out: dict[str, list] = {f.name: [] for f in SELECT_SCHEMA}
        for q, idx in zip(qids, candidates, strict=True):
            chosen = select_contexts(
                [sets[i] for i in idx],
                [int(x) for x in sch[idx]] if p.one_per_chunk else None,
                p.max_size,
                p.jaccard_threshold,
                method=p.method,
                num_perm=p.num_perm,
                lsh_threshold=p.lsh_threshold,
                seed=ctx.run.seed + 1,
                ranks=ranks,
            )
            pick = idx[np.asarray(chosen, dtype=np.int64)]
            out["query_id"].extend([int(q)] * len(pick))
            out["context_id"].extend(sc[pick].tolist())
            out["position"].extend(range(len(pick)))
            out["chunk_id"].extend(sch[pick].tolist())
            out["rank"].extend(srank[pick].tolist())
            out["order_score"].extend(order_score[pick].tolist())
        return out, len(sq), rerank

    def _candidates(
        self, ctx: StageContext, p: SelectParams, shard: int, qids: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Candidate columns (query_id, context_id, chunk_id, rank, is_own, generated) from the
        screen and/or the query's own generated contexts (rank: ``generated_ranks``)."""
        parts = []
        if p.source != "generate":
            if "screen" not in ctx.upstream:
                raise InputError(
                    "select.strategy 'ranked' needs the `screen` stage's ranking; run it or use "
                    "select.strategy: random (or select.source: generate)"
                )
            screen_art = ctx.input("screen")
            cols = ["query_id", "context_id", "chunk_id", "rank", "is_own"]
            if len(screen_art.parts) == self.num_shards(ctx):
                screen = screen_art.read_part(shard, cols)
            else:
                screen = screen_art.read_table(cols)
            screen = screen.filter(pc.is_in(screen["query_id"], pa.array(qids)))
            part = {c: screen.column(c).to_numpy(zero_copy_only=False) for c in cols}
            part["generated"] = np.zeros(screen.num_rows, bool)
            parts.append(part)
        if p.source != "retrieve":
            if "gencontexts" not in ctx.upstream:
                raise InputError(
                    f"select.source {p.source!r} needs the `gencontexts` stage; add a "
                    "`gencontexts:` section to the config"
                )
            cols = ["query_id", "context_id", "chunk_id", "side", "sample", "text"]
            gen = ctx.input("gencontexts").read_table(cols)
            gen = gen.filter(pc.is_in(gen["query_id"], pa.array(qids)))
            gen = gen.filter(pc.not_equal(gen["text"], ""))
            left = pc.equal(gen["side"], "left").to_numpy(zero_copy_only=False)
            n = gen.num_rows
            parts.append(
                {
                    "query_id": gen.column("query_id").to_numpy(),
                    "context_id": gen.column("context_id").to_numpy(),
                    "chunk_id": gen.column("chunk_id").to_numpy(),
                    "rank": generated_ranks(
                        gen.column("query_id").to_numpy(), gen.column("sample").to_numpy(), left
                    ),
                    "is_own": np.zeros(n, bool),
                    "generated": np.ones(n, bool),
                }
            )
        return {
            c: np.concatenate([part[c] for part in parts])
            for c in ("query_id", "context_id", "chunk_id", "rank", "is_own", "generated")
        }

    def _order_by_score(
        self,
        ctx: StageContext,
        p: SelectParams,
        qids: np.ndarray,
        candidates: list[np.ndarray],
        sq: np.ndarray,
        sc: np.ndarray,
        order_score: np.ndarray,
    ) -> tuple[list[np.ndarray], dict[str, Any]]:
        """Score each query's top ``rerank_top`` candidates with Eq. 3 in one batched call and
        put them first in descending S (ties keep the screen order); fills ``order_score``."""

        if "generator" not in ctx.upstream:
            raise InputError(
                "select.order_by 'score' needs the `generator` stage; add it to the config or "
                "use select.order_by: screen"
            )
        assert p.scoring is not None  # filled by SelectParams.link
        top = [idx[: p.rerank_top] for idx in candidates]
        rows = np.concatenate(top) if top else np.zeros(0, np.int64)
        if len(rows) == 0:
            return candidates, {"reranked": 0}
        qid = sq[rows]
        sents = query_texts(ctx.input("queries").read_table(["query_id", "text"]), qid)
        table, stats = score_rows(ctx, p.scoring, qid, sc[rows], sents)
        order_score[rows] = table.column("S").to_numpy()
        ordered = []
        for t, idx in zip(top, candidates, strict=True):
            by_s = t[np.argsort(-order_score[t], kind="stable")]
            ordered.append(np.concatenate([by_s, idx[p.rerank_top :]]))
        return ordered, {"reranked": int(len(rows)), "rerank_seconds": stats["seconds"]}

    def _random(
        self,
        ctx: StageContext,
        p: SelectParams,
        qids: np.ndarray,
        qsent: list[int | None],
        contexts: ContextIndex,
    ) -> dict[str, list]:
        out: dict[str, list] = {f.name: [] for f in SELECT_SCHEMA}
        n = len(contexts.context_ids)
        for q, s in zip(qids, qsent, strict=True):
            rng = np.random.default_rng([ctx.run.seed, int(q)])
            k = min(n, p.max_size + 2 * contexts.width + 1)
            cand = rng.choice(n, size=k, replace=False)
            cids = contexts.context_ids[cand]
            if p.exclude_own and s is not None:
                cids = cids[~contexts.window_contains(cids, int(s))]
            cids = cids[: p.max_size]
            out["query_id"].extend([int(q)] * len(cids))
            out["context_id"].extend(cids.tolist())
            out["position"].extend(range(len(cids)))
            out["chunk_id"].extend(contexts.chunk_ids(cids).tolist())
            out["rank"].extend([-1] * len(cids))
            out["order_score"].extend([float("nan")] * len(cids))
        return out
