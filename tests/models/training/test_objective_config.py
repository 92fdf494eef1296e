"""The `train` stage's objective, loss and dropout settings: bad names and values are config
errors naming the key, new keys at their default keep the fingerprint, and `train.dropout` sets
every dropout probability of a backbone or sentence-transformers model."""

from __future__ import annotations

import pytest

from tests.models.training.tiny_training import PAIRS


@pytest.mark.parametrize(
    ("override", "key"),
    [("train.loss=mse", "train.loss"), ("train.objective=bm25", "train.objective")],
)
def test_unknown_loss_or_objective_is_a_config_error_naming_the_key(override, key):
    from ctxsim.flows.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, [override], stages=["train"])
    assert key in str(e.value)


def test_new_keys_at_their_default_keep_the_fingerprint():
    """objective=ctxsim is version 2's behaviour: it is left out of the dump (and fingerprint)."""
    from ctxsim.tasks.train import TrainParams

    assert "objective" not in TrainParams().model_dump()
    assert TrainParams(objective="simcse").model_dump()["objective"] == "simcse"
    assert TrainParams(loss="cosent").model_dump()["loss"] == "cosent"
    assert "dropout" not in TrainParams().model_dump()
    assert TrainParams(dropout=0.1).model_dump()["dropout"] == 0.1


def test_dropout_out_of_range_is_a_config_error_naming_the_key():
    from ctxsim.flows.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, ["train.dropout=1.5"], stages=["train"])
    assert "train.dropout" in str(e.value)


def test_has_dropout_sees_modules_and_config():
    import torch

    from ctxsim.models.training.objectives import has_dropout

    assert has_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1)))
    assert not has_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.0)))


def test_dropout_config_sets_every_dropout_probability():
    from ctxsim.models.training.objectives import dropout_config

    bert = {
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "hidden_size": 32,
        "use_cache": True,
    }
    assert dropout_config(bert, 0.0) == {
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }
    assert dropout_config({"attention_dropout": 0.0, "resid_pdrop": 0.1}, 0.1) == {
        "attention_dropout": 0.1,
        "resid_pdrop": 0.1,
    }
    with pytest.raises(ValueError, match="train.dropout"):
        dropout_config(bert, 1.0)


def test_train_dropout_makes_simcse_views_differ(tmp_path):
    """With train.dropout 0 a training-mode forward pass is deterministic (SimCSE's two views of
    a sentence are identical); with 0.1 they differ. Both for a bare backbone and for a
    sentence-transformers directory (whose config sits in its Transformer module's folder)."""
    import torch

    from ctxsim.models.training.objectives import has_dropout
    from ctxsim.models.training.sentence_encoder import build_model
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.train import TrainParams

    p = TrainParams(tiny_vocab_size=120, max_seq_length=16)
    texts = [a for a, _, _ in PAIRS] + [b for _, b, _ in PAIRS]
    backbone = str(build_tiny_backbone(texts, tmp_path / "bb", p, seed=0))

    def views_differ(model) -> bool:
        model.train()
        feats = model.tokenize(texts[:4])
        torch.manual_seed(0)
        a = model(dict(feats))["sentence_embedding"]
        b = model(dict(feats))["sentence_embedding"]
        return not torch.allclose(a, b)

    quiet = build_model(backbone, 16, "cpu", dropout=0.0)
    assert not has_dropout(quiet) and not views_differ(quiet)
    noisy = build_model(backbone, 16, "cpu", dropout=0.1)
    assert has_dropout(noisy) and views_differ(noisy)
    quiet.save(str(tmp_path / "st"))  # an ST directory, reloaded with noise switched on
    reloaded = build_model(str(tmp_path / "st"), 16, "cpu", dropout=0.3)
    assert reloaded[0].auto_model.config.hidden_dropout_prob == 0.3 and views_differ(reloaded)
