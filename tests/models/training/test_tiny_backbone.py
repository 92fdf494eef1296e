"""models/training/tiny_backbone.py: the tiny BERT is sized as asked, its vocabulary comes from
the texts, and the same texts and seed give the same files (the quickstart's reproducibility)."""

from __future__ import annotations

import json

from ctxsim.models.training.tiny_backbone import build_tiny_bert

TEXTS = ["a man plays the guitar .", "the dog runs in the park .", "a woman eats red food ."] * 4
SIZE = {"vocab_size": 120, "hidden_size": 32, "layers": 1, "heads": 2, "max_seq_length": 16}


def test_the_tiny_bert_is_sized_as_asked_and_the_same_for_the_same_seed(tmp_path):
    a = build_tiny_bert(TEXTS, tmp_path / "a", **SIZE, seed=0)
    b = build_tiny_bert(TEXTS, tmp_path / "b", **SIZE, seed=0)
    c = build_tiny_bert(TEXTS, tmp_path / "c", **SIZE, seed=1)
    cfg = json.loads((a / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]) == (32, 1, 2)
    assert cfg["intermediate_size"] == 128 and cfg["max_position_embeddings"] == 64
    vocab = json.loads((a / "tokenizer.json").read_text())["model"]["vocab"]
    assert cfg["vocab_size"] == len(vocab) <= 120 and "guitar" in vocab
    weights = "model.safetensors"
    assert (a / weights).read_bytes() == (b / weights).read_bytes()
    assert (a / weights).read_bytes() != (c / weights).read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
