"""iSTS 2016 alignments (Lee et al. 2022, Sec. 4.3) from RCMD token contributions."""

from __future__ import annotations

import numpy as np

from ctxsim.models.evaluation.ists import (
    WaAlignment,
    WaPair,
    chunk_word_ids,
    mutual_argmax,
    pool_chunks,
)
from ctxsim.models.evaluation.similarity import (
    avg_contributions,
    rcmd_contributions,
)
from ctxsim.tasks.evaluate.encoders import token_vectors


def _char_spans(chunks: list[list[str]]) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for ch in chunks:
        text = " ".join(ch)
        spans.append((pos, pos + len(text)))
        pos += len(text) + 1
    return spans


def _token_chunks(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[list[int]]:
    """Token rows overlapping each chunk's character span (CLRCMD's is_overlap)."""
    return [[k for k, (a, b) in enumerate(offsets) if a < e and s < b] for s, e in spans]


def align_pair(
    model, chunks1, chunks2, similarity: str = "rcmd"
) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Mutual-argmax chunk alignment of one pair and its token contribution matrix."""
    import torch

    x, _, off1 = token_vectors(model, " ".join(w for ch in chunks1 for w in ch))
    y, _, off2 = token_vectors(model, " ".join(w for ch in chunks2 for w in ch))
    fn = rcmd_contributions if similarity == "rcmd" else avg_contributions
    contrib = fn(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    c = pool_chunks(
        contrib,
        _token_chunks(off1, _char_spans(chunks1)),
        _token_chunks(off2, _char_spans(chunks2)),
    )
    return mutual_argmax(c), contrib


def ists_system(model, domain, similarity: str = "rcmd") -> list[WaPair]:
    """System alignments (EQUI, 5) of every pair of an iSTS domain."""
    out = []
    for gold, ch1, ch2 in zip(domain.gold, domain.chunks1, domain.chunks2, strict=True):
        pairs, _ = align_pair(model, ch1, ch2, similarity)
        w1, w2 = chunk_word_ids(ch1), chunk_word_ids(ch2)
        alis = [WaAlignment(w1[i], w2[j], ("EQUI",), 5.0, "") for i, j in pairs]
        out.append(WaPair(gold.id, gold.tokens1, gold.tokens2, alis))
    return out
