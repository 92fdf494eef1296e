"""Sentence encoders: the one place a ``SentenceTransformer`` is loaded by name, named by content,
checked against its position limit and run.

An *encoder* here is a sentence encoder, E(s) a vector per sentence: the `embed` stage's model
(and so the label stage's encoder route), the discriminative term of Eq. 3 with
``score.disc_scorer: encoder``, the mining encoder of `pairs` and the reference encoder of the
label diagnostics. Every package user loads it through :func:`load_encoder`:

- a registry name (models/registry.py) or a local sentence-transformers / transformers model
  directory (a plain transformers one gets mean pooling); never a hub id: no network at run time;
- a ``max_seq_length`` above the model's position limit is refused in one line naming the
  setting (a 4096 on MiniLM ended in a 779-line RuntimeError at the first long unit);
- :func:`encoder_identity` names it by registry name and by the content of its files, so a model
  trained again at the same path is another encoder (the `embed` fingerprint's ``scorer``).

Pure torch / sentence-transformers: no Prefect, no artefact store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxsim.models.digests import content_digest
from ctxsim.models.errors import InputError
from ctxsim.models.registry import REGISTRY, resolve_model

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

#: files of a model directory that do not change what it computes
_NOT_MODEL_FILES = {"README.md"}
#: model types whose position ids start after the padding index (RoBERTa's scheme): two of
#: their ``max_position_embeddings`` are never a token's position
_OFFSET_POSITIONS = {
    "roberta",
    "xlm-roberta",
    "xlm-roberta-xl",
    "camembert",
    "mpnet",
    "longformer",
    "ibert",
    "data2vec-text",
}


class EncoderInputError(InputError):
    """An encoder's input is unusable: the model, its length setting, the corpus's units or a
    scatter built from them. One line naming the setting or file."""


def encoder_problem(name: str) -> str | None:
    """Why ``name`` cannot be a sentence encoder, or None: a registry name or a local
    sentence-transformers / transformers model directory (no hub ids: no network at run time)."""
    if name in REGISTRY:
        return None
    path = Path(name).expanduser()
    if path.is_dir() and ((path / "modules.json").exists() or (path / "config.json").exists()):
        return None
    return (
        f"{name!r} is neither a registered model ({', '.join(REGISTRY)}) nor a model directory "
        "(one with modules.json or config.json)"
    )


def model_digest(path: str | Path) -> str:
    """sha256 over (relative path, content digest) of every file of a model directory, model
    cards and hidden files aside: a retrained model at the same path hashes differently."""
    root = Path(path)
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root)
        if not f.is_file() or f.name in _NOT_MODEL_FILES:
            continue
        if any(part.startswith(".") for part in rel.parts):
            continue
        h.update(f"{rel.as_posix()}:{content_digest(f)}\n".encode())
    return h.hexdigest()


def encoder_identity(name: str) -> dict[str, str]:
    """The encoder as a fingerprint names it: its registry name (or resolved path) and the
    content of its files (:func:`model_digest`)."""
    path = resolve_model(name)
    return {"name": name if name in REGISTRY else str(path), "digest": model_digest(path)}


def _limit_of(config: dict[str, Any]) -> int | None:
    """Tokens a transformers config can place: ``max_position_embeddings`` (less the padding
    offset of RoBERTa-style position ids), or None when the config declares none."""
    n = config.get("max_position_embeddings")
    if not isinstance(n, int) or n <= 0:
        return None
    return n - 2 if config.get("model_type") in _OFFSET_POSITIONS else n


def _transformer_config(model_dir: Path) -> Path:
    """The config.json of a model directory's transformer (a sentence-transformers directory
    keeps it in its Transformer module's folder, often the directory itself)."""
    modules = model_dir / "modules.json"
    if modules.is_file():
        try:
            for module in json.loads(modules.read_text()):
                if str(module.get("type", "")).endswith("Transformer"):
                    return model_dir / module.get("path", "") / "config.json"
        except (OSError, ValueError, AttributeError):
            pass
    return model_dir / "config.json"


def declared_limit(name: str) -> int | None:
    """The position limit of the encoder ``name`` from its config file alone (no weights
    loaded), or None when it cannot be read cheaply: a registry model not assembled yet, a
    missing or unreadable config. For a check at config load; :func:`load_encoder` checks the
    loaded model whatever this says."""
    spec = REGISTRY.get(name)
    try:
        if spec is not None and spec.kind != "dir":
            return None  # assembling it takes seconds to minutes: left to load time
        path = resolve_model(name)
        if not isinstance(path, Path) or not path.is_dir():
            return None
        return _limit_of(json.loads(_transformer_config(path).read_text()))
    except Exception:  # noqa: BLE001 - a model that does not resolve is another check's error
        return None


def position_limit(model: Any) -> int | None:
    """Tokens a loaded SentenceTransformer's transformer can place, or None when unknown."""
    try:
        config = model[0].auto_model.config
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    return _limit_of(config.to_dict())


def length_problem(max_seq_length: int, limit: int | None, key: str, name: str) -> str | None:
    """The one line refusing ``key=max_seq_length`` above the encoder's position limit."""
    if limit is None or max_seq_length <= limit:
        return None
    return (
        f"{key}={max_seq_length} is more than the {limit} token positions of the encoder "
        f"{name!r}; use {key} <= {limit}"
    )


