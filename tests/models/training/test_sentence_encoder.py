"""models/training/sentence_encoder.py: a backbone directory becomes a mean-pooled
sentence-transformers
model, a saved one loads as it is, dropout can be overridden, and one forward pass gives the
vectors encode() gives."""

from __future__ import annotations

import numpy as np
import pytest

TEXTS = ["a man plays the guitar .", "the dog runs in the park .", "a woman eats red food ."]


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.train import TrainParams

    p = TrainParams(tiny_vocab_size=120, max_seq_length=16)
    return build_tiny_backbone(TEXTS * 4, tmp_path_factory.mktemp("bb") / "backbone", p, 0)


def test_a_backbone_becomes_a_mean_pooled_encoder_and_reloads_the_same(backbone, tmp_path):
    from ctxsim.models.training.sentence_encoder import build_model, forward, transformer_dir

    model = build_model(str(backbone), 16, "cpu")
    assert model.max_seq_length == 16
    assert model[1].get_config_dict()["pooling_mode"] == "mean"
    model.save(str(tmp_path / "st"))
    again = build_model(str(tmp_path / "st"), 12, "cpu")
    assert again.max_seq_length == 12
    assert transformer_dir(tmp_path / "st") == str(tmp_path / "st")  # Transformer at the root
    model.eval()
    out = forward(model, TEXTS)
    assert out["sentence_embedding"].shape == (3, 32)
    assert out["token_embeddings"].shape[:2] == out["attention_mask"].shape
    vec = model.encode(TEXTS, convert_to_numpy=True)
    assert np.allclose(out["sentence_embedding"].float().numpy(), vec, atol=1e-5)


def test_dropout_is_set_on_every_dropout_key_and_checked(backbone):
    from ctxsim.models.training.sentence_encoder import build_model, dropout_config

    cfg = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "resid_pdrop": 0.0}
    cfg |= {"classifier_dropout": None, "use_dropout": True, "hidden_size": 32}
    assert dropout_config(cfg, 0.3) == {
        "hidden_dropout_prob": 0.3,
        "attention_probs_dropout_prob": 0.3,
        "resid_pdrop": 0.3,
    }
    with pytest.raises(ValueError, match="train.dropout"):
        dropout_config(cfg, 1.0)
    model = build_model(str(backbone), 16, "cpu", dropout=0.0)
    assert model[0].auto_model.config.hidden_dropout_prob == 0.0


def test_the_training_attention_kernel_is_eager_on_cpu_the_same_function_and_not_saved(
    backbone, tmp_path
):
    """train.attention auto (the adapt recipe's): eager (plain matmuls) on CPU, sdpa on a GPU;
    both kernels give the same vectors, and the saved model keeps the backbone's own kernel."""
    from ctxsim.models.training.sentence_encoder import (
        build_model,
        build_student,
        training_attention,
    )

    assert training_attention("auto", "cpu") == "eager"
    assert training_attention("auto", "cuda:0") == "sdpa"
    assert training_attention("sdpa", "cpu") == "sdpa"
    student = build_student(str(backbone), 16, "cpu", attention="auto")
    assert student[0].auto_model.config._attn_implementation == "eager"
    fused = build_student(str(backbone), 16, "cpu")
    assert fused[0].auto_model.config._attn_implementation == "sdpa"
    a = student.encode(TEXTS, convert_to_numpy=True)
    b = fused.encode(TEXTS, convert_to_numpy=True)
    assert np.allclose(a, b, atol=1e-5)
    student.save(str(tmp_path / "st"))
    again = build_model(str(tmp_path / "st"), 16, "cpu")
    assert again[0].auto_model.config._attn_implementation == "sdpa"


def test_freezing_the_lowest_layers_stops_their_gradients_and_refuses_the_whole_stack(backbone):
    """train.freeze_layers: the embeddings and the lowest layers get no gradient (a step skips
    their backward), the layers above do; freezing every layer would train nothing."""
    from ctxsim.models.training.sentence_encoder import build_student

    student = build_student(str(backbone), 16, "cpu", freeze_layers=1)
    student(student.tokenize(TEXTS))["sentence_embedding"].sum().backward()
    grads = {n: p.grad is not None for n, p in student[0].auto_model.named_parameters()}
    assert not any(g for n, g in grads.items() if n.startswith(("embeddings.", "encoder.layer.0.")))
    assert all(g for n, g in grads.items() if n.startswith("encoder.layer.1."))
    whole = build_student(str(backbone), 16, "cpu")
    assert all(p.requires_grad for p in whole[0].auto_model.parameters())
    with pytest.raises(ValueError, match="train.freeze_layers must be below the backbone's 2"):
        build_student(str(backbone), 16, "cpu", freeze_layers=2)
