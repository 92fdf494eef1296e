"""``train.loss: margin`` (models/training/objectives/margins.py): each row is one query sentence
and two of its labelled partners, the higher first, its target their labels' difference."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxsim.models.training.objectives.margins import query_margin_rows
from tests.models.training.tiny_training import PAIRS, cosines, train_on_pairs

# pairs (0, 1) 0.9, (0, 2) 0.5, (0, 3) 0.5, (1, 2) 0.7 and a sentence paired with itself
Q1, Q2 = [0, 0, 0, 1, 4], [1, 2, 3, 2, 4]
LAB = np.array([0.9, 0.5, 0.5, 0.7, 1.0])
TEXT = {i: f"sentence {i}" for i in range(5)}


def rows(n_rows=100, seed=0, labels=LAB):
    s1, s2 = [TEXT[i] for i in Q1], [TEXT[i] for i in Q2]
    return query_margin_rows(Q1, Q2, s1, s2, labels, n_rows, seed)


def as_triples(got):
    cols = (got["query"], got["higher"], got["lower"], got["score"])
    return {(q, h, lo): round(y, 5) for q, h, lo, y in zip(*cols, strict=True)}


def test_every_comparison_of_one_querys_partners_with_differing_labels():
    """Partners come from either side of a pair; equal labels (0's partners 2 and 3) and a
    sentence paired with itself give no row; the higher-labelled partner is always first."""
    t = TEXT
    assert as_triples(rows()) == {
        (t[0], t[1], t[2]): 0.4,
        (t[0], t[1], t[3]): 0.4,
        (t[1], t[0], t[2]): 0.2,
        (t[2], t[1], t[0]): 0.2,
    }


def test_a_seeded_sample_of_the_comparisons_and_no_label_that_is_not_finite():
    """``n_rows`` rows, the same for the same seed; a NaN label drops its pair."""
    two = rows(n_rows=2, seed=3)
    assert len(two["query"]) == 2 and two == rows(n_rows=2, seed=3)
    assert set(as_triples(two)) <= set(as_triples(rows()))
    nan_first = rows(labels=np.array([np.nan, 0.5, 0.5, 0.7, 1.0]))
    assert as_triples(nan_first) == {(TEXT[2], TEXT[1], TEXT[0]): 0.2}


def test_ids_texts_and_labels_of_unequal_length_are_refused():
    with pytest.raises(ValueError, match="one entry per pair"):
        query_margin_rows(Q1, Q2[:-1], ["a"] * 5, ["b"] * 5, LAB, 4, 0)


def test_the_margin_loss_widens_each_querys_gap_between_its_partners(tmp_path):
    """Trained with ``loss: margin`` on the tiny pairs' ranks, the cosine gap between a query's
    higher- and lower-labelled partner grows over the backbone's."""
    art = train_on_pairs(tmp_path, loss="margin", label_scale="rank")
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["loss"] == "margin" and info["steps"] == 12
    ids = {t: i for i, t in enumerate(sorted({p[0] for p in PAIRS} | {p[1] for p in PAIRS}))}
    s1, s2, lab = (list(c) for c in zip(*PAIRS, strict=True))
    got = query_margin_rows(
        [ids[t] for t in s1], [ids[t] for t in s2], s1, s2, np.arange(8.0)[::-1], 100, 0
    )
    assert len(got["query"]) >= 4

    def gap(path):
        hi = cosines(path, got["query"], got["higher"])
        lo = cosines(path, got["query"], got["lower"])
        return float((hi - lo).mean())

    assert gap(art.files_dir / "model") > gap(art.files_dir / "backbone") + 0.01
