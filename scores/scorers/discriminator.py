"""The discriminative term of Eq. 3: ``disc_logprob`` = log sigmoid of the Eq. (1) logit of the
BiLSTM coherence model, taken from `screen` where it ranked that (query, context) and otherwise
computed with the `discriminator` artefact's model; ``disc_source`` records which (screen / model /
missing: 0.0 / off: lambda_disc is 0). A window without both sides (a generated one-sided slot)
gets no disc term: the discriminator reads both sides.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ctxsim.models.contextual.eq3_combine import log_sigmoid
from ctxsim.scores.scorers.base import ContextScorer, Scored, Windows, register_scorer


@register_scorer
class DiscriminatorScorer(ContextScorer):
    """log sigmoid(disc logit) per window: from `screen`, else the `discriminator` model."""

    name = "discriminator"
    role = "disc"
    columns = ("disc_logprob", "disc_source")

    def inputs(self, params: Any) -> tuple[str, ...]:
        return ("screen", "discriminator") if params.lambda_disc != 0 else ()

    def score(self, ctx: Any, params: Any, windows: Windows) -> Scored:
        disc, source = _disc(ctx, params, windows.qid, windows.cid, windows)
        return Scored({"disc_logprob": disc, "disc_source": source})


def _disc(
    ctx: Any,
    p: Any,
    qid: np.ndarray,
    cid: np.ndarray,
    w: Windows,
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
    ctx: Any,
    p: Any,
    todo: np.ndarray,
    w: Windows,
) -> np.ndarray:
    """Eq. (1) logits with the discriminator model, encoding sides as the screen does
    (each sentence cut to ``max_tokens``, a side's sentences concatenated)."""
    from ctxsim.models.contextual.discriminator import encode_texts, pad_batch
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