def load_encoder(
    name: str,
    max_seq_length: int | None,
    device: str,
    *,
    model_key: str = "embed.model",
    length_key: str = "embed.max_seq_length",
) -> SentenceTransformer:
    """The encoder ``name`` (a registry name or a local model directory; a plain transformers
    directory gets mean pooling) as a SentenceTransformer truncating at
    ``max_seq_length`` tokens (None: the model's own setting). Refused in one line
    (:class:`EncoderInputError`) when ``name`` is no model, naming ``model_key``, or when
    ``max_seq_length`` is above the model's position limit, naming ``length_key``."""
    from sentence_transformers import SentenceTransformer

    problem = encoder_problem(name)
    if problem:
        raise EncoderInputError(f"{model_key}: {problem}")
    model = SentenceTransformer(str(resolve_model(name)), device=device)
    if max_seq_length is not None:
        problem = length_problem(max_seq_length, position_limit(model), length_key, name)
        if problem:
            raise EncoderInputError(problem)
        model.max_seq_length = max_seq_length
    return model


def load_capped(path: str | Path, device: str = "cpu", max_seq_length: int | None = None) -> Any:
    """A model directory as evaluation loads it (a trained surrogate, a baseline): through
    training's ``build_model`` (a plain transformers directory gets mean pooling, a decoder a pad
    token), eval mode, ``max_seq_length`` (None: 128) capped at two below the model's
    ``max_position_embeddings`` rather than refused: tiny models are trained short and evaluated
    at the evaluation's length."""
    from ctxsim.models.training.sentence_encoder import build_model

    model = build_model(str(path), max_seq_length or 128, device)
    if max_seq_length:
        model.max_seq_length = max_seq_length
    config = getattr(model[0], "auto_model", None) and model[0].auto_model.config
    limit = getattr(config, "max_position_embeddings", None) if config is not None else None
    if limit and model.max_seq_length and model.max_seq_length > limit - 2:
        model.max_seq_length = limit - 2
    model.eval()
    return model


def token_counts(model: Any, texts: list[str]) -> np.ndarray:
    """Tokens each text has for ``model`` (special tokens included), before truncation."""
    tok = model.tokenizer
    out = np.zeros(len(texts), np.int32)
    for lo in range(0, len(texts), 1024):
        batch = texts[lo : lo + 1024]
        enc = tok(batch, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        out[lo : lo + len(enc)] = [len(e) for e in enc]
    return out


def embedding_dim(model: Any) -> int:
    """The model's sentence embedding size (the method was renamed in sentence-transformers 5)."""
    dim_of = getattr(model, "get_embedding_dimension", None)
    return int((dim_of or model.get_sentence_embedding_dimension)())


def bf16_available(device: str) -> bool:
    """Whether ``device`` runs bf16 matrix products natively: a CUDA device that supports it,
    or a CPU whose oneDNN has bf16 kernels (AVX512-BF16 or AMX; oneDNN's own check)."""
    import torch

    if str(device).startswith("cuda"):
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check and check())


def bf16_scope(device: str, enabled: bool) -> Any:
    """bf16 autocast on a CPU that has the units when ``enabled`` (a no-op elsewhere: CUDA
    passes autocast per forward, a CPU without the units stays float32)."""
    import contextlib

    import torch

    if enabled and not str(device).startswith("cuda") and bf16_available("cpu"):
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def encode(
    model: Any,
    texts: list[str],
    batch_size: int,
    bar: Any | None = None,
    block: int = 2048,
    bf16: bool = False,
) -> np.ndarray:
    """Unit-normalised float32 embeddings, in ``block``-sized calls so ``bar`` moves (the model
    sorts by length within a call: a ``block`` of ``len(texts)`` is one call); ``bf16``: in
    bfloat16 autocast on the model's device (only where ``bf16_available``)."""
    import contextlib

    import torch

    kind = "cuda" if str(model.device).startswith("cuda") else "cpu"
    cast = torch.autocast(kind, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    out = np.zeros((len(texts), embedding_dim(model)), np.float32)
    for lo in range(0, len(texts), max(1, block)):
        part = texts[lo : lo + max(1, block)]
        with cast:
            got = model.encode(
                part,
                batch_size=batch_size,
                convert_to_tensor=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        out[lo : lo + len(part)] = got.float().cpu().numpy()
        if bar is not None:
            bar.update(len(part))
    return out


def token_lengths(model: Any, texts: Sequence[str]) -> np.ndarray:
    """Tokens each text has for ``model`` after truncation at its ``max_seq_length``."""
    return np.minimum(token_counts(model, list(texts)), model.max_seq_length)


def encode_sorted(model: Any, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Embeddings as the model outputs them (not normalised), in batches of texts of similar
    true token length (Sun et al. Sec. 4.2) and bf16 autocast on CUDA (sentence_encoder.forward):
    the evaluation's pass, where ``encode`` is the stages' (unit vectors, a progress bar)."""
    from ctxsim.models.training.sentence_encoder import forward

    order = np.argsort(-token_lengths(model, texts), kind="stable")
    out: list[np.ndarray] = []
    for i in range(0, len(order), batch_size):
        batch = [texts[j] for j in order[i : i + batch_size]]
        out.append(forward(model, batch)["sentence_embedding"].float().cpu().numpy())
    emb = np.concatenate(out) if out else np.zeros((0, 0), np.float32)
    res = np.empty_like(emb)
    res[order] = emb
    return res
