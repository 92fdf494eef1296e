"""The adapted encoder (scorer + Dense(M^(1/2))) reproduces the closed-form Origin."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.models.contextual.encoder_origin import ScatterStats, closed_form_similarity
from ctxsim.product.adapted import ADAPTED_META, build_adapted_encoder
from tests.tasks.tiny_encoder import build_tiny_encoder

TEXTS = [
    "the heart pumps blood through the body",
    "blood pressure is measured in the arm",
    "a cold is caused by a virus",
    "the virus spreads through coughing",
    "exercise helps the heart stay strong",
    "sleep matters for recovery after illness",
]


def test_adapted_encoder_cosine_is_the_closed_form(tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    base = build_tiny_encoder(TEXTS, tmp_path / "tiny")
    scorer = SentenceTransformer(str(base), device="cpu")
    ctx = scorer.encode(TEXTS, convert_to_numpy=True)
    m = ScatterStats.of(ctx).matrix()
    s1, s2 = ["the heart and blood", "a virus"], ["blood pressure", "coughing spreads it"]
    want = closed_form_similarity(
        scorer.encode(s1, convert_to_numpy=True), scorer.encode(s2, convert_to_numpy=True), m
    )
    out = build_adapted_encoder(base, m, tmp_path / "adapted", card_text="# card\n", meta={"k": 1})
    adapted = SentenceTransformer(str(out), device="cpu")
    a = adapted.encode(s1, convert_to_numpy=True, normalize_embeddings=True)
    b = adapted.encode(s2, convert_to_numpy=True, normalize_embeddings=True)
    np.testing.assert_allclose((a * b).sum(axis=1), want, atol=1e-5)
    assert (out / "README.md").read_text() == "# card\n"
    assert (out / ADAPTED_META).exists()
    # rebuilt in place: the finished directory is replaced whole, nothing left beside it
    build_adapted_encoder(base, m, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapted", "tiny", "tiny-backbone"]


def test_a_matrix_of_another_scorer_is_refused(tmp_path) -> None:
    base = build_tiny_encoder(TEXTS, tmp_path / "tiny")
    with pytest.raises(ValueError, match="embeds in 32 dimensions, the scatter matrix has 8"):
        build_adapted_encoder(base, np.eye(8), tmp_path / "x")
    with pytest.raises(ValueError, match="finite square"):
        build_adapted_encoder(base, np.full((32, 32), np.nan), tmp_path / "x")
    assert not (tmp_path / "x").exists()
