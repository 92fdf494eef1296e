"""The encoder route of the `label` stage (``contextual: encoder``): a sentence encoder as the
contextual model, S(c, s) = cos(E(c), E(s)) over every context unit of the `embed` artefact, and
the label the correlation of the two sentences' profiles (models/contextual/encoder_origin.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxsim.models.contextual.encoder_origin import (
    closed_form_similarity,
    softmax_profile_similarity,
    topk_union_similarity,
)
from ctxsim.models.contextual.origin import TERMS
from ctxsim.models.encoders import EncoderInputError, encode, load_encoder
from ctxsim.models.encoders import encoder_identity as scorer_identity
from ctxsim.store.errors import InputError
from ctxsim.store.stage import StageContext
from ctxsim.tasks.embed import SCATTER_FILE, load_scatter, read_embeddings

if TYPE_CHECKING:
    from ctxsim.tasks.label import LabelParams


def encoder_labels(
    ctx: StageContext,
    p: LabelParams,
    s1: np.ndarray,
    s2: np.ndarray,
    text_of: dict[int, str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, Any]]:
    """Origin with the `embed` artefact's encoder as the contextual model: (labels [n, 5],
    S in column 0 and no Eq. 3 terms, n_ctx1, n_ctx2, other views, stats). The sentences are
    encoded by the scorer that encoded the contexts, refused if its files changed since."""
    art = ctx.input("embed")
    ep = art.manifest["params"]
    recorded = art.manifest.get("fingerprint_payload", {}).get("extra", {}).get("scorer")
    current = scorer_identity(ep["model"])
    if recorded != current:
        raise EncoderInputError(
            f"label: the embed artefact {art.path} was encoded by {recorded}, but "
            f"embed.model {ep['model']!r} is now {current}: rerun embed"
        )
    qids = np.unique(np.r_[s1, s2])
    missing = [int(q) for q in qids if text_of.get(int(q)) is None]
    if missing:
        raise InputError(f"label: pairs name query ids without a text, e.g. {missing[:3]}")
    model = load_encoder(ep["model"], int(ep["max_seq_length"]), ctx.device)
    t0 = time.perf_counter()
    emb = encode(model, [text_of[int(q)] for q in qids], int(ep.get("batch_size", 64)))
    t_encode = time.perf_counter() - t0
    e1, e2 = emb[np.searchsorted(qids, s1)], emb[np.searchsorted(qids, s2)]
    n_contexts = int(art.stats.get("contexts", art.num_rows))
    if p.encoder_form == "closed":
        m = load_scatter(art.files_dir / SCATTER_FILE).matrix(centred=p.centred)
        lab = closed_form_similarity(e1, e2, m)
        n_ctx = n_contexts
    elif p.encoder_form == "softmax":
        lab = softmax_profile_similarity(
            e1, e2, read_embeddings(art), p.tau, centred=p.centred, block=256
        )
        n_ctx = n_contexts
    else:
        lab = topk_union_similarity(e1, e2, read_embeddings(art), p.k, centred=p.centred)
        n_ctx = min(p.k, n_contexts)
    labels = np.full((len(s1), 1 + len(TERMS)), np.nan)
    labels[:, 0] = lab
    sizes = np.full(len(s1), n_ctx, dtype=np.int64)
    # the scorer's own cosine of the two sentences: what the contexts add over it
    other = {"scorer_cosine": (e1.astype(np.float64) * e2).sum(axis=1)}
    stats = {
        "encoder_form": p.encoder_form,
        "encoder_contexts": n_contexts,
        "encoder_sentences": len(qids),
        "encoder_encode_seconds": round(t_encode, 3),
    }
    return labels, sizes, sizes, other, stats
