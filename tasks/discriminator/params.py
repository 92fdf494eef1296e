"""The `discriminator` config section (docs/stages.md lists its keys)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ctxsim.store.stage import StageParams


class DiscriminatorParams(StageParams):
    embeddings: Literal["scratch", "minilm"] = Field(
        "scratch",
        description=(
            "Token embeddings: scratch (a word/punctuation vocabulary built from the training "
            "documents) or minilm (all-MiniLM-L6-v2's WordPiece tokenizer and initial token "
            "embeddings, no download)."
        ),
    )
    emb_dim: int = Field(
        64,
        ge=4,
        description="Embedding size with embeddings scratch (minilm: 384).",
    )
    freeze_embeddings: bool = Field(
        False,
        description=(
            "Keep the token embeddings fixed during training (sensible with minilm on little data)."
        ),
    )
    hidden: int = Field(
        64,
        ge=2,
        description=(
            "LSTM units per direction (the paper: 300). Larger models rank better and cost more to "
            "train and screen."
        ),
    )
    head_hidden: int = Field(
        64,
        ge=0,
        description=(
            "Hidden units of the scoring head; 0 is the literal linear Eq. 1 (which cannot rank, "
            "see models/contextual/discriminator.py)."
        ),
    )
    interaction: bool = Field(
        True,
        description=(
            "Low-rank bilinear terms between s and c<, c> in the head (cacheable per side), so the "
            "score depends on their match and not only on each side's fluency."
        ),
    )
    dropout: float = Field(
        0.1,
        ge=0.0,
        lt=1.0,
        description="Dropout probability in training.",
    )
    vocab_size: int = Field(
        30_000,
        ge=10,
        description="Largest scratch vocabulary (embeddings scratch).",
    )
    min_freq: int = Field(
        2,
        ge=1,
        description=(
            "A word enters the scratch vocabulary when it occurs at least this often in the "
            "training documents."
        ),
    )
    max_tokens: int = Field(
        48,
        ge=2,
        description="Tokens per sentence; longer sentences are truncated.",
    )
    epochs: int = Field(
        2,
        ge=1,
        description="Passes over the training windows.",
    )
    batch_size: int = Field(
        64,
        ge=2,
        description="Windows per training step.",
    )
    lr: float = Field(
        2e-3,
        gt=0,
        description="Learning rate (AdamW).",
    )
    weight_decay: float = Field(
        0.01,
        ge=0,
        description="AdamW's weight decay.",
    )
    grad_clip: float = Field(
        1.0,
        ge=0,
        description="Gradient-norm clip (0: none).",
    )
    max_windows_per_epoch: int = Field(
        20_000,
        ge=0,
        description=(
            "Training windows sampled per epoch; 0: every training window each epoch. Bounds "
            "training time on a large corpus."
        ),
    )
    val_fraction: float = Field(
        0.1,
        gt=0,
        lt=1,
        description=(
            "Share of documents (of sections when the corpus is one document) held out for "
            "validation."
        ),
    )
    max_val_windows: int = Field(
        5_000,
        ge=10,
        description="Validation windows evaluated (a seeded sample of the held-out ones).",
    )
