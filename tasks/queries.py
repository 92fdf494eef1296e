"""Stage `queries`: the sentences that get context sets and labels.

Two sources: a seeded sample of corpus sentences (the dataset ctxsim produces, Sec. 3.4), or
sentences from STS sets that are not in the corpus (the Origin evaluation, Sec. 4.3, Eq. 4), whose
pairs are kept in ``files/given_pairs.parquet`` so that `pairs` can label exactly those.

Queries are spread over ``n_shards`` shards; every query-sharded stage downstream (retrieve,
screen, score, ...) fans out over the same shards.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from ctxsim.store.chunks import SentenceTexts
from ctxsim.store.cost_model import QueryCount
from ctxsim.store.errors import InputError
from ctxsim.store.stage import Stage, StageContext, StageParams


class QueriesParams(StageParams):
    source: Literal["corpus", "sts"] = Field(
        "corpus",
        description=(
            "Where the sentences to label come from: corpus (a seeded sample of corpus sentences: "
            "the dataset ctxsim produces) or sts (the sentences of STS sets under sts_dir, for the "
            "Origin evaluation of Sec. 4.3)."
        ),
    )
    n_corpus: int = Field(
        200,
        ge=1,
        description=(
            "Corpus sentences to sample (source corpus): the number of sentences that get context "
            "sets, and so the main driver of the cost of every stage after retrieve."
        ),
    )
    min_tokens: int = Field(
        4,
        ge=1,
        description=(
            "Sampled corpus sentences have at least this many word tokens (short ones make poor "
            "queries)."
        ),
    )
    max_tokens: int = Field(
        60,
        ge=1,
        description="Sampled corpus sentences have at most this many word tokens.",
    )
    only_context_centres: bool = Field(
        True,
        description=(
            "Sample only sentences that have a full context of their own (width sentences on each "
            "side), so that their own window can be excluded from their context sets."
        ),
    )
    lead_share: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description=(
            "Share of the corpus queries drawn from the first paragraph of a section (with "
            "shard.lead_fields: MedQuAD's questions), the rest from the others; None: uniform over "
            "all sentences."
        ),
    )
    question_share: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description=(
            "Share of the corpus queries drawn from the corpus's own questions (sentences ending "
            "in a question mark: what follows a question is mostly its answer), drawn first, all "
            "of them when fewer; the rest as lead_share says from the sentences not drawn (so a "
            "question left over may still come as a lead). None: drawn like any sentence."
        ),
    )
    paragraph_share: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description=(
            "Share of the corpus queries that are whole paragraphs (its sentences joined, "
            "paragraphs of at least two sentences) instead of sentences: pairs of mixed "
            "granularity for the encoder route, so labels also speak of short text -> passage. "
            "A paragraph query's sent_id is its last sentence's (its right context follows the "
            "paragraph); None: sentences only."
        ),
    )
    sts_dir: str | None = Field(
        None,
        description=(
            "Folder of STS sets (source sts): read recursively; the files' sizes and times are part"
            " of the fingerprint."
        ),
    )
    sts_sets: list[str] = Field(
        default_factory=lambda: ["STSb.dev"],
        description=(
            "STS sets to take sentences from (source sts), fnmatch patterns on dataset.subset (e.g."
            " STSb.dev, STS1*.*)."
        ),
    )
    max_pairs_per_set: int | None = Field(
        None,
        ge=1,
        description=(
            "Seeded subsample of each STS set's pairs (source sts), for quick probes; None: every "
            "pair."
        ),
    )
    n_shards: int = Field(
        2,
        ge=1,
        le=4096,
        description=(
            "Query shards; every query-sharded stage downstream (retrieve, screen, score, ...) fans"
            " out over the same shards. More shards: more parallel work and finer resumption."
        ),
    )

    added_defaults: ClassVar[dict[str, Any]] = {
        "lead_share": None,
        "paragraph_share": None,
        "question_share": None,
    }


QUERY_SCHEMA = pa.schema(
    [
        ("query_id", pa.int64()),
        ("text", pa.string()),
        ("sent_id", pa.int64()),
        ("origin", pa.string()),
        ("shard", pa.int32()),
    ]
)
GIVEN_PAIRS_SCHEMA = pa.schema(
    [
        ("pair_id", pa.int64()),
        ("s1_query_id", pa.int64()),
        ("s2_query_id", pa.int64()),
        ("dataset", pa.string()),
        ("subset", pa.string()),
        ("gold", pa.float64()),
    ]
)


class QueriesStage(Stage):
    name = "queries"
    version = "1"
    Params = QueriesParams
    inputs = ("shard", "contexts")
    #: n_corpus queries (at most one per sentence); the pilots draw a few, in one shard
    cost = QueryCount(
        count="n_corpus",
        sentences="shard",
        source_param="source",
        source="corpus",
        shards="n_shards",
    )
    per_query = True

    def fingerprint_extra(self, params: QueriesParams) -> dict[str, Any]:
        if params.source != "sts" or not params.sts_dir:
            return {}
        files = sorted(p for p in Path(params.sts_dir).rglob("*") if p.is_file())
        return {"sts_files": [[str(f), f.stat().st_size] for f in files]}

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: QueriesParams = ctx.params
        rng = np.random.default_rng(ctx.run.seed)
        if p.source == "corpus":
            texts, sent_ids, origins = self._corpus(ctx, p, rng)
            given = None
        else:
            texts, sent_ids, origins, given = self._sts(p, rng)
        n = len(texts)
        table = pa.table(
            {
                "query_id": np.arange(n, dtype=np.int64),
                "text": texts,
                "sent_id": pa.array(sent_ids, type=pa.int64()),
                "origin": origins,
                "shard": (np.arange(n) % p.n_shards).astype(np.int32),
            },
            schema=QUERY_SCHEMA,
        )
        stats: dict[str, Any] = {"queries": n, "n_shards": p.n_shards, "source": p.source}
        if given is not None:
            pq.write_table(given, ctx.files_dir / "given_pairs.parquet", compression="zstd")
            stats["given_pairs"] = given.num_rows
        return table, stats

    def _corpus(
        self, ctx: StageContext, p: QueriesParams, rng: np.random.Generator
    ) -> tuple[list[str], list[int | None], list[str]]:
        """The sampled sentences (and paragraphs), their texts read for those alone: the
        corpus's text column is never held (Python strings of 5.35 M sentences: 2 GB)."""
        cols = ["sent_id", "n_tokens"]
        cols += ["para_idx"] if p.lead_share is not None or p.paragraph_share else []
        cols += ["section_id"] if p.paragraph_share else []
        sents = ctx.input("shard").read_table(cols).sort_by("sent_id")
        ids = sents.column("sent_id").to_numpy()
        ntok = sents.column("n_tokens").to_numpy()
        ok = (ntok >= p.min_tokens) & (ntok <= p.max_tokens)
        if p.only_context_centres:
            centres = ctx.input("contexts").read_table(["centre_sent_id"]).column(0).to_numpy()
            ok &= np.isin(ids, centres)
        candidates = np.flatnonzero(ok)
        if len(candidates) == 0:
            raise InputError("queries: no corpus sentence passes the length bounds")
        n_para = int(round(p.n_corpus * (p.paragraph_share or 0.0)))
        paras = _paragraph_rows(sents, n_para, rng) if n_para else []
        n_sent = p.n_corpus - len(paras)
        questions = np.empty(0, dtype=np.int64)
        shard_texts = SentenceTexts(ctx.input("shard"))  # ids read once, texts when asked
        if p.question_share:  # the corpus's questions first; the rest from those not drawn
            found = _questions(ctx, shard_texts, candidates)
            n_q = min(int(round(n_sent * p.question_share)), len(found))
            questions = rng.choice(found, size=n_q, replace=False)
            candidates = np.setdiff1d(candidates, questions, assume_unique=True)
            n_sent -= n_q
        if p.lead_share is None:
            take = rng.choice(candidates, size=min(n_sent, len(candidates)), replace=False)
        else:
            lead = sents.column("para_idx").to_numpy()[candidates] == 0
            n_lead = min(int(round(n_sent * p.lead_share)), int(lead.sum()))
            n_body = min(n_sent - n_lead, int((~lead).sum()))
            take = np.concatenate(
                [
                    rng.choice(candidates[lead], size=n_lead, replace=False),
                    rng.choice(candidates[~lead], size=n_body, replace=False),
                ]
            )
        take = np.sort(np.concatenate([questions, take]))
        read = shard_texts.take(np.concatenate([take, *paras]))
        texts, at = read[: len(take)], len(take)
        for rows in paras:  # a paragraph query: its sentences joined in order
            texts.append(" ".join(read[at : at + len(rows)]))
            at += len(rows)
        sent_ids: list[int | None] = [int(i) for i in ids[take]]
        sent_ids += [int(ids[rows[-1]]) for rows in paras]
        return texts, sent_ids, ["corpus"] * len(take) + ["corpus-paragraph"] * n_para

    def _sts(
        self, p: QueriesParams, rng: np.random.Generator
    ) -> tuple[list[str], list[int | None], list[str], pa.Table]:
        from ctxsim.readers.domain import pair_sets_as_sts
        from ctxsim.readers.sts import discover

        if not p.sts_dir:
            raise InputError("queries.source is 'sts' but queries.sts_dir is not set")
        found = discover(p.sts_dir) + pair_sets_as_sts(p.sts_dir)
        sets = [
            s
            for s in found
            if any(fnmatch.fnmatch(f"{s.dataset}.{s.subset}", pat) for pat in p.sts_sets)
        ]
        if not sets:
            raise InputError(f"queries: no STS set under {p.sts_dir} matches {p.sts_sets}")
        index: dict[str, int] = {}
        texts: list[str] = []
        origins: list[str] = []
        pairs: dict[str, list] = {f.name: [] for f in GIVEN_PAIRS_SCHEMA}

        def qid(text: str, origin: str) -> int:
            if text not in index:
                index[text] = len(texts)
                texts.append(text)
                origins.append(origin)
            return index[text]

        for s in sets:
            rows = np.arange(len(s.gold))
            if p.max_pairs_per_set and len(rows) > p.max_pairs_per_set:
                rows = np.sort(rng.choice(rows, size=p.max_pairs_per_set, replace=False))
            origin = f"{s.dataset}.{s.subset}"
            for r in rows:
                pairs["pair_id"].append(len(pairs["pair_id"]))
                pairs["s1_query_id"].append(qid(s.s1[r], origin))
                pairs["s2_query_id"].append(qid(s.s2[r], origin))
                pairs["dataset"].append(s.dataset)
                pairs["subset"].append(s.subset)
                pairs["gold"].append(float(s.gold[r]))
        return texts, [None] * len(texts), origins, pa.table(pairs, schema=GIVEN_PAIRS_SCHEMA)


