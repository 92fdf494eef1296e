"""Sentence and token vectors for evaluation: a sentence-transformers model (models/encoders.py
loads it and encodes in length-sorted batches), pair similarities in one forward per batch, and
the word vectors DynaMax-Jaccard (Zhelezniak et al. 2019) pools."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ctxsim.models.encoders import encode_sorted, load_capped, token_lengths
from ctxsim.models.evaluation.dynamax import dynamax_pairs
from ctxsim.models.evaluation.similarity import (
    cosine_paired,
    rcmd_paired,
)
from ctxsim.models.training.sentence_encoder import forward


def load_st(path: str | Path, device: str = "cpu", max_seq_length: int | None = None):
    """A SentenceTransformer from a saved directory (or a plain transformers dir, mean-pooled),
    its length capped within the model: models/encoders.py ``load_capped``."""
    return load_capped(path, device, max_seq_length)


def encode_sentences(model, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Sentence embeddings of the evaluation: models/encoders.py ``encode_sorted``."""
    return encode_sorted(model, texts, batch_size)


def pair_similarities(
    model,
    s1: Sequence[str],
    s2: Sequence[str],
    batch_size: int = 64,
    similarities: Sequence[str] = ("cosine", "rcmd"),
) -> dict[str, np.ndarray]:
    """Cosine and/or RCMD for every pair, pairs bucketed by length, one forward per batch."""
    import torch

    if len(s1) != len(s2):
        raise ValueError(f"{len(s1)} first sentences but {len(s2)} second sentences")
    lens = np.maximum(token_lengths(model, s1), token_lengths(model, s2))
    order = np.argsort(-lens, kind="stable")
    res = {s: np.zeros(len(s1)) for s in similarities}
    half = max(1, batch_size // 2)
    for i in range(0, len(order), half):
        idx = order[i : i + half]
        out = forward(model, [s1[j] for j in idx] + [s2[j] for j in idx])
        b = len(idx)
        # the similarities in float32 whatever autocast the encoder ran in (evaluate.bf16_cpu)
        with torch.autocast(model.device.type, enabled=False):
            if "cosine" in res:
                e = out["sentence_embedding"].float()
                res["cosine"][idx] = cosine_paired(e[:b], e[b:]).cpu().numpy()
            if "rcmd" in res:
                t, m = out["token_embeddings"].float(), out["attention_mask"].bool()
                res["rcmd"][idx] = rcmd_paired(t[:b], m[:b], t[b:], m[b:]).cpu().numpy()
    return res


def token_vectors(model, text: str) -> tuple[np.ndarray, list[str], list[tuple[int, int]]]:
    """Last-layer vectors of the non-special tokens of one text, with tokens and char offsets."""
    import torch

    tok = model.tokenizer
    enc = tok(
        [text],
        return_offsets_mapping=True,
        truncation=True,
        max_length=model.max_seq_length,
        return_tensors="pt",
    )
    offsets = [tuple(map(int, o)) for o in enc.pop("offset_mapping")[0].tolist()]
    special = set(tok.all_special_ids)
    ids = enc["input_ids"][0].tolist()
    keep = [
        k
        for k, (i, o) in enumerate(zip(ids, offsets, strict=True))
        if i not in special and o[1] > o[0]
    ]
    feats = {k: v.to(model.device) for k, v in enc.items()}
    with torch.inference_mode():
        te = model(feats)["token_embeddings"][0].float().cpu().numpy()
    return te[keep], [tok.convert_ids_to_tokens(ids[k]) for k in keep], [offsets[k] for k in keep]


# ---- DynaMax ---------------------------------------------------------------------------------


def wordllama_vectors() -> tuple[Callable[[str], list[int]], np.ndarray]:
    """WordLlama's packaged 256-d vectors and tokenizer (loaded from the wheel, no download)."""
    import wordllama
    from safetensors import safe_open
    from wordllama import WordLlama

    root = Path(wordllama.__file__).parent
    tok = WordLlama.load_tokenizer(root / "tokenizers" / "l2_supercat_tokenizer_config.json")
    with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), framework="np") as f:
        vec = f.get_tensor("embedding.weight").astype(np.float32)
    return (lambda s: tok.encode(s, add_special_tokens=False).ids), vec


def backbone_vectors(model) -> tuple[Callable[[str], list[int]], np.ndarray]:
    """The backbone's input embedding table and tokenizer (no special tokens)."""
    vec = model[0].auto_model.get_input_embeddings().weight.detach().float().cpu().numpy()
    tok = model.tokenizer
    return (lambda s: tok(s, add_special_tokens=False)["input_ids"]), vec


def dynamax_scores(s1, s2, tokenize: Callable[[str], list[int]], vectors: np.ndarray) -> np.ndarray:
    return dynamax_pairs([tokenize(a) for a in s1], [tokenize(b) for b in s2], vectors)
