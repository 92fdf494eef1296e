"""S(s, c) of Eq. (3) for (sentence, context) rows, with its persistent cache.

One place computes the score every stage that needs S calls: `score` (the pairs labelling
needs), `select` (candidates in Eq. 3 order) and therefore Origin (the pipeline on STS queries).
Terms (Sec. 3.3, Eq. 3): ``gen_fwd`` = (1/|s|) log p(s|c<,c>), ``gen_left`` = (1/|c<|) log
p(c<|s,c>), ``gen_right`` = (1/|c>|) log p(c>|c<,s) from the `generator` artefact through the
batched engine (models/score_engine.py); ``disc_logprob`` = log sigmoid of the Eq. (1) logit, taken
from `screen` where it ranked that (query, context) and otherwise computed with the
`discriminator` artefact's model; ``disc_source`` records which (screen / model / missing: 0.0).
S = lambda_disc * disc + lambda_fwd * fwd + lambda_left * left + lambda_right * right.
With ``pmi: [d, ...]`` those terms are taken as pointwise mutual information (the term minus the
same target scored without the other side, recorded in ``null_<d>``; see ScoreParams.pmi).
Generated contexts (tasks/gencontexts.py) are one-sided slots: a term whose target side is
absent (c< of a continuation, c> of a preceding sentence) is 0.0 and never computed, and so is its
disc term (the discriminator reads both sides).
Generative terms already scored on the artefact root are read from ``ROOT/_cache/scores``
(store/score_cache.py) instead of recomputed.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from pydantic import Field

from ctxsim.models.generator import DIRECTIONS
from ctxsim.models.quantize import quantize_int8
from ctxsim.models.score_engine import (
    EngineConfig,
    Lambdas,
    ScoringEngine,
    combine_eq3,
    log_sigmoid,
)
from ctxsim.scores.loading import load_scorer
from ctxsim.scores.slots import contexts_with_generated, sentences_with_generated
from ctxsim.store.score_cache import ScoreCache, window_keys
from ctxsim.store.stage import StageContext, StageParams
from ctxsim.store.tables import rows_of

SCORE_SCHEMA = pa.schema(
    [
        ("query_id", pa.int64()),
        ("context_id", pa.int64()),
        ("disc_logprob", pa.float32()),
        ("gen_fwd", pa.float32()),
        ("gen_left", pa.float32()),
        ("gen_right", pa.float32()),
        ("S", pa.float32()),
        ("disc_source", pa.string()),  # screen | model | missing (disc_logprob 0.0) | off
        # the null term subtracted from gen_<d> when `pmi` names d (NaN otherwise)
        ("null_fwd", pa.float32()),
        ("null_left", pa.float32()),
        ("null_right", pa.float32()),
    ]
)


#: layers score.int8_on_cpu keeps in float32 (bench/results/int8_smollm2_layers.md)
INT8_FLOAT_LAYERS = ("down_proj",)


class ScoreParams(StageParams):
    lambda_disc: float = 1.0  # Eq. (3) weights (the paper does not publish its values)
    lambda_fwd: float = 1.0
    lambda_left: float = 1.0
    lambda_right: float = 1.0
    token_budget: int = Field(8192, ge=1)  # padded source+target tokens per forward call
    max_batch: int = Field(256, ge=1)
    max_logit_elems: int = Field(1 << 27, ge=1)  # batch x target positions x vocab
    bf16_on_cuda: bool = True
    bf16_on_cpu: bool = False  # ~2x on CPUs with AVX512-BF16/AMX; ranks unchanged (measured)
    # causal scorer's linear layers in int8 (torch dynamic quantisation, per channel; the head
    # and the MLP down projections, where the activation outliers are, stay float32) on CPU:
    # 2.1x fewer CPU-s per window with SmolLM2, Spearman with float32 0.96 (left) / 0.75 (PMI
    # left) on 60 windows (bench/results/cheaper_scoring.md); wins over bf16_on_cpu; its own
    # score-cache namespace
    int8_on_cpu: bool = False
    disc_batch: int = Field(256, ge=1)  # windows per discriminator forward (pairs screen lacks)
    # A generative term whose lambda is 0 costs a third of the scoring time; skip it (its column
    # is NaN, so its ablation label is absent) unless the ablation table needs it.
    skip_zero_lambda: bool = True
    # Reuse generative terms scored by earlier runs on this root (ROOT/_cache/scores): growing
    # |Cs|, adding a term or relabelling other pairs pays only for windows not scored before.
    cache: bool = True
    # Generative terms taken as pointwise mutual information between s and c: the term minus the
    # same target scored with the other side of the pair left out of the window (left/right: the
    # sentence, giving log p(c<|c>) / log p(c>|c<); fwd: both contexts, giving log p(s)). A
    # context's own likelihood otherwise dominates v_s and Eq. 4's cosine; one extra pass per
    # distinct context (or sentence), cached like the rest. Not in the paper (Eq. 3 as printed
    # is `pmi: []`); measured on STSb dev in configs/books.yaml.
    pmi: list[Literal["fwd", "left", "right"]] = Field(default_factory=list)
    # Adaptive |Cs| (models/adaptive_cs.py): score each pair's contexts in rounds of these |Cs|
    # prefixes (the full Cs is always the last round) and stop a pair once its Eq. 4 label
    # moved by at most `adaptive_tol` standard deviations (of the first round's labels) between
    # two rounds; the label stage labels it with the |Cs| it stopped at. Empty: off. On, the
    # score stage runs as one shard (a pair's two sentences may sit in different query shards).
    adaptive_rounds: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)
    adaptive_tol: float = Field(0.05, ge=0.0)

    def directions(self) -> list[str]:
        lam = {"fwd": self.lambda_fwd, "left": self.lambda_left, "right": self.lambda_right}
        return [d for d in DIRECTIONS if lam[d] != 0.0 or not self.skip_zero_lambda]


def _lookup(keys_sorted: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    return rows_of(keys_sorted, wanted, f"score: {what} ids")


def query_texts(queries: pa.Table, qid: np.ndarray) -> np.ndarray:
    """The text of each query id (object array), from a table with query_id and text."""
    qt = queries.select(["query_id", "text"]).sort_by("query_id")
    q_text = np.asarray(qt.column("text").to_pylist(), dtype=object)
    return q_text[_lookup(qt.column("query_id").to_numpy(), qid, "query")]


class _Windows(NamedTuple):
    """Texts of the scored rows: query sentences, and each context's side sentences (by row of
    the sorted contexts, ``crow``) with the sentence-text table they index."""

    sents: np.ndarray
    left_ids: list[list[int]]
    right_ids: list[list[int]]
    crow: np.ndarray
    s_keys: np.ndarray
    s_text: np.ndarray


def score_rows(
    ctx: StageContext, p: ScoreParams, qid: np.ndarray, cid: np.ndarray, sents: np.ndarray
) -> tuple[pa.Table, dict[str, Any]]:
    """Eq. 3 terms and S for (query, context) rows whose query texts are ``sents``: the score
    stage's computation, also used by `select` to order candidates by S (``order_by: score``).
    Needs the inputs `contexts`, `shard` and `generator` (and `screen` / `discriminator` for the
    disc term)."""
    t0 = time.perf_counter()
    n = len(qid)
    u_ctx = np.unique(cid)
    co = contexts_with_generated(ctx).select(["context_id", "left_sent_ids", "right_sent_ids"])
    co = co.filter(pc.is_in(co.column("context_id"), pa.array(u_ctx))).sort_by("context_id")
    c_keys = co.column("context_id").to_numpy()
    _lookup(c_keys, u_ctx, "context")
    left_ids = co.column("left_sent_ids").to_pylist()
    right_ids = co.column("right_sent_ids").to_pylist()
    need = np.unique(np.asarray([s for x in left_ids + right_ids for s in x], np.int64))
    sh = sentences_with_generated(ctx)
    sh = sh.filter(pc.is_in(sh.column("sent_id"), pa.array(need))).sort_by("sent_id")
    s_keys = sh.column("sent_id").to_numpy()
    s_text = np.asarray(sh.column("text").to_pylist(), dtype=object)
    _lookup(s_keys, need, "sentence")

    def side(rows: list[list[int]]) -> np.ndarray:
        return np.asarray(
            [" ".join(s_text[np.searchsorted(s_keys, r)]) for r in rows], dtype=object
        )

    crow = np.searchsorted(c_keys, cid)
    lefts, rights = side(left_ids)[crow], side(right_ids)[crow]

    directions = p.directions()
    scorer, meta = load_scorer(ctx.input("generator").files_dir, ctx.device)
    int8 = p.int8_on_cpu and scorer.device.type == "cpu"
    if int8:
        scorer = quantize_int8(scorer, skip=INT8_FLOAT_LAYERS)
    engine = ScoringEngine(
        scorer,
        EngineConfig(
            token_budget=p.token_budget,
            max_batch=p.max_batch,
            max_logit_elems=p.max_logit_elems,
            bf16_on_cuda=p.bf16_on_cuda,
            bf16_on_cpu=p.bf16_on_cpu and not int8,
            progress=not ctx.run.no_progress,
        ),
    )
    cache = _score_cache(ctx, p, meta, scorer.device.type) if p.cache else None
    t1 = time.perf_counter()
    gen, cache_hits = _generate(engine, cache, lefts, sents, rights, directions)
    nulls: dict[str, np.ndarray] = {}
    for d in (d for d in directions if d in p.pmi):
        nulls[d], hits = _null_terms(engine, cache, lefts, sents, rights, d)
        gen[d] = (gen[d] - nulls[d]).astype(np.float32)
        cache_hits += hits
    for d in DIRECTIONS:
        gen.setdefault(d, np.full(n, np.nan, dtype=np.float32))  # skipped: lambda is 0
        nulls.setdefault(d, np.full(n, np.nan, dtype=np.float32))  # not taken as PMI
    gen_seconds = time.perf_counter() - t1

    windows = _Windows(sents, left_ids, right_ids, crow, s_keys, s_text)
    disc, source = _disc(ctx, p, qid, cid, windows)
    lam = Lambdas(p.lambda_disc, p.lambda_fwd, p.lambda_left, p.lambda_right)
    S = combine_eq3(disc, gen["fwd"], gen["left"], gen["right"], lam)
    table = pa.table(
        {
            "query_id": qid,
            "context_id": cid,
            "disc_logprob": disc,
            "gen_fwd": gen["fwd"],
            "gen_left": gen["left"],
            "gen_right": gen["right"],
            "S": S,
            "disc_source": source,
            **{f"null_{d}": nulls[d] for d in DIRECTIONS},
        },
        schema=SCORE_SCHEMA,
    )
    est = engine.stats
    stats = {
        "pairs": n,
        "queries": len(np.unique(qid)),
        "contexts": len(u_ctx),
        "gen_seconds": round(gen_seconds, 3),
        "seconds": round(time.perf_counter() - t0, 3),
        "forward_calls": est.forward_calls,
        "encoder_sources": est.encoder_sources,
        "target_tokens": est.target_tokens,
        "padded_tokens": est.padded_tokens,
        "oom_retries": est.oom_retries,
        "disc_from_screen": int(np.sum(source == "screen")),
        "disc_from_model": int(np.sum(source == "model")),
        "disc_missing": int(np.sum(source == "missing")),
        "cache_hits": cache_hits,  # generative terms read from the score cache, not computed
        "backend": meta["backend"],
    }
    return table, stats


def _score_cache(
    ctx: StageContext, p: ScoreParams, meta: dict[str, Any], device: str
) -> ScoreCache:
    """The cache of this scorer and numeric mode: keyed by what decides the scores
    (tasks/generator.py scorer_identity); generator artefacts published before the identity was
    recorded keep their fingerprint, and with it their cache."""
    bf16 = (device == "cuda" and p.bf16_on_cuda) or (device == "cpu" and p.bf16_on_cpu)
    scorer_id = meta.get("scorer_id") or ctx.input("generator").fingerprint
    int8 = device == "cpu" and p.int8_on_cpu
    mode = "int8-channel-fp32head-fp32down" if int8 else ("bf16" if bf16 else "fp32")
    return ScoreCache(ctx.store.root, f"{scorer_id}-{mode}")


def _generate(
    engine: ScoringEngine,
    cache: ScoreCache | None,
    lefts: np.ndarray,
    sents: np.ndarray,
    rights: np.ndarray,
    directions: list[str],
) -> tuple[dict[str, np.ndarray], int]:
    """The generative terms of the rows whose target is not empty (0.0 for the others: a
    one-sided generated slot has no c< or no c>); see ``_generate_rows``."""
    out = {d: np.zeros(len(sents), np.float32) for d in directions}
    groups: dict[bytes, list[str]] = {}  # rows -> directions whose targets are those rows
    for d in directions:
        target = {"left": lefts, "right": rights}.get(d, sents)
        groups.setdefault(np.flatnonzero(target != "").tobytes(), []).append(d)
    hits = 0
    for rows_b, dirs in groups.items():
        rows = np.frombuffer(rows_b, dtype=np.intp)
        if not len(rows):
            continue
        got, h = _generate_rows(engine, cache, lefts[rows], sents[rows], rights[rows], dirs)
        for d in dirs:
            out[d][rows] = got[d]
        hits += h
    return out, hits


def _generate_rows(
    engine: ScoringEngine,
    cache: ScoreCache | None,
    lefts: np.ndarray,
    sents: np.ndarray,
    rights: np.ndarray,
    directions: list[str],
) -> tuple[dict[str, np.ndarray], int]:
    """The generative terms, each window and direction computed once per artefact root: read
    from the score cache (store/score_cache.py) where an earlier run scored it, the rest through
    the engine (and added to the cache). Returns the terms and the number of cache hits."""
    if cache is None:
        return engine.score(lefts.tolist(), sents.tolist(), rights.tolist(), directions), 0
    keys = window_keys(lefts.tolist(), sents.tolist(), rights.tolist())
    out: dict[str, np.ndarray] = {}
    missing: dict[bytes, list[str]] = {}  # rows to compute -> the directions that miss them
    hits = 0
    for d in directions:
        found, out[d] = cache.get(d, keys)
        hits += int(found.sum())
        missing.setdefault(np.flatnonzero(~found).tobytes(), []).append(d)
    for rows, dirs in missing.items():
        todo = np.frombuffer(rows, dtype=np.intp)
        if not len(todo):
            continue
        # one engine call for the directions that miss the same rows (the usual case: all or
        # none), so texts are tokenized and sorted once
        got = engine.score(lefts[todo].tolist(), sents[todo].tolist(), rights[todo].tolist(), dirs)
        for d in dirs:
            out[d][todo] = got[d]
            cache.put(d, [keys[i] for i in todo], got[d])
    return out, hits


def _null_terms(
    engine: ScoringEngine,
    cache: ScoreCache | None,
    lefts: np.ndarray,
    sents: np.ndarray,
    rights: np.ndarray,
    direction: str,
) -> tuple[np.ndarray, int]:
    """The ``pmi`` baseline of one term per row: the same target with the other side left out
    (an empty text), computed once per distinct null window. Returns values and cache hits."""
    empty = np.full(len(sents), "", dtype=object)
    if direction == "fwd":
        nl, ns, nr = empty, sents, empty
    else:
        nl, ns, nr = lefts, empty, rights
    # distinct null windows by their texts (_generate hashes only those for the cache)
    _, first, inverse = np.unique(
        nl + "\x1f" + ns + "\x1f" + nr, return_index=True, return_inverse=True
    )
    got, hits = _generate(engine, cache, nl[first], ns[first], nr[first], [direction])
    return got[direction][inverse].astype(np.float32), hits


def _disc(
    ctx: StageContext,
    p: ScoreParams,
    qid: np.ndarray,
    cid: np.ndarray,
    w: _Windows,
) -> tuple[np.ndarray, np.ndarray]:
    """log sigmoid(disc logit) per pair, and where it came from."""
    n = len(qid)
    disc = np.zeros(n, np.float32)
    source = np.full(n, "missing", dtype=object)
    if p.lambda_disc == 0.0:
        source[:] = "off"
        return disc, source
    if "screen" in ctx.upstream:
        sc = ctx.input("screen").read_table(["query_id", "context_id", "disc_logit"])
        key = sc.column("query_id").to_numpy() * (1 << 32) + sc.column("context_id").to_numpy()
        order = np.argsort(key, kind="stable")
        key, logit = key[order], sc.column("disc_logit").to_numpy()[order]
        want = qid * (1 << 32) + cid
        pos = np.minimum(np.searchsorted(key, want), max(len(key) - 1, 0))
        hit = (key[pos] == want) if len(key) else np.zeros(n, bool)
        disc[hit] = log_sigmoid(logit[pos[hit]])
        source[hit] = "screen"
    todo = np.flatnonzero(source == "missing")
    both_sides = [bool(w.left_ids[w.crow[r]]) and bool(w.right_ids[w.crow[r]]) for r in todo]
    todo = todo[np.asarray(both_sides, bool)] if len(todo) else todo
    if len(todo) and "discriminator" in ctx.upstream:
        logits = _disc_model(ctx, p, todo, w)
        disc[todo] = log_sigmoid(logits)
        source[todo] = "model"
    return disc, source


def _disc_model(
    ctx: StageContext,
    p: ScoreParams,
    todo: np.ndarray,
    w: _Windows,
) -> np.ndarray:
    """Eq. (1) logits with the discriminator model, encoding sides as the screen does
    (each sentence cut to ``max_tokens``, a side's sentences concatenated)."""
    from ctxsim.models.discriminator import encode_texts, pad_batch
    from ctxsim.scores.loading import load_discriminator

    model, encode, meta = load_discriminator(ctx.input("discriminator").files_dir, "cpu")
    max_tokens = int(meta["max_tokens"])
    cache: dict[str, np.ndarray] = {}

    def enc(text: str) -> np.ndarray:
        if text not in cache:  # never empty, exactly as the screen encodes
            cache[text] = encode_texts(encode, [text], max_tokens)[0]
        return cache[text]

    def side(ids: list[int]) -> np.ndarray:
        return np.concatenate([enc(w.s_text[np.searchsorted(w.s_keys, i)]) for i in ids])

    out = np.empty(len(todo), np.float32)
    with torch.no_grad():
        for lo in range(0, len(todo), p.disc_batch):
            rows = todo[lo : lo + p.disc_batch]
            lb = pad_batch([side(w.left_ids[w.crow[r]]) for r in rows])
            cb = pad_batch([enc(w.sents[r]) for r in rows])
            rb = pad_batch([side(w.right_ids[w.crow[r]]) for r in rows])
            out[lo : lo + len(rows)] = model(lb, cb, rb).float().numpy()
    return out
