"""Stage `select`: a diverse context set Cs for every query (Sec. 3.3, "Constructing C").

Candidates are the query's screened contexts in discriminator rank order (Eq. 1 via `screen`);
Cs is built incrementally (models/corpus/selection.py): one context per text chunk, and no context
whose
(i-1)-th sentence has word-set Jaccard >= 0.5 with that of a chosen one, up to |Cs| (paper 500).

``order_by: score`` is the paper's order: the top ``rerank_top`` screened candidates of each
query are scored with the full Eq. 3 S(s, c) (the generator through the score stage's engine, with
the `score` section's lambdas unless ``scoring`` is given) and taken in descending S, then the
rest in screen order; the diversity rules apply unchanged. It costs ``rerank_top`` generative
scores per query, so the default ``screen`` order (free: the screen already ranked them) is what
a CPU run uses.

``source``: where candidates come from: ``retrieve`` (the screened corpus contexts), ``generate``
(the query's own LM-sampled contexts from `gencontexts`, in sample order; no retrieval stages
needed) or ``both`` (merged by rank: screen rank r beside sample r). Generated slots pass the same
diversity rule, on their one sentence; the own-window exclusion does not apply to them.

Ablations of Sec. 5.4: ``strategy: random`` draws |Cs| contexts uniformly from the whole corpus;
``one_per_chunk: false`` + ``jaccard_threshold: null`` is "two-step without diversity".

Rows: query_id, context_id, position (0-based order within Cs), chunk_id, rank (the screen rank),
order_score (the S it was ordered by; NaN in screen order or past ``rerank_top``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from ctxsim.models.corpus.selection import select as select_contexts
from ctxsim.models.corpus.selection import token_ranks, word_set
from ctxsim.scores import ScoreParams, query_texts, score_rows
from ctxsim.scores.slots import contexts_with_generated, sentences_with_generated
from ctxsim.store.cost_model import PerQueryRows
from ctxsim.store.stage import Stage, StageContext, StageParams
from ctxsim.store.tables import rows_of

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


class SelectParams(StageParams):
    max_size: int = Field(
        8,
        ge=1,
        description=(
            "|Cs|, the contexts kept per query (the paper: 500, Table 7). Larger sets give smoother"
            " Eq. 4 labels and cost score time linearly."
        ),
    )
    strategy: Literal["ranked", "random"] = Field(
        "ranked",
        description=(
            "ranked keeps the best-ordered candidates that pass the diversity rules; random draws "
            "|Cs| contexts uniformly from the whole corpus (the Sec. 5.4 ablation (2))."
        ),
    )
    one_per_chunk: bool = Field(
        True,
        description=(
            "At most one context per text chunk, so a set is not filled from one paragraph (false "
            'with jaccard_threshold null is the paper\'s "two-step without diversity" ablation).'
        ),
    )
    jaccard_threshold: float | None = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description=(
            "Skip a candidate whose (i-1)-th sentence has word-set Jaccard similarity at least this"
            " with that of a chosen one (the paper's diversity rule, 0.5); None disables the rule."
        ),
    )
    method: Literal["prefix", "lsh", "exact"] = Field(
        "prefix",
        description=(
            "How the Jaccard rule is checked (models/corpus/selection.py): prefix (prefix "
            "filtering, equal"
            " to the rule and fast), exact (the every-pair reference) or lsh (MinHash LSH: faster "
            "on large sets, may rarely miss a conflict)."
        ),
    )
    num_perm: int = Field(
        128,
        ge=8,
        description="MinHash permutations (method lsh): more are more exact and slower.",
    )
    lsh_threshold: float = Field(
        0.3,
        gt=0.0,
        lt=1.0,
        description=(
            "LSH operating point (method lsh), set below the rule's threshold so that few conflicts"
            " are missed; hits are verified exactly."
        ),
    )
    exclude_own: bool = Field(
        True,
        description=(
            "Drop contexts whose window contains the query sentence itself (its own context would "
            "make every label trivially high)."
        ),
    )
    order_by: Literal["screen", "score"] = Field(
        "screen",
        description=(
            "Candidate order: screen (the discriminator's rank) or score (the full Eq. 3 S, the "
            "paper's order; costs rerank_top generative scores per query)."
        ),
    )
    rerank_top: int = Field(
        32,
        ge=1,
        description=(
            "With order_by score: the top screened candidates per query rescored by Eq. 3 and "
            "reordered; the rest follow in screen order."
        ),
    )
    scoring: ScoreParams | None = Field(
        None,
        description=(
            "The Eq. 3 settings of order_by score (a `score` section); default: the config's "
            "`score` section."
        ),
    )
    source: Literal["retrieve", "generate", "both"] = Field(
        "retrieve",
        description=(
            "Candidates: screened corpus contexts (retrieve), the contexts the gencontexts stage "
            "samples (generate), or both (module doc)."
        ),
    )

    def required_sections(self) -> dict[str, tuple[str, str]]:
        """Sections the config must have for these settings: {section: (key, why)} (checked
        by flows/config.py before any stage runs)."""
        if self.source == "retrieve":
            return {}
        return {
            "gencontexts": (
                "source",
                f"{self.source!r} takes the contexts the `gencontexts` stage samples",
            )
        }

    def link(self, sections: dict[str, StageParams]) -> None:
        if self.order_by == "score" and self.scoring is None:
            score = sections.get("score")
            self.scoring = score if isinstance(score, ScoreParams) else ScoreParams()
        gen = sections.get("gencontexts")
        if self.source == "generate" and gen is not None:
            if getattr(gen, "k_right", 1) == 0 and getattr(gen, "k_left", 0) == 0:
                raise ValueError(
                    "select.source 'generate' with gencontexts.k_right=0 and k_left=0 can select "
                    "no context (every label would be NaN): sample a side (k_right or k_left > 0) "
                    "or use select.source: both or retrieve"
                )


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
                raise ValueError(
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
                raise ValueError(
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
            raise ValueError(
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


class ContextIndex:
    """Vectorised look-ups into the `contexts` table by context_id."""

    def __init__(self, table: pa.Table):
        ids = table.column("context_id").to_numpy()
        order = np.argsort(ids, kind="stable")
        self.context_ids = ids[order]
        self._chunk = table.column("chunk_id").to_numpy()[order]
        self._centre = table.column("centre_sent_id").to_numpy()[order]
        left = table.column("left_sent_ids").combine_chunks()
        right = table.column("right_sent_ids").combine_chunks()
        lo = left.offsets.to_numpy()
        lv = left.values.to_numpy()
        nl = np.diff(lo)
        last = np.where(nl > 0, lv[np.maximum(lo[1:] - 1, 0)] if len(lv) else -1, -1)
        self._prev = last[order]
        # window bounds (ids are consecutive inside a section): [first left, last right]
        ro = right.offsets.to_numpy()
        rv = right.values.to_numpy()
        nr = np.diff(ro)
        first = np.where(nl > 0, lv[np.minimum(lo[:-1], max(len(lv) - 1, 0))] if len(lv) else 0, 0)
        lastr = np.where(nr > 0, rv[np.maximum(ro[1:] - 1, 0)] if len(rv) else 0, 0)
        # a generated right-only slot (tasks/gencontexts.py) has no c<: its one sentence, c>,
        # stands in for the diversity rule
        firstr = rv[np.minimum(ro[:-1], max(len(rv) - 1, 0))] if len(rv) else np.zeros_like(nr)
        self._prev = np.where((nl == 0) & (nr > 0), firstr, last)[order]
        centre = table.column("centre_sent_id").to_numpy()
        self._lo = np.where(nl > 0, first, centre)[order]
        self._hi = np.where(nr > 0, lastr, centre)[order]
        self.width = int(nl.max()) if len(nl) else 0

    def _rows(self, cids: np.ndarray) -> np.ndarray:
        return rows_of(self.context_ids, cids, "select: context_ids of the candidates")

    def prev_sent_ids(self, cids: np.ndarray) -> np.ndarray:
        """The (i-1)-th sentence of each context (last left sentence; -1 if none)."""
        return self._prev[self._rows(cids)]

    def chunk_ids(self, cids: np.ndarray) -> np.ndarray:
        return self._chunk[self._rows(cids)]

    def window_contains(self, cids: np.ndarray, sent_id: int) -> np.ndarray:
        r = self._rows(cids)
        return (self._lo[r] <= sent_id) & (sent_id <= self._hi[r])


class SentenceTexts:
    """Texts of corpus sentences by sent_id, read once per shard."""

    def __init__(self, shard_artefact: Any):
        t = (
            shard_artefact
            if isinstance(shard_artefact, pa.Table)
            else shard_artefact.read_table(["sent_id", "text"])
        )
        ids = t.column("sent_id").to_numpy()
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order]
        self.texts = t.column("text").take(pa.array(order))

    def word_sets(self, sent_ids: np.ndarray) -> list[frozenset[str]]:
        sent_ids = np.asarray(sent_ids, np.int64)
        uniq, inv = np.unique(sent_ids, return_inverse=True)
        valid = uniq >= 0
        rows = rows_of(self.ids, uniq[valid], "select: sent_ids of the contexts")
        texts = self.texts.take(pa.array(rows)).to_pylist()
        sets_u: list[frozenset[str]] = [frozenset()] * len(uniq)
        for j, text in zip(np.flatnonzero(valid), texts, strict=True):
            sets_u[j] = word_set(text)
        return [sets_u[i] for i in inv.ravel()]
