"""Interpretable STS (SemEval-2016 Task 2) from token-pair contributions, and its F1 scorer.

Alignment (Lee et al. 2022, Sec. 4.3): token-pair contributions T * (1 - M) are average-pooled to
gold chunk pairs, ``C[i, j] = mean_{k in c1(i), l in c2(j)} contrib[k, l]``, and chunks i, j are
aligned when each is the other's argmax (mutual argmax).

Scorer: a re-implementation of the organisers' ``evalF1.pl`` (Agirre et al. 2016, after Melamed
1998): every chunk alignment becomes all its token:token links; single-character punctuation
tokens ``. , : ' ` ? ; " -`` (judged on the gold sentence's tokens) are discarded; each link weighs
``1 / max(fanout(t1), fanout(t2))`` with fan-outs taken in the set the link comes from; precision =
overlap weighted by the system's fan-outs / system total, recall = overlap weighted by the gold
fan-outs / gold total, pooled over all pairs (not averaged per pair). Modes: ``ali`` (F1 Ali),
``type`` (x Jaccard of the type sets), ``score`` (x (1 - |score diff| / 5)), ``typescore`` (both).

``equi_filter`` re-implements CLRCMD's gold preprocessing (``*.wa.equi``): add a ``. <==> .``
EQUI link when both sentences end with ".", then keep only alignments that are not NOALI (and
optionally not OPPO) and have a score of at least 3.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

_PUNCT = re.compile(r"^[.,:'`?;\"-]$")


@dataclass(frozen=True)
class WaAlignment:
    """One chunk alignment line: 1-based token ids (0 = unaligned), types, score (None = NIL)."""

    ids1: tuple[int, ...]
    ids2: tuple[int, ...]
    types: tuple[str, ...] = ("EQUI",)
    score: float | None = 5.0
    comment: str = ""

    @property
    def type(self) -> str:
        return "_".join(self.types)


@dataclass
class WaPair:
    """One sentence pair of a .wa file: its whitespace tokens and alignments."""

    id: int
    tokens1: list[str]
    tokens2: list[str]
    alignments: list[WaAlignment] = field(default_factory=list)


# ---- alignment from contributions ---------------------------------------------------------------


def pool_chunks(
    contrib: np.ndarray, chunks1: Sequence[Sequence[int]], chunks2: Sequence[Sequence[int]]
) -> np.ndarray:
    """Average-pool a token contribution matrix to chunk pairs (chunks = lists of token rows)."""
    c = np.full((len(chunks1), len(chunks2)), -np.inf)
    for i, r in enumerate(chunks1):
        for j, k in enumerate(chunks2):
            if len(r) and len(k):
                c[i, j] = float(np.asarray(contrib)[np.ix_(list(r), list(k))].mean())
    return c


def mutual_argmax(c: np.ndarray) -> list[tuple[int, int]]:
    """Chunk pairs (i, j) with j = argmax_j' C[i, j'] and i = argmax_i' C[i', j]."""
    if c.size == 0:
        return []
    rows, cols = c.argmax(axis=1), c.argmax(axis=0)
    return [(i, int(j)) for i, j in enumerate(rows) if cols[j] == i and np.isfinite(c[i, j])]


def chunk_word_ids(chunks: Sequence[Sequence[str]]) -> list[tuple[int, ...]]:
    """1-based word ids of each chunk, chunks being consecutive runs of the sentence's words."""
    out, start = [], 1
    for ch in chunks:
        out.append(tuple(range(start, start + len(ch))))
        start += len(ch)
    return out


# ---- gold filtering (CLRCMD run_split_ists_gold) ------------------------------------------------


def equi_filter(pairs: Sequence[WaPair], remove_oppo: bool = False) -> list[WaPair]:
    """CLRCMD's ``*.wa.equi`` gold: add the final-period link, drop NOALI (/OPPO) and score < 3."""
    removed = {"NOALI", "OPPO"} if remove_oppo else {"NOALI"}
    out = []
    for p in pairs:
        alis = list(p.alignments)
        if p.tokens1 and p.tokens2 and p.tokens1[-1] == "." and p.tokens2[-1] == ".":
            alis.append(WaAlignment((len(p.tokens1),), (len(p.tokens2),), ("EQUI",), 5.0, ". == ."))
        keep = [a for a in alis if a.type not in removed and a.score is not None and a.score >= 3]
        out.append(replace(p, alignments=keep))
    return out


