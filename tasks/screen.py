"""Stage `screen`: rank retrieved chunks' contexts with the discriminator (Sun et al. 2022, 3.3).

"We rank all contexts using the discriminative model based on Eq. (1). For discriminative models,
we cache sentence representations in advance, and compute model scores in the last neural layer."
The BiLSTM runs once over every corpus context side (c< and c>; for w = 1 these are single
sentences, each encoded once however many contexts share it) and the context-only part of the
last layer is cached in ``ctx.cache_dir`` as ``.npy`` (computed once per fingerprint, under a file
lock, shared by every shard). Each query sentence is encoded once; a (query, context) pair then
costs one tanh layer of size ``head_hidden`` (models/contextual/discriminator.py). The top ``keep``
contexts
of each query are kept for the context-set stage, ties broken by context id.

The cache is checksummed like the score cache (store/score_cache.py): ``sha256sums.json``,
written after the arrays, holds each file's sha256, checked before the arrays are used. A cache
that fails the check (a flipped byte, a file missing or unreadable, or no checksums: written
before them) is moved aside to ``<key>.corrupt-<id>`` with a warning and computed again, so a
corrupt cache never reaches a screen artefact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from pydantic import Field

from ctxsim.models.contextual.discriminator import (
    CoherenceDiscriminator,
    encode_sequences,
    encode_texts,
)
from ctxsim.models.corpus.retrieval import select_topk
from ctxsim.scores.loading import Encoder, load_discriminator
from ctxsim.store.artefacts import fingerprint, sha256_file
from ctxsim.store.atomic import atomic_path, write_json_atomic
from ctxsim.store.checked import move_aside
from ctxsim.store.cost_model import CorpusSideAndRows
from ctxsim.store.errors import InputError
from ctxsim.store.lease import shard_lease
from ctxsim.store.stage import Stage, StageContext, StageParams, knob
from ctxsim.store.tables import rows_of

SCREEN_SCHEMA = pa.schema(
    [
        ("query_id", pa.int64()),
        ("context_id", pa.int64()),
        ("chunk_id", pa.int64()),
        ("disc_logit", pa.float32()),
        ("rank", pa.int32()),  # 0 = best
        ("is_own", pa.bool_()),
    ]
)


class ScreenParams(StageParams):
    keep: int = Field(
        50,
        ge=1,
        description=(
            "M, the top contexts per query kept by the discriminator's rank (the paper's context "
            "sets use up to 2000): the candidates select chooses Cs from. More keeps better "
            "contexts reachable and costs select and score time."
        ),
    )
    batch_size: int = knob(
        512,
        ge=1,
        description=(
            "Sequences per BiLSTM batch when the context and query representations are cached. "
            "Speed and memory only: out of the fingerprint."
        ),
    )
    score_batch: int = knob(
        65_536,
        ge=1,
        description=(
            "(query, context) pairs per call of the discriminator's last layers. Speed and memory "
            "only: out of the fingerprint."
        ),
    )


#: each cache file's sha256, written after the arrays
CACHE_SUMS = "sha256sums.json"
#: files this process has hashed, by (size, mtime, ctime): a write changes the ctime even when
#: the mtime is put back, so only an untouched file skips the re-hash
_VERIFIED: dict[Path, tuple[int, int, int]] = {}


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy") as tmp:
        np.save(tmp, arr)


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def cache_problem(cache: Path, paths: list[Path]) -> str | None:
    """None when every cache file matches the sha256 written with it; else what is wrong."""
    try:
        sums = json.loads((cache / CACHE_SUMS).read_text())
    except FileNotFoundError:
        return f"no {CACHE_SUMS} (written before checksums, or by a writer that died)"
    except (OSError, ValueError) as e:
        return f"{CACHE_SUMS} unreadable ({e})"
    for p in paths:
        try:
            stamp = _stamp(p)
            if _VERIFIED.get(p) == stamp:
                continue
            if sha256_file(p) != sums.get(p.name):
                return f"{p.name}: sha256 mismatch"
            _VERIFIED[p] = stamp
        except OSError as e:
            return f"{p.name}: unreadable ({e.strerror or e})"
    return None


def _move_aside(cache: Path, problem: str, logger: Any) -> None:
    """Rename a failed cache folder out of the way (kept for a look), warn, and recreate it."""
    dest = move_aside(cache)
    if dest is not None:
        logger.warning(
            "screen context cache %s: %s; moved to %s, it will be computed again",
            cache,
            problem,
            dest,
        )
    cache.mkdir(parents=True, exist_ok=True)


def context_cache(
    ctx: StageContext,
    model: CoherenceDiscriminator,
    encode: Encoder,
    max_tokens: int,
    batch_size: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(context ids, chunk ids, centre sent ids, context part (n_ctx, K)), by context id.

    The first shard to get here computes and saves the cache under a lease (store/lease.py,
    safe on shared filesystems); the others wait for the lease and then memory-map it.
    """
    # Keyed by what the cache depends on (not by the screen's fingerprint, which includes the
    # queries): an Origin run on new sentences reuses the corpus side computed by earlier runs.
    key = fingerprint(
        {
            "contexts": ctx.input("contexts").fingerprint,
            "shard": ctx.input("shard").fingerprint,
            "discriminator": ctx.input("discriminator").fingerprint,
            "max_tokens": max_tokens,
        }
    )
    cache = ctx.store.cache_dir("screen-contexts", key)
    names = ("context_ids", "chunk_ids", "centre_sent_ids", "context_part")
    paths = [cache / f"{n}.npy" for n in names]

    def problem() -> str | None:
        if not any(p.exists() for p in paths) and not (cache / CACHE_SUMS).exists():
            return "missing"  # not computed yet
        return cache_problem(cache, paths)

    if problem() is not None:  # checked again under the lease: a writer may be at work
        with shard_lease(ctx.store.root, "screen-contexts", key, 0):
            why = problem()  # None: computed whole by the previous holder
            if why is not None:
                if why != "missing":
                    _move_aside(cache, why, ctx.logger)
                arrays = _compute_cache(ctx, model, encode, max_tokens, batch_size)
                for p, a in zip(paths, arrays, strict=True):
                    _save_npy(p, a)
                write_json_atomic(cache / CACHE_SUMS, {p.name: sha256_file(p) for p in paths})
    out = [np.load(p, mmap_mode="r", allow_pickle=False) for p in paths]
    return out[0], out[1], out[2], out[3]


