"""Building scorers: tiny random models for tests and quickstart, a learnt WordPiece vocabulary,
control tokens, and BERT2BERT warm starts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ctxsim.models.contextual.generator.protocol import (
    CONTROL_TOKENS,
)
from ctxsim.models.training.wordpiece import BERT_SPECIALS, bert_style, learn_wordpiece


def add_control_tokens(tokenizer: Any) -> int:
    """Register the direction control tokens; returns how many were new."""
    return tokenizer.add_special_tokens(
        {"additional_special_tokens": list(CONTROL_TOKENS.values())},
        replace_extra_special_tokens=False,
    )


def train_wordpiece_tokenizer(
    texts: Iterable[str], vocab_size: int = 4000, vocab: Sequence[str] | None = None
) -> Any:
    """A BERT-style lower-cased WordPiece tokenizer learnt from ``texts`` (for tiny models; the
    same on every run, see models/training/wordpiece.py), or built from an explicit ``vocab``.

    It has [PAD] [UNK] [CLS] [SEP] [MASK] and the control tokens, and serves both backends
    (the causal one uses [CLS] as BOS and [SEP] as EOS).
    """
    from tokenizers import models
    from transformers import PreTrainedTokenizerFast

    specials = [*BERT_SPECIALS, *CONTROL_TOKENS.values()]
    if vocab is not None:
        words = specials + [w for w in dict.fromkeys(vocab) if w not in specials]
        tok = bert_style(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    else:
        tok = learn_wordpiece(texts, vocab_size, specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        bos_token="[CLS]",
        eos_token="[SEP]",
        additional_special_tokens=list(CONTROL_TOKENS.values()),
    )


@dataclass
class TinyConfig:
    """Size of a from-scratch model (``backbone: tiny-random``)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 128
    max_positions: int = 512
    extra: dict[str, Any] = field(default_factory=dict)


def tiny_seq2seq(tokenizer: Any, cfg: TinyConfig, seed: int = 0) -> Any:
    """A randomly initialised BERT2BERT ``EncoderDecoderModel`` sized by ``cfg``."""
    from transformers import BertConfig, BertLMHeadModel, BertModel, EncoderDecoderModel

    torch.manual_seed(seed)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        **cfg.extra,
    )
    enc = BertModel(BertConfig(**common), add_pooling_layer=False)
    dec = BertLMHeadModel(BertConfig(**common, is_decoder=True, add_cross_attention=True))
    return EncoderDecoderModel(encoder=enc, decoder=dec)


def tiny_causal(
    tokenizer: Any, cfg: TinyConfig, seed: int = 0, vocab_size: int | None = None
) -> Any:
    """A randomly initialised Llama-style causal LM sized by ``cfg`` (``vocab_size``: another
    model's head size, e.g. a distillation teacher's; default the tokenizer's length)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    conf = LlamaConfig(
        vocab_size=len(tokenizer) if vocab_size is None else vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **{"num_key_value_heads": cfg.num_heads, **cfg.extra},  # extra: grouped heads too
    )
    return LlamaForCausalLM(conf)


def warm_start_seq2seq(path: str, tokenizer: Any, seed: int = 0) -> Any:
    """BERT2BERT from one pretrained BERT directory (encoder and decoder both warm-started;
    the decoder's cross-attention is new), with the encoder's embeddings grown for the
    control tokens."""
    from transformers import EncoderDecoderModel

    torch.manual_seed(seed)
    model = EncoderDecoderModel.from_encoder_decoder_pretrained(path, path)
    if len(tokenizer) > model.encoder.get_input_embeddings().weight.shape[0]:
        model.encoder.resize_token_embeddings(len(tokenizer))
    return model
