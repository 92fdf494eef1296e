"""A tiny BERT built from scratch: the surrogate's backbone when no pretrained one is wanted
(``train.backbone: tiny-random``, the quickstart), the same vocabulary and weights on every run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the backbone name that asks for a tiny BERT learnt here instead of a registry model
TINY = "tiny-random"


def build_tiny_bert(
    texts: list[str],
    out_dir: Path,
    *,
    vocab_size: int,
    hidden_size: int,
    layers: int,
    heads: int,
    max_seq_length: int,
    seed: int,
) -> Path:
    """A randomly initialised small BERT (seeded) with a WordPiece vocabulary learned from
    ``texts`` (the same on every run: models/training/wordpiece.py), saved with its tokenizer in
    ``out_dir``; returns ``out_dir``."""
    import torch
    from tokenizers import processors
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from ctxsim.models.training.wordpiece import BERT_SPECIALS, learn_wordpiece

    tok = learn_wordpiece(texts, vocab_size, BERT_SPECIALS)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    fast = BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_seq_length,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    cfg = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden_size,
        max_position_embeddings=max(64, max_seq_length + 2),
    )
    torch.manual_seed(seed)
    BertModel(cfg).save_pretrained(out_dir)
    return out_dir


def build_tiny_backbone(texts: list[str], out_dir: Path, p: Any, seed: int) -> Path:
    """``build_tiny_bert`` sized by ``p``, the `train` config section (its ``tiny_*`` keys and
    ``max_seq_length``), in ``out_dir``."""
    return build_tiny_bert(
        texts,
        out_dir,
        vocab_size=p.tiny_vocab_size,
        hidden_size=p.tiny_hidden_size,
        layers=p.tiny_layers,
        heads=p.tiny_heads,
        max_seq_length=p.max_seq_length,
        seed=seed,
    )
