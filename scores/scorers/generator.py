"""The generative terms of Eq. 3 (Sun et al. 2022, Sec. 3.3): ``gen_fwd`` = (1/|s|) log p(s|c<,c>),
``gen_left`` = (1/|c<|) log p(c<|s,c>), ``gen_right`` = (1/|c>|) log p(c>|c<,s) from the `generator`
artefact through the batched engine (models/contextual/score_engine.py), each window and direction
read from
the score cache (store/score_cache.py) where an earlier run on the root scored it; with ``pmi``
the term minus its null (the same target without the other side), recorded in ``null_<d>``.
A term whose target side is absent (a one-sided generated slot) is 0.0 and never computed; a
term whose lambda is 0 is NaN unless ``skip_zero_lambda`` is off.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ctxsim.models.contextual.generator import DIRECTIONS
from ctxsim.models.contextual.quantize import (
    quantize_int8,
    smooth_int8_identity,
    smooth_quantize_scorer,
    to_bf16_weights,
)
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine
from ctxsim.scores.loading import load_scorer
from ctxsim.scores.scorers.base import ContextScorer, Scored, Windows, register_scorer
from ctxsim.store.errors import InputError
from ctxsim.store.score_cache import ScoreCache, window_keys

#: layers score.int8_on_cpu keeps in float32 (bench/results/int8_smollm2_layers.md)
INT8_FLOAT_LAYERS = ("down_proj",)


@register_scorer
class GeneratorScorer(ContextScorer):
    """The three generative terms (and their PMI nulls) from the `generator` artefact."""

    name = "generator"
    role = "gen"
    columns = ("gen_fwd", "gen_left", "gen_right", "null_fwd", "null_left", "null_right")

    def inputs(self, params: Any) -> tuple[str, ...]:
        return ("generator",)

    def score(self, ctx: Any, params: Any, windows: Windows) -> Scored:
        p = params
        lefts, sents, rights = windows.lefts, windows.sents, windows.rights
        n = len(windows)
        directions = p.directions()
        scorer, meta = load_scorer(ctx.input("generator").files_dir, ctx.device)
        int8 = p.int8_on_cpu and scorer.device.type == "cpu"
        if int8:
            scorer = quantize_int8(scorer, skip=INT8_FLOAT_LAYERS)
        elif bf16_weights(p, scorer.device.type):
            if meta["backend"] != "causal":
                raise InputError(
                    f"score.bf16_weights_on_cpu supports the causal backend; the generator "
                    f"artefact {ctx.input('generator').fingerprint} is {meta['backend']}"
                )
            to_bf16_weights(scorer.model, "score.bf16_weights_on_cpu", ctx.logger.warning)
            if p.w8a8_on_cpu:
                smooth_quantize_scorer(scorer, skip=tuple(p.w8a8_bf16_layers))
        engine = ScoringEngine(
            scorer,
            EngineConfig(
                token_budget=p.token_budget,
                max_batch=p.max_batch,
                max_logit_elems=p.max_logit_elems,
                bf16_on_cuda=p.bf16_on_cuda,
                bf16_on_cpu=p.bf16_on_cpu and not int8,
                compile=p.compile_blocks and meta["backend"] == "causal" and not int8,
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
        est = engine.stats
        stats = {
            "gen_seconds": round(gen_seconds, 3),
            "forward_calls": est.forward_calls,
            "encoder_sources": est.encoder_sources,
            "target_tokens": est.target_tokens,
            "padded_tokens": est.padded_tokens,
            "oom_retries": est.oom_retries,
            "cache_hits": cache_hits,  # generative terms read from the score cache, not computed
            "backend": meta["backend"],
        }
        columns = {f"gen_{d}": gen[d] for d in DIRECTIONS} | {
            f"null_{d}": nulls[d] for d in DIRECTIONS
        }
        return Scored(columns, stats)


def bf16_weights(p: Any, device: str) -> bool:
    """Whether the scorer runs with bfloat16 weights (CPU only: on CUDA autocast decides)."""
    return device == "cpu" and p.bf16_weights_on_cpu


def _score_cache(ctx: Any, p: Any, meta: dict[str, Any], device: str) -> ScoreCache:
    """The cache of this scorer and numeric mode: keyed by what decides the scores
    (scores/loading.py scorer_identity); generator artefacts published before the identity was
    recorded keep their fingerprint, and with it their cache."""
    bf16 = (device == "cuda" and p.bf16_on_cuda) or (device == "cpu" and p.bf16_on_cpu)
    scorer_id = meta.get("scorer_id") or ctx.input("generator").fingerprint
    int8 = device == "cpu" and p.int8_on_cpu
    mode = "bf16" if bf16 else "fp32"
    if int8:
        mode = "int8-channel-fp32head-fp32down"
    elif bf16_weights(p, device):
        w8a8 = smooth_int8_identity(skip=tuple(p.w8a8_bf16_layers)) if p.w8a8_on_cpu else None
        mode = "bf16-weights" + (f"-{w8a8}" if w8a8 else "")
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
