"""``train.context_gradient: sentence``: the right contexts are encoded without gradient, so a
context step runs the backward pass of its sentences alone, and the sentences still learn."""

from __future__ import annotations

import json

import pytest

from tests.models.training.test_context_objective import own_answer_margin, train_on_context
from tests.tasks.tiny_encoder import build_tiny_encoder

TEXTS = [
    "what is a cat ?",
    "a cat is a small animal that purrs .",
    "what is a dog ?",
    "a dog is an animal that barks at night .",
]


def _gradients(model, loss, features):
    model.zero_grad()
    loss(features, None).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_the_sentence_side_loss_is_the_ranking_loss_with_its_candidates_detached(tmp_path):
    """Its gradient is MNRL's when the candidates' embeddings are constants, and not MNRL's
    own (which also moves the candidates)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ctxsim.models.training.objectives.base import ranking_loss

    model = SentenceTransformer(str(build_tiny_encoder(TEXTS, tmp_path / "tiny")), device="cpu")
    model.eval()  # no dropout: the three losses see the same embeddings
    anchors, candidates = model.tokenize(TEXTS[0::2]), model.tokenize(TEXTS[1::2])
    full = ranking_loss(model)
    sentence_side = ranking_loss(model, candidates_gradient=False)
    assert type(sentence_side).__name__ == "AnchorGradientRankingLoss"

    def detached(features, labels):
        a = model(features[0])["sentence_embedding"]
        c = model(features[1])["sentence_embedding"].detach()
        return full.compute_loss_from_embeddings([a, c], labels)

    got = _gradients(model, sentence_side, [anchors, candidates])
    want = _gradients(model, detached, [anchors, candidates])
    both = _gradients(model, full, [anchors, candidates])
    assert len(got) == len(want) == len(both)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    assert any(not torch.allclose(g, b) for g, b in zip(got, both, strict=True))
    with torch.no_grad():
        assert float(sentence_side([anchors, candidates], None)) == pytest.approx(
            float(full([anchors, candidates], None))
        )


def test_the_context_objective_trains_its_sentences_towards_their_contexts_without_their_gradient(
    tmp_path,
):
    """The key reaches the loss, enters the fingerprint only when set, and the sentences are
    still pulled towards their own next sentences."""
    from ctxsim.tasks.train import TrainParams

    assert "context_gradient" not in TrainParams().model_dump()
    sentence = TrainParams(objective="context", context_gradient="sentence")
    assert sentence.model_dump()["context_gradient"] == "sentence"
    with pytest.raises(ValueError, match="context_gradient"):
        TrainParams(context_gradient="contexts")
    with pytest.raises(ValueError, match="objective simcse trains no right contexts"):
        TrainParams(objective="simcse", context_gradient="sentence")
    assert TrainParams(objective="ctxsim-context", context_gradient="sentence").context_gradient
    art = train_on_context(tmp_path, context_gradient="sentence", max_steps=24)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "context" and info["n_train_examples"] == 2
    trained, start = (own_answer_margin(art.files_dir / d) for d in ("model", "backbone"))
    assert trained > start + 0.02
