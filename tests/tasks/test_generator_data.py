"""The generator's windows as texts: every context's sentences joined in order, and a context
naming a sentence the shard lacks is an error that says which column names it."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from ctxsim.store.tables import MissingIdError
from ctxsim.tasks.generator.data import load_windows


def _ctx(right_ids: list[list[int]]) -> SimpleNamespace:
    shard = pa.table(
        {
            "sent_id": [13, 10, 11, 12],  # not in order: the stage sorts
            "doc_id": [1, 0, 0, 1],
            "section_id": [3, 2, 2, 3],
            "text": ["d.", "a.", "b.", "c."],
        }
    )
    contexts = pa.table(
        {
            "context_id": [100, 101],
            "centre_sent_id": [11, 12],
            "left_sent_ids": [[10], []],
            "right_sent_ids": right_ids,
        }
    )
    return _ctx_of({"shard": shard, "contexts": contexts})


def _ctx_of(tables: dict[str, pa.Table]) -> SimpleNamespace:
    """A stage context whose inputs read these tables."""
    return SimpleNamespace(
        input=lambda name: SimpleNamespace(read_table=lambda cols: tables[name].select(cols))
    )


def test_windows_join_each_sides_sentences_in_order() -> None:
    w = load_windows(_ctx([[12, 13], [13]]))
    assert w["left"] == ["a.", ""]
    assert w["sentence"] == ["b.", "c."]
    assert w["right"] == ["c. d.", "d."]
    assert w["doc"].tolist() == [0, 1] and w["section"].tolist() == [2, 3]
    assert w["context_id"].tolist() == [100, 101] and w["sent_id"].tolist() == [11, 12]


def test_a_context_naming_an_absent_sentence_says_which_column() -> None:
    with pytest.raises(MissingIdError, match=r"contexts\.right_sent_ids names sent_ids.*99"):
        load_windows(_ctx([[12], [99]]))


def test_windows_of_a_sliced_contexts_column_are_its_own_rows() -> None:
    """A list column that is a slice of a larger one (its offsets do not start at 0)."""
    shard = pa.table(
        {"sent_id": [10, 11, 12, 13], "doc_id": [0, 0, 1, 1], "section_id": [2, 2, 3, 3]}
        | {"text": ["a.", "b.", "c.", "d."]}
    )
    wide = pa.table(
        {
            "context_id": [99, 100, 101],
            "centre_sent_id": [10, 11, 12],
            "left_sent_ids": [[11, 12], [10], []],
            "right_sent_ids": [[13], [12, 13], [13]],
        }
    )
    sliced = wide.slice(1)  # offsets of the list columns start past 0
    w = load_windows(_ctx_of({"shard": shard, "contexts": sliced}))
    assert w["left"] == ["a.", ""] and w["right"] == ["c. d.", "d."]