def _questions(ctx: StageContext, texts: SentenceTexts, candidates: np.ndarray) -> np.ndarray:
    """The candidate rows whose sentence is a question."""
    found = candidates[texts.questions()[candidates]]
    ctx.logger.info(
        "queries: %d of %d candidate sentences are questions", len(found), len(candidates)
    )
    return found


def _paragraph_rows(sents: pa.Table, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n`` paragraphs of at least two sentences drawn without replacement (seeded): the rows
    of each one's sentences, in order (its query's sent_id is its last sentence's)."""
    sec = sents.column("section_id").to_numpy()
    para = sents.column("para_idx").to_numpy()
    # rows are in sent_id order, so a paragraph's sentences are consecutive rows
    starts = np.flatnonzero(np.r_[True, (sec[1:] != sec[:-1]) | (para[1:] != para[:-1])])
    ends = np.r_[starts[1:], len(sec)]
    multi = np.flatnonzero(ends - starts >= 2)
    if len(multi) < n:
        raise InputError(
            f"queries.paragraph_share asks for {n} paragraph queries but the corpus has "
            f"{len(multi)} paragraphs of two sentences or more"
        )
    pick = np.sort(rng.choice(multi, size=n, replace=False))
    return [np.arange(starts[i], ends[i]) for i in pick]