# ---- the organisers' F1 ----------------------------------------------------------------------


@dataclass
class _Links:
    links: dict[tuple[int, int], tuple[tuple[str, ...], float]]
    out: dict[int, set[int]]
    inc: dict[int, set[int]]

    def weight(self, t1: int, t2: int) -> float:
        return 1.0 / max(len(self.out[t1]), len(self.inc[t2]))


def _links(pair: WaPair, gold_tokens: tuple[list[str], list[str]]) -> _Links:
    tok1, tok2 = gold_tokens
    links: dict[tuple[int, int], tuple[tuple[str, ...], float]] = {}
    for a in pair.alignments:
        if not a.ids1 or not a.ids2 or a.ids1[0] == 0 or a.ids2[0] == 0:
            continue
        t1s = [t for t in a.ids1 if not (0 < t <= len(tok1) and _PUNCT.match(tok1[t - 1]))]
        t2s = [t for t in a.ids2 if not (0 < t <= len(tok2) and _PUNCT.match(tok2[t - 1]))]
        score = 0.0 if a.score is None else float(a.score)
        for t1 in t1s:
            for t2 in t2s:
                links[(t1, t2)] = (a.types, score)
    out: dict[int, set[int]] = {}
    inc: dict[int, set[int]] = {}
    for t1, t2 in links:
        out.setdefault(t1, set()).add(t2)
        inc.setdefault(t2, set()).add(t1)
    return _Links(links, out, inc)


def _jaccard(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    sa, sb = {x.lower() for x in a}, {x.lower() for x in b}
    return len(sa & sb) / len(sa | sb) if sa | sb else 0.0


def _overlap(l1: _Links, l2: _Links, mode: str) -> float:
    total = 0.0
    for (t1, t2), (types1, score1) in l1.links.items():
        other = l2.links.get((t1, t2))
        if other is None:
            continue
        types2, score2 = other
        w = l1.weight(t1, t2)
        if mode in ("type", "typescore"):
            w *= _jaccard(types1, types2)
        if mode in ("score", "typescore"):
            w *= 1 - abs(score1 - score2) / 5
        total += w
    return total


def ists_f1(
    gold: Sequence[WaPair], system: Sequence[WaPair], modes: Sequence[str] = ("ali",)
) -> dict[str, dict[str, float]]:
    """F1 of system alignments against gold, per mode: {mode: {precision, recall, f1}}.

    Pairs are matched by id; punctuation is judged on the gold pair's tokens (as evalF1.pl does).
    """
    for m in modes:
        if m not in ("ali", "type", "score", "typescore"):
            raise ValueError(f"unknown F1 mode {m!r}")
    gold_by_id = {p.id: p for p in gold}
    sys_by_id = {p.id: p for p in system}
    toks = {i: (p.tokens1, p.tokens2) for i, p in gold_by_id.items()}
    g_links = {i: _links(p, toks[i]) for i, p in gold_by_id.items()}
    s_links = {i: _links(p, toks.get(i, (p.tokens1, p.tokens2))) for i, p in sys_by_id.items()}
    total_sys = sum(sum(lk.weight(*k) for k in lk.links) for lk in s_links.values())
    total_gold = sum(sum(lk.weight(*k) for k in lk.links) for lk in g_links.values())
    res = {}
    for m in modes:
        ov_sys = sum(_overlap(s_links[i], g_links[i], m) for i in s_links if i in g_links)
        ov_gold = sum(_overlap(g_links[i], s_links[i], m) for i in g_links if i in s_links)
        p = ov_sys / total_sys if total_sys else 0.0
        r = ov_gold / total_gold if total_gold else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        res[m] = {"precision": p, "recall": r, "f1": f}
    return res
