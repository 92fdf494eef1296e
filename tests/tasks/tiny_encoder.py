"""A tiny randomly initialised sentence-transformers model for the encoder route's tests."""

from __future__ import annotations

from pathlib import Path


def build_tiny_encoder(texts: list[str], out: Path, seed: int = 0) -> Path:
    """A 2-layer, 32-d BERT with a WordPiece vocabulary learned from ``texts``, mean pooled,
    saved as a sentence-transformers directory at ``out``."""
    from ctxsim.models.training.sentence_encoder import build_model
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.train import TrainParams

    p = TrainParams(tiny_vocab_size=300, max_seq_length=32)
    backbone = build_tiny_backbone(texts, out.parent / f"{out.name}-backbone", p, seed)
    model = build_model(str(backbone), 32, "cpu")
    model.save(str(out))
    return out
