"""Scorers read from (and written to) the files of the `generator` and `discriminator`
artefacts: every stage that scores with them (score, select, screen, label) loads them here."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from ctxsim.models.contextual.discriminator import (
    CoherenceDiscriminator,
    DiscriminatorConfig,
    ScratchTokenizer,
)
from ctxsim.models.contextual.generator import (
    DIRECTIONS,
    CausalPrefixScorer,
    GenerativeScorer,
    Limits,
    Seq2SeqScorer,
)
from ctxsim.store.atomic import write_text_atomic
from ctxsim.store.errors import InputError

META_FILE = "generator.json"
#: a discriminator's tokenizer: (text, max tokens) -> token ids
Encoder = Callable[[str, int], np.ndarray]


def scorer_identity(meta: dict[str, Any], weight_dirs: list[Path]) -> str:
    """A hash of everything that decides a score: backend, templates, limits and the bytes of the
    weights and tokenizer. The score cache (store/score_cache.py) is keyed by it rather than by the
    generator's fingerprint, so settings that only shape the held-out evaluation (``n_eval``, its
    ``token_budget``) or the corpus a zero-shot backbone was validated on keep the cache."""
    h = hashlib.blake2b(digest_size=16)
    keys = ("backend", "shared", "templates", "limits")
    h.update(json.dumps({k: meta.get(k) for k in keys}, sort_keys=True).encode())
    for i, top in enumerate(weight_dirs):
        for f in sorted(x for x in top.rglob("*") if x.is_file() and not x.name.startswith(".")):
            h.update(f"{i}/{f.relative_to(top).as_posix()}\0".encode())
            with f.open("rb") as fh:
                while chunk := fh.read(1 << 22):
                    h.update(chunk)
    return h.hexdigest()


def save_scorer(scorer: GenerativeScorer, files: Path, meta: dict[str, Any], weights: bool) -> None:
    """``generator.json`` with the scorer's identity (+ safetensors weights and tokenizer when
    ``weights``; else ``meta["weights"]`` names the backbone directory)."""
    if weights:
        if isinstance(scorer, Seq2SeqScorer) and not scorer.shared:
            dirs = [files / f"model_{d}" for d in DIRECTIONS]
            for d, where in zip(DIRECTIONS, dirs, strict=True):
                scorer.models[d].save_pretrained(where)
        else:
            dirs = [files / "model"]
            scorer.modules()[0].save_pretrained(dirs[0])
        scorer.tokenizer.save_pretrained(files / "tokenizer")
        dirs.append(files / "tokenizer")
    else:
        dirs = [Path(meta["weights"])]
    meta = {**meta, "scorer_id": scorer_identity(meta, dirs)}
    write_text_atomic(files / META_FILE, json.dumps(meta, indent=2, sort_keys=True))


def load_scorer(files: Path, device: str = "cpu") -> tuple[GenerativeScorer, dict[str, Any]]:
    """The scorer a `generator` artefact describes (eval mode), and its metadata."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, EncoderDecoderModel

    mpath = files / META_FILE
    if not mpath.exists():
        raise FileNotFoundError(f"{mpath} is missing: not a generator artefact")
    meta = json.loads(mpath.read_text())
    limits = Limits(**meta["limits"])
    if meta["weights"] == "artefact":
        tok = AutoTokenizer.from_pretrained(str(files / "tokenizer"))
        where = {d: files / "model" for d in DIRECTIONS}
        if not meta.get("shared", True):
            where = {d: files / f"model_{d}" for d in DIRECTIONS}
    else:  # an untouched pretrained backbone, by its resolved directory
        src = Path(meta["weights"])
        if not src.exists():
            raise FileNotFoundError(
                f"{mpath}: backbone directory {src} is gone; re-resolve {meta['backbone']!r}"
            )
        tok = AutoTokenizer.from_pretrained(str(src))
        where = dict.fromkeys(DIRECTIONS, src)
    if meta["backend"] == "causal":
        model = AutoModelForCausalLM.from_pretrained(str(where["fwd"]), dtype=torch.float32)
        return CausalPrefixScorer(model, tok, meta["templates"], limits, device), meta
    if meta["weights"] != "artefact":
        raise ValueError(f"{mpath}: a seq2seq generator must carry its trained weights")
    loaded: dict[Path, Any] = {}
    models = {
        d: loaded.setdefault(w, EncoderDecoderModel.from_pretrained(str(w)))
        for d, w in where.items()
    }
    shared = len(loaded) == 1
    return Seq2SeqScorer(models["fwd"] if shared else models, tok, limits, device), meta


def hf_encoder(tok_dir: Path) -> tuple[Encoder, int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    if tok.pad_token_id != 0:
        raise InputError(f"{tok_dir}: pad token id is {tok.pad_token_id}, the model expects 0")

    def encode(text: str, max_len: int) -> np.ndarray:
        ids = tok(text, add_special_tokens=False, truncation=True, max_length=max_len)["input_ids"]
        return np.asarray(ids, dtype=np.int64)

    return encode, len(tok)


def load_discriminator(
    files: Path, device: str = "cpu"
) -> tuple[CoherenceDiscriminator, Encoder, dict[str, Any]]:
    """(model in eval mode, text -> token ids, config dict) from a discriminator artefact."""
    cfg_path = files / "config.json"
    if not cfg_path.exists():
        raise FileNotFoundError(f"{cfg_path} is missing: not a discriminator artefact")
    meta = json.loads(cfg_path.read_text())
    if meta["tokenizer"] == "scratch":
        tok = ScratchTokenizer(json.loads((files / "vocab.json").read_text()))
        encode: Encoder = tok.encode
    else:
        encode, _ = hf_encoder(files / "tokenizer")
    model = CoherenceDiscriminator(DiscriminatorConfig(**meta["model"]))
    model.load_state_dict(load_file(str(files / "model.safetensors")))
    model.to(device).eval()
    return model, encode, meta
