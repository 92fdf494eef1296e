"""What the `generator` stage trains and validates on: every context window ``[c<, s, c>]`` of
the `contexts` artefact as texts, split by document (by section in a one-document corpus) so
that validation never sees a training document, and one example per Eq. 3 direction."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctxsim.models.contextual.generator import DIRECTIONS, GenerativeScorer, eq3_example
from ctxsim.models.contextual.generator_training import Example
from ctxsim.store.errors import InputError
from ctxsim.store.stage import StageContext
from ctxsim.store.tables import rows_of


def _join_text(
    texts: pa.Array, sent_ids: np.ndarray, lists: pa.ChunkedArray, what: str
) -> list[str]:
    """Each row's sentences (a list of sent_ids) joined by a space, in one pass over all rows
    (a lookup and a Python join per row took most of the stage for a zero-shot backbone)."""
    lists = lists.combine_chunks()
    flat = rows_of(
        sent_ids,
        lists.flatten().to_numpy(zero_copy_only=False),
        f"generator: contexts.{what} names sent_ids",
    )
    nested = pa.ListArray.from_arrays(lists.offsets, texts.take(pa.array(flat)))
    return pc.binary_join(nested, " ").to_pylist()


def load_windows(ctx: StageContext) -> dict[str, Any]:
    """Every context window as texts, with its document and section (for the split)."""
    sh = (
        ctx.input("shard")
        .read_table(["sent_id", "doc_id", "section_id", "text"])
        .sort_by("sent_id")
    )
    sent_ids = sh.column("sent_id").to_numpy()
    texts = sh.column("text").combine_chunks()
    docs = sh.column("doc_id").to_numpy()
    secs = sh.column("section_id").to_numpy()
    co = ctx.input("contexts").read_table(
        ["context_id", "centre_sent_id", "left_sent_ids", "right_sent_ids"]
    )
    if co.num_rows == 0:
        raise InputError("generator: the contexts artefact is empty (no window has both sides)")
    centre = rows_of(
        sent_ids,
        co.column("centre_sent_id").to_numpy(),
        "generator: contexts.centre_sent_id names sent_ids",
    )
    return {
        "context_id": co.column("context_id").to_numpy().astype(np.int64),
        "sent_id": sent_ids[centre],
        "doc": docs[centre],
        "section": secs[centre],
        "left": _join_text(texts, sent_ids, co.column("left_sent_ids"), "left_sent_ids"),
        "sentence": texts.take(pa.array(centre)).to_pylist(),
        "right": _join_text(texts, sent_ids, co.column("right_sent_ids"), "right_sent_ids"),
    }


def split_windows(w: dict[str, Any], frac: float, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(train rows, held-out rows, unit) with whole documents held out (sections if one doc)."""
    unit_name = "doc" if len(np.unique(w["doc"])) >= 2 else "section"
    units = np.unique(w[unit_name])
    if len(units) < 2:
        raise InputError("generator: need at least two sections to hold some out for validation")
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
