"""The contamination check (product/contamination.py): planted and near copies of STS test
sentences are found, near misses and dev sets are not, and the label stage reports them (or
fails on them)."""

from __future__ import annotations

import json

import pytest

from ctxsim.product.contamination import (
    ContaminationError,
    ContaminationParams,
    check_contamination,
    normalise,
)
from ctxsim.readers.sts import write_tsv
from tests.product.planted_sts import LONG, sts_dir
from tests.tasks.test_label import _fake_world, _run_label


def test_contamination_finds_planted_and_near_copies_and_ignores_near_misses(tmp_path):
    sts = sts_dir(tmp_path)
    words = LONG.split()
    near_copy = " ".join(words[:-1] + ["village"])  # one word of 15 changed: 3-gram J = 12/14
    near_miss = " ".join(words[:7] + ["and", "then", "nothing", "else", "happened", "at", "all"])
    sentences = [
        "  a MAN is playing a large flute -- on the stage, tonight!",  # planted, normalised
        near_copy,
        near_miss,  # shares 5 of its 3-grams: Jaccard 5/20 < 0.8
        "Only in the dev split, never a test sentence.",  # dev sets are not test sets
        "Something else entirely.",
    ]
    rep = check_contamination(sentences, sts, ContaminationParams(ngram=3, threshold=0.8))
    assert rep["contaminated"] == 2 and rep["exact"] == 1 and rep["ngram"] == 1
    assert rep["checked_sentences"] == 5 and rep["by_test_set"] == {"STSX.genre": 2}
    assert len(rep["test_files"]) == 2 and not any("dev" in f for f in rep["test_files"])
    hit = {e["sentence"]: e for e in rep["examples"]}
    assert hit[near_copy]["jaccard"] == pytest.approx(12 / 14, abs=1e-4)
    assert near_miss not in hit
    # the near miss counts once the threshold drops below its Jaccard
    low = check_contamination([near_miss], sts, ContaminationParams(ngram=3, threshold=0.2))
    assert low["contaminated"] == 1
    assert normalise(" A  MAN, is!") == "a man is"


def test_label_stage_reports_contamination_and_can_fail_on_it(tmp_path):
    store, arts, _ = _fake_world(tmp_path / "w", given=False)
    sts = tmp_path / "sts"
    sts.mkdir()
    write_tsv(sts / "BAR.test.tsv", ["Cats purr number 2."], ["unrelated"], [3.0])
    art = _run_label(store, arts, contamination={"sts_dir": str(sts)})
    assert art.stats["contamination"] == 1 and art.stats["contamination_exact"] == 1
    diag = json.loads((art.files_dir / "diagnostics.json").read_text())
    assert diag["contamination"]["examples"][0]["sentence"] == "cats purr number 2"
    with pytest.raises(ContaminationError, match="label.contamination.error"):
        _run_label(store, arts, contamination={"sts_dir": str(sts), "error": True})
    exact_only = _run_label(store, arts, contamination={"sts_dir": str(sts), "threshold": 1.0})
    assert exact_only.stats["contamination"] == 1  # exact matches do not depend on the threshold
    off = _run_label(store, arts)  # no STS directory configured: recorded as not checked
    assert off.stats["contamination"] is None
