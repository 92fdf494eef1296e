"""The encoder scorer: a sentence encoder's cosine as Eq. 3's discriminative term."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ctxsim.scores import ScoreParams
from ctxsim.scores.scorers import SCORERS, Windows, get_scorer
from tests.tasks.tiny_encoder import build_tiny_encoder

SENTS = ["the heart pumps blood", "a virus spreads fast", "the heart pumps blood"]
LEFTS = ["blood moves through veins", "", "blood moves through veins"]
RIGHTS = ["it never stops", "people cough", "it never stops"]


def _windows() -> Windows:
    n = len(SENTS)
    obj = lambda xs: np.asarray(xs, dtype=object)  # noqa: E731
    return Windows(
        qid=np.arange(n),
        cid=np.array([7, 8, 7]),
        sents=obj(SENTS),
        lefts=obj(LEFTS),
        rights=obj(RIGHTS),
        left_ids=[[1], [], [1]],
        right_ids=[[2], [3], [2]],
        crow=np.array([0, 1, 2]),
        s_keys=np.arange(4),
        s_text=obj(["x", "blood moves through veins", "it never stops", "people cough"]),
    )


def test_encoder_disc_term_is_the_cosine_of_sentence_and_context(tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    model_dir = build_tiny_encoder(SENTS + LEFTS + RIGHTS, tmp_path / "enc")
    p = ScoreParams(disc_scorer="encoder", disc_encoder=str(model_dir))
    scorer = get_scorer(p.disc_scorer, "disc")
    assert scorer is SCORERS["encoder"] and scorer.inputs(p) == ()
    out = scorer.score(SimpleNamespace(device="cpu"), p, _windows())
    st = SentenceTransformer(str(model_dir), device="cpu")
    ctx_text = [f"{a} {b}".strip() for a, b in zip(LEFTS, RIGHTS, strict=True)]
    e = st.encode(SENTS, normalize_embeddings=True)
    c = st.encode(ctx_text, normalize_embeddings=True)
    np.testing.assert_allclose(out.columns["disc_logprob"], (e * c).sum(axis=1), atol=1e-5)
    assert list(out.columns["disc_source"]) == ["encoder"] * 3
    assert out.stats == {"encoder_sentences": 2, "encoder_contexts": 2}  # each encoded once


def test_encoder_disc_term_off_at_lambda_zero_and_default_fingerprint_kept() -> None:
    p = ScoreParams(disc_scorer="encoder", lambda_disc=0.0)
    out = get_scorer("encoder", "disc").score(SimpleNamespace(device="cpu"), p, _windows())
    assert list(out.columns["disc_source"]) == ["off"] * 3
    assert not out.columns["disc_logprob"].any()
    # the new keys stay out of existing configs' fingerprints at their defaults
    dumped = ScoreParams().model_dump()
    assert "disc_scorer" not in dumped and "disc_encoder" not in dumped
    assert ScoreParams(disc_scorer="encoder").model_dump()["disc_scorer"] == "encoder"
