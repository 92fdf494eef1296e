"""The `generator` stage on the sample corpus publishes a scorer that loads back
(scores/loading.py), and a causal scorer survives a save/load round trip with the same
scores."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.models.contextual.generator import (
    DIRECTIONS,
    CausalPrefixScorer,
    Seq2SeqScorer,
    tiny_causal,
)
from ctxsim.models.contextual.score_engine import ScoringEngine
from tests.models.contextual.tiny_scoring import TINY, windows


def test_generator_stage_publishes_a_loadable_scorer(generator_art):
    from ctxsim.scores.loading import load_scorer

    art, plan = generator_art
    st = art.stats
    assert st["backend"] == "seq2seq" and st["train_steps"] == 3 and st["eval_sentences"] == 12
    assert all(st[f"val_ppl_{d}"] > 1 for d in DIRECTIONS)
    assert all(0.0 <= st[f"wins_{t}"] <= 1.0 for t in ("gen_fwd", "gen_left", "gen_right", "S_gen"))
    assert (art.files_dir / "model" / "model.safetensors").exists()
    assert (plan.store.root / "_cache" / "generator" / plan.fingerprint / "checkpoint.pt").exists()
    rows = art.read_table()
    assert rows.num_rows == 12
    t = {k: np.asarray(v, np.float64) for k, v in rows.to_pydict().items()}
    for d in ("left", "right"):  # the pmi wins, from the published terms and their baselines
        own, rand = (t[f"gen_{d}_{w}"] - t[f"null_{d}_{w}"] for w in ("own", "random"))
        assert st[f"wins_pmi_{d}"] == pytest.approx(np.mean(own > rand), abs=1e-4)
        # s is in one window, not the other (a barely trained tiny model moves it by ~1e-5)
        assert (t[f"gen_{d}_own"] != t[f"null_{d}_own"]).any()
    assert (
        rows.column("own_context_id").to_numpy() != rows.column("random_context_id").to_numpy()
    ).all()
    scorer, meta = load_scorer(art.files_dir)
    assert meta["backend"] == "seq2seq" and isinstance(scorer, Seq2SeqScorer)


def test_causal_scorer_save_load_round_trip(tok, tmp_path):
    from ctxsim.scores.loading import load_scorer, save_scorer

    sc = CausalPrefixScorer(tiny_causal(tok, TINY), tok)
    meta = {
        "backend": "causal",
        "backbone": "tiny-random",
        "shared": True,
        "templates": sc.templates,
        "limits": {"max_context_tokens": 96, "max_sentence_tokens": 64},
        "weights": "artefact",
    }
    save_scorer(sc, tmp_path, meta, weights=True)
    sc2, _ = load_scorer(tmp_path)
    lefts, sents, rights = windows(6)
    a, b = (
        ScoringEngine(sc).score(lefts, sents, rights),
        ScoringEngine(sc2).score(lefts, sents, rights),
    )
    for d in DIRECTIONS:
        np.testing.assert_allclose(a[d], b[d], rtol=1e-5, atol=1e-6)
