"""The adapted encoder: a sentence encoder followed by the linear layer M^(1/2) of its corpus.

With an encoder as the contextual model, Origin over every context of a corpus is the cosine of
M^(1/2)·e (models/contextual/encoder_origin.py). Appending that matrix to the encoder as a
sentence-transformers ``Dense`` module (no bias, identity activation) gives a model that needs
no corpus at inference and is used like any other: ``ctxsim evaluate DIR``, ``train.backbone=DIR``,
``SentenceTransformer(DIR)`` elsewhere.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import numpy as np

from ctxsim.models.contextual.encoder_origin import psd_sqrt
from ctxsim.models.encoders import EncoderInputError, embedding_dim, load_encoder

#: written beside the model: what it was built from (read back by checks and cards)
ADAPTED_META = "ctxsim_adapted.json"


def build_adapted_encoder(
    model_path: str | Path,
    m: np.ndarray,
    out_dir: str | Path,
    *,
    card_text: str = "",
    meta: dict | None = None,
    device: str = "cpu",
) -> Path:
    """Save ``model_path`` + Dense(M^(1/2)) to ``out_dir``, atomically (a finished directory is
    never replaced by a partial one: it is written beside and renamed into place)."""
    import torch
    from sentence_transformers.sentence_transformer.modules import Dense

    m = np.asarray(m, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or not np.isfinite(m).all():
        raise EncoderInputError(f"adapted encoder: M must be a finite square matrix, got {m.shape}")
    model = load_encoder(str(model_path), None, device)
    dim = embedding_dim(model)
    if dim != m.shape[0]:
        raise EncoderInputError(
            f"adapted encoder: {model_path} embeds in {dim} dimensions, the scatter matrix has "
            f"{m.shape[0]} (built with another encoder?)"
        )
    root = psd_sqrt(m)
    root /= np.abs(root).max() or 1.0  # scale is free (cosine); keep the outputs near unit size
    dense = Dense(
        dim,
        dim,
        bias=False,
        activation_function=torch.nn.Identity(),
        init_weight=torch.tensor(root, dtype=torch.float32),
    )
    model.append(dense)
    out = Path(out_dir)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex}.tmp")
    try:
        model.save(str(tmp))
        if card_text:
            (tmp / "README.md").write_text(card_text)
        (tmp / ADAPTED_META).write_text(json.dumps(meta or {}, indent=2, sort_keys=True))
        old = out.with_name(f".{out.name}.{uuid.uuid4().hex}.old")
        if out.exists():
            out.rename(old)  # never a moment with no finished model at ``out``
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
