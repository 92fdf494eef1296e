"""The adapted encoder: a sentence encoder followed by the linear layer M^(1/2) of its corpus.

With an encoder as the contextual model, Origin over every context of a corpus is the cosine of
M^(1/2)·e (models/contextual/encoder_origin.py). Appending that matrix to the encoder as a
sentence-transformers ``Dense`` module (no bias, identity activation) gives a model that needs
no corpus at inference and is used like any other: ``ctxsim evaluate DIR``, ``train.backbone=DIR``,
``SentenceTransformer(DIR)`` elsewhere.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from ctxsim.models.contextual.encoder_origin import psd_sqrt
from ctxsim.models.encoders import EncoderInputError, embedding_dim, load_encoder
from ctxsim.store.logs import get_logger

#: written beside the model: what it was built from (read back by checks and cards)
ADAPTED_META = "ctxsim_adapted.json"


def _dense_weight(m: np.ndarray) -> np.ndarray:
    """M^(1/2) as the Dense layer's float32 weight (scale is free under a cosine: its largest
    entry is 1, so the outputs stay near unit size)."""
    root = psd_sqrt(m)
    root /= np.abs(root).max() or 1.0
    return root.astype(np.float32)


def adapted_problem(out: Path, weight: np.ndarray, card_text: str, meta: dict | None) -> str | None:
    """Why the folder ``out`` is not the adapted encoder these inputs build, or None when it is:
    the same record (``ADAPTED_META``) and card, and a Dense layer holding exactly ``weight``
    (the base model's files were written before the folder was renamed into place)."""
    from safetensors.numpy import load_file

    if not out.is_dir():
        return "absent"
    try:
        if (out / ADAPTED_META).read_text() != json.dumps(meta or {}, indent=2, sort_keys=True):
            return f"{ADAPTED_META} differs"
        if card_text and (out / "README.md").read_text() != card_text:
            return "its card differs"
        modules = json.loads((out / "modules.json").read_text())
        dense = [d for d in modules if str(d.get("type", "")).endswith("Dense")]
        if len(dense) != 1:
            return "no Dense module"
        tensors = list(load_file(str(out / dense[-1]["path"] / "model.safetensors")).values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"unreadable ({e})"
    except Exception as e:  # noqa: BLE001 - safetensors' own error for a cut file
        return f"unreadable ({type(e).__name__}: {e})"
    if len(tensors) != 1 or not np.array_equal(tensors[0], weight):
        return "its Dense weight differs"
    return None


def build_adapted_encoder(
    model_path: str | Path,
    m: np.ndarray,
    out_dir: str | Path,
    *,
    card_text: str = "",
    meta: dict | None = None,
    device: str = "cpu",
    scratch: str | Path | None = None,
    logger: logging.Logger | logging.LoggerAdapter | None = None,
) -> Path:
    """Save ``model_path`` + Dense(M^(1/2)) to ``out_dir``, atomically and once.

    A finished ``out_dir`` that these inputs would build again (:func:`adapted_problem`) is
    reused as it is ("reused" in the log). Otherwise the model is written to a hidden
    ``.<name>.<id>.partial`` folder (in ``scratch``, on the same file system; default: beside
    ``out_dir``) and renamed into place, so a reader never sees half a model; a writer that
    loses the race to a concurrent one finds the winner's folder valid, removes its own partial
    folder and reuses it. A stale or different ``out_dir`` is replaced whole. ``out_dir``'s
    parent is never created: a caller whose folder was moved away meanwhile (a concurrent run
    published it) gets FileNotFoundError, with its partial folder removed."""
    import torch
    from sentence_transformers.sentence_transformer.modules import Dense

    log = logger or get_logger("ctxsim.adapted")
    m = np.asarray(m, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or not np.isfinite(m).all():
        raise EncoderInputError(f"adapted encoder: M must be a finite square matrix, got {m.shape}")
    out = Path(out_dir)
    weight = _dense_weight(m)
    if adapted_problem(out, weight, card_text, meta) is None:
        log.info("adapted encoder %s: reused (already built from the same inputs)", out)
        return out
    model = load_encoder(str(model_path), None, device)
    dim = embedding_dim(model)
    if dim != m.shape[0]:
        raise EncoderInputError(
            f"adapted encoder: {model_path} embeds in {dim} dimensions, the scatter matrix has "
            f"{m.shape[0]} (built with another encoder?)"
        )
    dense = Dense(
        dim,
        dim,
        bias=False,
        activation_function=torch.nn.Identity(),
        init_weight=torch.tensor(weight, dtype=torch.float32),
    )
    model.append(dense)
    tmp = Path(scratch or out.parent) / f".{out.name}.{uuid.uuid4().hex}.partial"
    old = out.with_name(f".{out.name}.{uuid.uuid4().hex}.old")
    try:
        model.save(str(tmp))
        if card_text:
            (tmp / "README.md").write_text(card_text)
        (tmp / ADAPTED_META).write_text(json.dumps(meta or {}, indent=2, sort_keys=True))
        if not out.parent.is_dir():
            raise FileNotFoundError(errno.ENOENT, "the adapted encoder's folder is gone", str(out))
        try:
            os.rename(tmp, out)  # fails on a finished folder already there
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
                raise
            if adapted_problem(out, weight, card_text, meta) is None:  # a concurrent writer won
                log.info("adapted encoder %s: reused (a concurrent build finished first)", out)
                return out
            out.rename(old)  # a stale or other one: never a moment with no model at ``out``
            os.rename(tmp, out)
        log.info("adapted encoder %s: published", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return out