def _compute_cache(
    ctx: StageContext,
    model: CoherenceDiscriminator,
    encode: Encoder,
    max_tokens: int,
    batch_size: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    conts = (
        ctx.input("contexts")
        .read_table(["context_id", "chunk_id", "centre_sent_id", "left_sent_ids", "right_sent_ids"])
        .sort_by("context_id")
    )
    if conts.num_rows == 0:
        raise InputError("screen: the contexts artefact is empty (empty corpus)")
    sents = ctx.input("shard").read_table(["sent_id", "text"]).sort_by("sent_id")
    sent_ids = sents.column("sent_id").to_numpy()
    tokens = encode_texts(encode, sents.column("text").to_pylist(), max_tokens)
    w = len(conts.column("left_sent_ids")[0].as_py())
    sides = []
    for col in ("left_sent_ids", "right_sent_ids"):
        ids = np.asarray(conts.column(col).to_pylist(), np.int64).reshape(-1, w)
        sides.append(rows_of(sent_ids, ids, f"screen: contexts.{col} names sent_ids"))
    # Each distinct side (a sentence for w = 1, a run of w sentences otherwise) is encoded once.
    uniq, inv = np.unique(np.concatenate(sides), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    seqs = [
        tokens[int(r[0])] if w == 1 else np.concatenate([tokens[int(x)] for x in r]) for r in uniq
    ]
    dev = next(model.parameters()).device
    reps = encode_sequences(model, seqs, batch_size, str(dev))
    n = conts.num_rows
    li, ri = inv[:n], inv[n:]
    parts = []
    with torch.no_grad():
        for lo in range(0, n, 65_536):
            sl = slice(lo, lo + 65_536)
            left = torch.from_numpy(reps[li[sl]]).to(dev)
            right = torch.from_numpy(reps[ri[sl]]).to(dev)
            parts.append(model.context_part(left, right).float().cpu().numpy())
    ctx.logger.info(f"screen: cached {n} contexts from {len(uniq)} encoded context sides")
    return (
        conts.column("context_id").to_numpy().astype(np.int64),
        conts.column("chunk_id").to_numpy().astype(np.int64),
        conts.column("centre_sent_id").to_numpy().astype(np.int64),
        np.concatenate(parts).astype(np.float32),
    )


class ScreenStage(Stage):
    name = "screen"
    version = "1"
    Params = ScreenParams
    inputs = ("queries", "contexts", "retrieve", "discriminator", "shard")
    shard_by = "queries"
    run_fields = ()
    #: the corpus side encoded once, then kept contexts per query (up to keep; more where the
    #: full corpus gives retrieve more hits)
    cost = CorpusSideAndRows(cap="keep", chunks="contexts", feeder="retrieve", feeder_cap="top_k")
    corpus_memory = True
    per_query = True

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: ScreenParams = ctx.params
        model, encode, meta = load_discriminator(ctx.input("discriminator").files_dir, ctx.device)
        max_tokens = int(meta["max_tokens"])
        context_ids, chunk_of, centre_of, ctx_part = context_cache(
            ctx, model, encode, max_tokens, p.batch_size
        )

        q = ctx.input_shard("queries", shard, ["query_id", "text", "sent_id"])
        qids = q.column("query_id").to_numpy().astype(np.int64)
        qsent = pc.fill_null(q.column("sent_id"), -1).to_numpy().astype(np.int64)  # -1: outside
        qtok = encode_texts(encode, q.column("text").to_pylist(), max_tokens)
        dev = next(model.parameters()).device
        with torch.no_grad():
            qreps = torch.from_numpy(encode_sequences(model, qtok, p.batch_size, str(dev)))
            qpart = model.centre_part(qreps.to(dev)).cpu().numpy()

        # Contexts grouped by chunk: the contexts of chunk c are by_chunk[start[c]:end[c]].
        by_chunk = np.lexsort((context_ids, chunk_of))
        sorted_chunks = chunk_of[by_chunk]
        hits = ctx.input("retrieve").read_part(shard, ["query_id", "chunk_id", "rank"])
        hits = hits.sort_by([("query_id", "ascending"), ("rank", "ascending")])
        h_q = hits.column("query_id").to_numpy()
        h_c = hits.column("chunk_id").to_numpy()
        q_lo = np.searchsorted(h_q, qids, "left")
        q_hi = np.searchsorted(h_q, qids, "right")

        out: dict[str, list[np.ndarray]] = {k: [] for k in SCREEN_SCHEMA.names}
        n_cand = n_own_cand = n_own_kept = n_corpus = 0
        own_ranks: list[int] = []
        for i in range(len(qids)):
            chunks = h_c[q_lo[i] : q_hi[i]]
            a = np.searchsorted(sorted_chunks, chunks, "left")
            b = np.searchsorted(sorted_chunks, chunks, "right")
            lens = b - a
            if lens.sum() == 0:
                continue
            idx = by_chunk[np.repeat(a - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())]
            logits = np.empty(len(idx), np.float32)
            qp = torch.from_numpy(qpart[i : i + 1]).to(dev)
            with torch.no_grad():
                for lo in range(0, len(idx), p.score_batch):
                    sl = slice(lo, lo + p.score_batch)
                    cp = torch.from_numpy(np.asarray(ctx_part[idx[sl]])).to(dev)
                    logits[sl] = model.combine(cp, qp).cpu().numpy()
            top, vals = select_topk(logits, context_ids[idx], p.keep, positive_only=False)
            rows = np.searchsorted(context_ids, top)
            own = centre_of[rows] == qsent[i]
            n_cand += len(idx)
            if qsent[i] >= 0:
                n_corpus += 1
                n_own_cand += int((centre_of[idx] == qsent[i]).any())
                if own.any():
                    n_own_kept += 1
                    own_ranks.append(int(np.flatnonzero(own)[0]))
            out["query_id"].append(np.full(len(top), qids[i], np.int64))
            out["context_id"].append(top)
            out["chunk_id"].append(chunk_of[rows])
            out["disc_logit"].append(vals)
            out["rank"].append(np.arange(len(top), dtype=np.int32))
            out["is_own"].append(own)
        cols = {
            k: (
                np.concatenate(v)
                if v
                else np.zeros(0, SCREEN_SCHEMA.field(k).type.to_pandas_dtype())
            )
            for k, v in out.items()
        }
        table = pa.table(cols, schema=SCREEN_SCHEMA)
        stats = {
            "queries": len(qids),
            "rows": table.num_rows,
            "candidates": n_cand,
            "corpus_queries": n_corpus,
            "own_in_candidates": n_own_cand,
            "own_kept": n_own_kept,
            "own_rank_sum": int(sum(own_ranks)),
        }
        return table, stats

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        total = super().summarize(ctx, shard_stats)
        if total.get("own_kept"):
            total["own_mean_rank"] = round(total["own_rank_sum"] / total["own_kept"], 3)
        if total.get("queries"):
            total["candidates_per_query"] = round(total["candidates"] / total["queries"], 1)
        return total
