"""iSTS: the re-implemented organisers' F1 on hand-computed alignments, CLRCMD's gold filter,
chunk pooling, mutual argmax and the .wa reader/writer."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.models.evaluation.ists import (
    WaAlignment,
    WaPair,
    chunk_word_ids,
    equi_filter,
    ists_f1,
    mutual_argmax,
    pool_chunks,
)
from ctxsim.readers.ists import read_chunks, read_wa, write_wa

T1 = ["the", "death", "camp", "guard", "left", "."]
T2 = ["a", "guard", "went", "away", "."]


def _pair(alis, pid=1, t1=T1, t2=T2):
    return WaPair(pid, list(t1), list(t2), [WaAlignment(*a) for a in alis])


def test_f1_identical_is_one():
    g = [_pair([((1, 2, 3, 4), (1, 2), ("EQUI",), 5.0), ((5,), (3, 4), ("SIMI",), 4.0)])]
    assert ists_f1(g, g, ("ali", "type", "score", "typescore"))["typescore"]["f1"] == 1.0


def test_f1_fanout_weighting_by_hand():
    # gold: [death camp guard] <==> [guard] : 3 links, each t2 "guard" has fan-in 3 -> weight 1/3
    #       [left] <==> [went away]        : 2 links, t1 "left" fans out to 2 -> weight 1/2
    # gold total = 3 * 1/3 + 2 * 1/2 = 2
    gold = [_pair([((2, 3, 4), (2,), ("EQUI",), 5.0), ((5,), (3, 4), ("EQUI",), 5.0)])]
    # system: [guard] <==> [guard] (1 link, weight 1) and [left] <==> [went] (weight 1)
    sys_ = [_pair([((4,), (2,), ("EQUI",), 5.0), ((5,), (3,), ("EQUI",), 5.0)])]
    r = ists_f1(gold, sys_)["ali"]
    # precision: both system links are gold links, weighted by system fan-outs: 2 / 2 = 1
    # recall: gold links found = (4,2) weight 1/3 and (5,3) weight 1/2 -> (1/3 + 1/2) / 2
    assert r["precision"] == pytest.approx(1.0)
    assert r["recall"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert r["f1"] == pytest.approx(2 * r["recall"] / (1 + r["recall"]))


def test_f1_ignores_punctuation_noali_and_pools_pairs():
    gold = [
        _pair(
            [
                ((4,), (2,), ("EQUI",), 5.0),
                ((6,), (5,), ("EQUI",), 5.0),
                ((1,), (0,), ("NOALI",), None),
            ]
        ),
        _pair([((5,), (3,), ("SIMI",), 3.0)], pid=2),
    ]
    # the "." <==> "." link is punctuation on both sides: it counts for neither side
    sys_ = [
        _pair([((4,), (2,), ("EQUI",), 5.0), ((6,), (5,), ("EQUI",), 5.0)]),
        _pair([((5,), (4,), ("EQUI",), 5.0)], pid=2),
    ]
    r = ists_f1(gold, sys_, ("ali", "type", "score"))
    # pooled over pairs: system links 2 (1 right), gold links 2 (1 found)
    assert r["ali"]["precision"] == pytest.approx(0.5)
    assert r["ali"]["recall"] == pytest.approx(0.5)
    assert r["ali"]["f1"] == pytest.approx(0.5)
    # type and score of the matched link agree (EQUI, 5) -> same as ali
    assert r["type"]["f1"] == pytest.approx(0.5)
    sys_simi = [_pair([((4,), (2,), ("SIMI",), 3.0)]), _pair([], pid=2)]
    r2 = ists_f1(gold, sys_simi, ("ali", "type", "score"))
    assert r2["ali"]["precision"] == 1.0 and r2["type"]["precision"] == 0.0
    assert r2["score"]["precision"] == pytest.approx(1 - 2 / 5)


def test_equi_filter_as_clrcmd():
    g = [
        _pair(
            [
                ((4,), (2,), ("EQUI",), 5.0),
                ((5,), (3, 4), ("SIMI",), 2.0),
                ((1,), (0,), ("NOALI",), None),
                ((2, 3), (1,), ("OPPO",), 4.0),
            ]
        )
    ]
    f = equi_filter(g)[0].alignments
    assert [(a.ids1, a.type) for a in f] == [((4,), "EQUI"), ((2, 3), "OPPO"), ((6,), "EQUI")]
    f2 = equi_filter(g, remove_oppo=True)[0].alignments
    assert [a.ids1 for a in f2] == [(4,), (6,)]


def test_pool_and_mutual_argmax():
    contrib = np.array([[0.5, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.0, 0.4]])
    c = pool_chunks(contrib, [[0, 1], [2]], [[0], [1, 2]])
    assert c == pytest.approx(np.array([[0.3, 0.0], [0.0, 0.2]]))
    assert mutual_argmax(c) == [(0, 0), (1, 1)]
    assert mutual_argmax(np.array([[0.9, 0.8], [0.95, 0.1]])) == [(1, 0)]
    assert chunk_word_ids([["a", "b"], ["c"]]) == [(1, 2), (3,)]


def test_wa_into_a_directory_not_yet_made_is_written_whole(tmp_path):
    """evaluate writes the .wa files before its report makes the output directory."""
    pairs = [_pair([((1,), (1,), ("EQUI",), 5.0)])]
    path = tmp_path / "not" / "yet" / "ists.h.cosine.wa"
    write_wa(pairs, path)
    assert read_wa(path)[0].tokens1 == T1
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_wa_roundtrip_and_chunks(tmp_path):
    pairs = [_pair([((2, 3, 4), (2,), ("SPE1", "FACT"), 4.0), ((1,), (0,), ("NOALI",), None)])]
    path = tmp_path / "x.wa"
    write_wa(pairs, path)
    back = read_wa(path)
    assert back[0].tokens1 == T1 and back[0].tokens2 == T2
    assert back[0].alignments[0].types == ("SPE1", "FACT") and back[0].alignments[1].score is None
    ck = tmp_path / "c.txt"
    ck.write_text("[ China ] [ 's Peace Ark ] \nstray [ a b ]\n")
    assert read_chunks(ck) == [[["China"], ["'s", "Peace", "Ark"]], [["stray"], ["a", "b"]]]
