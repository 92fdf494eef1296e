"""What the `generator` stage trains and validates on: every context window ``[c<, s, c>]`` of
the `contexts` artefact as texts, split by document (by section in a one-document corpus) so
that validation never sees a training document, and one example per Eq. 3 direction."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxsim.models.contextual.generator import DIRECTIONS, GenerativeScorer, eq3_example
from ctxsim.models.contextual.generator_training import Example
from ctxsim.store.stage import StageContext
from ctxsim.store.tables import rows_of


def _join_text(texts: np.ndarray, rows: list[list[int]]) -> list[str]:
    return [" ".join(texts[r] for r in row) for row in rows]


def load_windows(ctx: StageContext) -> dict[str, Any]:
    """Every context window as texts, with its document and section (for the split)."""
    sh = (
        ctx.input("shard")
        .read_table(["sent_id", "doc_id", "section_id", "text"])
        .sort_by("sent_id")
    )
    sent_ids = sh.column("sent_id").to_numpy()
    texts = np.asarray(sh.column("text").to_pylist(), dtype=object)
    docs = sh.column("doc_id").to_numpy()
    secs = sh.column("section_id").to_numpy()
    co = ctx.input("contexts").read_table(
        ["context_id", "centre_sent_id", "left_sent_ids", "right_sent_ids"]
    )
    if co.num_rows == 0:
        raise ValueError("generator: the contexts artefact is empty (no window has both sides)")

    def rows(ids: np.ndarray, what: str) -> np.ndarray:
        return rows_of(sent_ids, ids, f"generator: contexts.{what} names sent_ids")

    centre = rows(co.column("centre_sent_id").to_numpy(), "centre_sent_id")
    left = [
        rows(np.asarray(x, np.int64), "left_sent_ids").tolist()
        for x in co.column("left_sent_ids").to_pylist()
    ]
    right = [
        rows(np.asarray(x, np.int64), "right_sent_ids").tolist()
        for x in co.column("right_sent_ids").to_pylist()
    ]
    return {
        "context_id": co.column("context_id").to_numpy().astype(np.int64),
        "sent_id": sent_ids[centre],
        "doc": docs[centre],
        "section": secs[centre],
        "left": _join_text(texts, left),
        "sentence": texts[centre].tolist(),
        "right": _join_text(texts, right),
    }


def split_windows(w: dict[str, Any], frac: float, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(train rows, held-out rows, unit) with whole documents held out (sections if one doc)."""
    unit_name = "doc" if len(np.unique(w["doc"])) >= 2 else "section"
    units = np.unique(w[unit_name])
    if len(units) < 2:
        raise ValueError("generator: need at least two sections to hold some out for validation")
    rng = np.random.default_rng(seed)
    n_val = min(len(units) - 1, max(1, round(frac * len(units))))
    val_units = rng.choice(units, size=n_val, replace=False)
    is_val = np.isin(w[unit_name], val_units)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val), unit_name


def make_examples(
    scorer: GenerativeScorer,
    w: dict[str, Any],
    rows: np.ndarray,
    directions: tuple[str, ...] | list[str] = DIRECTIONS,
) -> list[Example]:
    """The token ids of one example per window of ``rows`` and direction (source, target of
    Eq. 3's term)."""
    cache: dict[str, Any] = {}
    out: list[Example] = []
    for i in rows:
        for d in directions:
            src, tgt = eq3_example(d, w["left"][i], w["sentence"][i], w["right"][i])
            out.append((d, *scorer.example_ids(d, src, tgt, cache)))
    return out
