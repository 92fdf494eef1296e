"""Generative context scorers of Sec. 3.2.2, Eq. (2), and the three terms of Eq. (3).

One protocol for every backend::

    log_prob(direction, sources, targets) -> np.ndarray   # mean log-prob per target token

``direction`` names which slot of a context window ``[c<, s, c>]`` is generated:

====== ======================== ==================== ==============================
name   Eq. (3) term             source (given)       target (generated)
====== ======================== ==================== ==============================
fwd    (1/|s|) log p(s|c<,c>)   (c<, None, c>)       s
left   (1/|c<|) log p(c<|s,c>)  (None, s, c>)        c<
right  (1/|c>|) log p(c>|c<,s)  (c<, s, None)        c>
====== ======================== ==================== ==============================

A *source* is the triple ``(c<, s, c>)`` with the generated slot set to ``None``
(:func:`eq3_example` builds it). Backends:

* :class:`Seq2SeqScorer` — transformers ``EncoderDecoderModel`` (BERT2BERT warm-started from a
  packaged BERT such as ``minilm``, or built from a config from scratch). The encoder reads
  ``[CLS] <ctrl> A [SEP] B [SEP] C [SEP]`` where the generated slot is ``[MASK]`` and ``<ctrl>`` is
  a per-direction control token; one shared model or one model per direction. The target is
  scored with its closing ``[SEP]`` (the model also says where the text ends).
* :class:`CausalPrefixScorer` — any ``AutoModelForCausalLM``; a prompt template per direction
  whose last placeholder is ``{target}``; only the target tokens are scored.

Every text is tokenised once, without special tokens (:meth:`tokenize`), and sources and targets
are assembled from token ids (:meth:`build_ids`), so the batched engine (models/scoring.py), the
training loop (models/generator_training.py) and this module's plain :meth:`log_prob` all score
exactly the same token sequences. Long parts are cut to the config's limits: the left context
keeps its last tokens (those next to the slot), the right context and the sentence their first.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ctxsim.models.wordpiece import BERT_SPECIALS, bert_style, learn_wordpiece

DIRECTIONS: tuple[str, ...] = ("fwd", "left", "right")
Source = tuple[str | None, str | None, str | None]
Ids = tuple[int, ...]
#: the slot each direction generates, as an index into (c<, s, c>)
TARGET_SLOT: dict[str, int] = {"fwd": 1, "left": 0, "right": 2}
CONTROL_TOKENS: dict[str, str] = {"fwd": "[FWD]", "left": "[LEFT]", "right": "[RIGHT]"}
DEFAULT_TEMPLATES: dict[str, str] = {
    "fwd": "Passage: {left} ___ {right}\nThe missing sentence ___ is: {target}",
    "left": "Passage: ___ {sentence} {right}\nThe missing sentence ___ is: {target}",
    "right": "{left} {sentence} {target}",
}


def check_direction(direction: str) -> str:
    if direction not in TARGET_SLOT:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    return direction


def eq3_example(direction: str, left: str, sentence: str, right: str) -> tuple[Source, str]:
    """(source, target) of one Eq. (3) term for the window ``[left, sentence, right]``."""
    parts: list[str | None] = [left, sentence, right]
    slot = TARGET_SLOT[check_direction(direction)]
    target = parts[slot]
    parts[slot] = None
    assert target is not None
    return (parts[0], parts[1], parts[2]), target


@dataclass
class Limits:
    """Token limits per part (the source is at most ``2*context + sentence`` plus markers)."""

    max_context_tokens: int = 96
    max_sentence_tokens: int = 64

    def cut(self, slot: int, ids: Sequence[int]) -> Ids:
        if slot == 0:
            n = self.max_context_tokens
            return tuple(ids[-n:]) if len(ids) > n else tuple(ids)
        n = self.max_context_tokens if slot == 2 else self.max_sentence_tokens
        return tuple(ids[:n])


def _pad(seqs: Sequence[Sequence[int]], pad_id: int, left: bool = False) -> tuple[Any, Any]:
    n, width = len(seqs), max(len(s) for s in seqs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if not s:
            continue
        row = torch.as_tensor(list(s), dtype=torch.long)
        if left:
            ids[i, width - len(s) :] = row
            mask[i, width - len(s) :] = 1
        else:
            ids[i, : len(s)] = row
            mask[i, : len(s)] = 1
    return ids, mask


class GenerativeScorer:
    """Shared machinery of both backends; subclasses implement the id layout and the forward."""

    backend: str = ""
    #: whether requests with the same source share work (the engine groups them)
    shares_sources: bool = False
    tokenizer: Any
    limits: Limits
    device: torch.device

    # ---- ids ------------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str]) -> list[Ids]:
        """Token ids of each text, no special tokens, not truncated (cut later, per role)."""
        if not texts:
            return []
        enc = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [tuple(x) for x in enc]

    def build_ids(
        self, direction: str, source: tuple[Ids | None, Ids | None, Ids | None], target: Ids
    ) -> tuple[Ids, Ids]:
        """(encoder or prompt ids, target ids) for one example; subclasses define the layout."""
        raise NotImplementedError

    def example_ids(
        self, direction: str, source: Source, target: str, cache: dict[str, Ids] | None = None
    ) -> tuple[Ids, Ids]:
        """Tokenise (through ``cache``) and lay out one example given as texts."""
        cache = {} if cache is None else cache
        missing = [t for t in (*source, target) if t is not None and t not in cache]
        for t, ids in zip(missing, self.tokenize(missing), strict=True):
            cache[t] = ids
        src = tuple(None if t is None else cache[t] for t in source)
        return self.build_ids(direction, src, cache[target])  # type: ignore[arg-type]

    # ---- model ----------------------------------------------------------------------------
    def modules(self) -> list[torch.nn.Module]:
        """Distinct torch modules (one when shared), for optimisers and ``.train()/.eval()``."""
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def to(self, device: str | torch.device) -> GenerativeScorer:
        self.device = torch.device(device)
        for m in self.modules():
            m.to(self.device)
        return self

    def train(self, mode: bool = True) -> None:
        for m in self.modules():
            m.train(mode)

    def parameters(self) -> Iterable[torch.nn.Parameter]:
        for m in self.modules():
            yield from m.parameters()

    def token_logprobs(
        self, direction: str, sources: Sequence[Ids], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum of target-token log-probs, number of target tokens) per example, as tensors.

        Differentiable (the training loop uses it); the engine wraps it in inference mode.
        """
        raise NotImplementedError

    def hidden_states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Last-layer hidden states (batch, length, dim): the encoder of a seq2seq model, the
        decoder stack of a causal LM."""
        raise NotImplementedError

    #: ids put before a text when embedding it (e.g. <bos>), run but not pooled
    embed_prefix: Ids = ()

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Mean-pooled last-layer states of each text (sentence slot limit): the backbone's own
        sentence embedding, the baseline the Origin similarity has to beat (issue 7)."""
        pre = tuple(self.embed_prefix)
        ids = [pre + self.limits.cut(1, t) for t in self.tokenize(texts)]
        out = []
        with torch.inference_mode():
            for lo in range(0, len(ids), batch_size):
                chunk = ids[lo : lo + batch_size]
                t, m = _pad(chunk, self.pad)
                h = self.hidden_states(t.to(self.device), m.to(self.device)).float().cpu()
                pool = m.clone()
                pool[:, : len(pre)] = 0
                w = pool.unsqueeze(-1).float()
                out.append(((h * w).sum(1) / w.sum(1).clamp(min=1)).numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def log_prob(
        self, direction: str, sources: Sequence[Source], targets: Sequence[str]
    ) -> np.ndarray:
        """Mean log-probability per target token, one padded batch, no engine tricks."""
        check_direction(direction)
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        if not targets:
            return np.zeros(0, dtype=np.float32)
        cache: dict[str, Ids] = {}
        pairs = [
            self.example_ids(direction, s, t, cache) for s, t in zip(sources, targets, strict=True)
        ]
        with torch.inference_mode():
            total, count = self.token_logprobs(
                direction, [p[0] for p in pairs], [p[1] for p in pairs]
            )
        return (total / count.clamp(min=1)).float().cpu().numpy()


class Seq2SeqScorer(GenerativeScorer):
    """BERT2BERT-style encoder-decoder; the direction is a control token in the source."""

    backend = "seq2seq"
    shares_sources = True  # one encoder pass per distinct source

    def __init__(
        self,
        models: Any,
        tokenizer: Any,
        limits: Limits | None = None,
        device: str | torch.device = "cpu",
    ):
        """``models``: one ``EncoderDecoderModel`` (shared) or a dict direction -> model."""
        self.shared = not isinstance(models, dict)
        self.models: dict[str, Any] = (
            dict.fromkeys(DIRECTIONS, models) if self.shared else dict(models)
        )
        if set(self.models) != set(DIRECTIONS):
            raise ValueError(f"need one model per direction {DIRECTIONS}, got {sorted(models)}")
        self.tokenizer = tokenizer
        self.limits = limits or Limits()
        missing = [t for t in CONTROL_TOKENS.values() if t not in tokenizer.get_vocab()]
        if missing:
            raise ValueError(f"tokenizer lacks control tokens {missing}: use add_control_tokens()")
        self.ctrl = {d: tokenizer.convert_tokens_to_ids(t) for d, t in CONTROL_TOKENS.items()}
        self.cls, self.sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        self.mask, self.pad = tokenizer.mask_token_id, tokenizer.pad_token_id
        if None in (self.cls, self.sep, self.mask, self.pad):
            raise ValueError("seq2seq tokenizer needs [CLS], [SEP], [MASK] and [PAD] tokens")
        for m in self.modules():
            m.config.decoder_start_token_id = self.cls
            m.config.pad_token_id = self.pad
            m.config.eos_token_id = self.sep
        self.to(device)
        self.train(False)  # scoring mode until a training loop says otherwise

    def modules(self) -> list[torch.nn.Module]:
        seen: dict[int, torch.nn.Module] = {}
        for d in DIRECTIONS:
            seen.setdefault(id(self.models[d]), self.models[d])
        return list(seen.values())

    @property
    def vocab_size(self) -> int:
        return int(self.models["fwd"].decoder.config.vocab_size)

    def build_ids(
        self, direction: str, source: tuple[Ids | None, Ids | None, Ids | None], target: Ids
    ) -> tuple[Ids, Ids]:
        slot = TARGET_SLOT[check_direction(direction)]
        src: list[int] = [self.cls, self.ctrl[direction]]
        for i, part in enumerate(source):
            if i == slot:
                if part is not None:
                    raise ValueError(f"direction {direction!r}: slot {i} must be None")
                src.append(self.mask)
            else:
                if part is None:
                    raise ValueError(f"direction {direction!r}: slot {i} is missing")
                src.extend(self.limits.cut(i, part))
            src.append(self.sep)
        return tuple(src), (*self.limits.cut(slot, target), self.sep)

    def hidden_states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        enc = self.models["fwd"].encoder
        return enc(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state

    def encode(self, direction: str, sources: Sequence[Ids]) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder states and mask for distinct sources (the engine shares them across targets)."""
        ids, mask = _pad(sources, self.pad)
        ids, mask = ids.to(self.device), mask.to(self.device)
        out = self.models[direction].encoder(input_ids=ids, attention_mask=mask, return_dict=True)
        return out.last_hidden_state, mask

    def decode(
        self,
        direction: str,
        states: torch.Tensor,
        mask: torch.Tensor,
        targets: Sequence[Ids],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced target log-probs given per-example encoder states."""

        labels, tmask = _pad(targets, self.pad)
        dec_in = torch.cat([torch.full_like(labels[:, :1], self.cls), labels[:, :-1]], dim=1)
        dec_mask = torch.cat([torch.ones_like(tmask[:, :1]), tmask[:, :-1]], dim=1)
        labels, tmask = labels.to(self.device), tmask.to(self.device)
        model = self.models[direction]
        if (
            model.encoder.config.hidden_size != model.decoder.config.hidden_size
            and getattr(model.decoder.config, "cross_attention_hidden_size", None) is None
        ):
            states = model.enc_to_dec_proj(states)
        dec = model.decoder
        out = dec.base_model(
            input_ids=dec_in.to(self.device),
            attention_mask=dec_mask.to(self.device),
            encoder_hidden_states=states,
            encoder_attention_mask=mask,
            use_cache=False,
            return_dict=True,
        )
        head = dec.cls if hasattr(dec, "cls") else dec.get_output_embeddings()
        return _target_logprobs(out.last_hidden_state, head, labels, tmask, None)

    def token_logprobs(
        self, direction: str, sources: Sequence[Ids], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        uniq: dict[Ids, int] = {}
        index = [uniq.setdefault(tuple(s), len(uniq)) for s in sources]
        states, mask = self.encode(direction, list(uniq))
        if len(uniq) < len(sources):  # reuse: one encoder pass per distinct source
            idx = torch.as_tensor(index, device=self.device)
            states, mask = states.index_select(0, idx), mask.index_select(0, idx)
        return self.decode(direction, states, mask, targets)


class CausalPrefixScorer(GenerativeScorer):
    """Decoder-only LM; a prompt template per direction, only ``{target}`` tokens scored.

    Requests that share a prompt (the forward term: one context, many candidate sentences) run
    the prompt once and reuse its key/value cache for every target, as the seq2seq backend
    reuses an encoded source."""

    backend = "causal"
    shares_sources = True
    #: run prompts once per batch when at most this share of the requests have distinct prompts
    share_ratio = 0.75

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        templates: dict[str, str] | None = None,
        limits: Limits | None = None,
        device: str | torch.device = "cpu",
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.limits = limits or Limits()
        self.templates = dict(DEFAULT_TEMPLATES if templates is None else templates)
        self._segments = {d: self._parse(d, self.templates.get(d, "")) for d in DIRECTIONS}
        prefix = tokenizer("", add_special_tokens=True)["input_ids"]
        self.prefix: Ids = tuple(prefix)  # e.g. (<bos>,) for Gemma, () for SmolLM2
        self.embed_prefix = self.prefix
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        self.pad = int(pad)
        self._lit_cache: dict[str, Ids] = {}
        self.to(device)
        self.train(False)  # scoring mode until a training loop says otherwise

    @staticmethod
    def _parse(direction: str, template: str) -> list[tuple[str, str | None]]:
        """Template -> [(literal, field)], checking it uses exactly the right placeholders."""
        segs = [(lit, f) for lit, f, _, _ in string.Formatter().parse(template)]
        fields = [f for _, f in segs if f is not None]
        names = ("left", "sentence", "right")
        allowed = {n for i, n in enumerate(names) if i != TARGET_SLOT[direction]}
        if not fields or fields[-1] != "target" or fields.count("target") != 1:
            raise ValueError(f"template {direction!r} must end with {{target}}: {template!r}")
        if segs[-1][1] != "target":
            raise ValueError(f"template {direction!r}: nothing may follow {{target}}")
        bad = set(fields[:-1]) - allowed
        if bad:
            raise ValueError(
                f"template {direction!r} may use {sorted(allowed)} besides target; got {bad}"
            )
        return segs

    def modules(self) -> list[torch.nn.Module]:
        return [self.model]

    def hidden_states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = self.model.base_model(input_ids=ids, attention_mask=mask, use_cache=False)
        return out.last_hidden_state

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def tokenize(self, texts: Sequence[str]) -> list[Ids]:
        # A leading space makes a word-initial token, as inside running text (BPE/SentencePiece);
        # an empty text (a slot left out, as the score stage's pmi baseline does) stays empty.
        return super().tokenize([" " + t if t else "" for t in texts])

    def _literal(self, text: str) -> Ids:
        if text not in self._lit_cache:
            self._lit_cache[text] = tuple(
                self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else ()
            )
        return self._lit_cache[text]

    def build_ids(
        self, direction: str, source: tuple[Ids | None, Ids | None, Ids | None], target: Ids
    ) -> tuple[Ids, Ids]:
        slot = TARGET_SLOT[check_direction(direction)]
        if source[slot] is not None:
            raise ValueError(f"direction {direction!r}: slot {slot} must be None")
        parts = {"left": 0, "sentence": 1, "right": 2}
        prompt: list[int] = list(self.prefix)
        for lit, fld in self._segments[direction]:
            # the space before a placeholder belongs to the (space-prefixed) text tokens
            if fld is not None and lit.endswith(" "):
                lit = lit[:-1]
            prompt.extend(self._literal(lit))
            if fld is None or fld == "target":
                continue
            ids = source[parts[fld]]
            if ids is None:
                raise ValueError(f"direction {direction!r}: template needs {fld!r}")
            prompt.extend(self.limits.cut(parts[fld], ids))
        return tuple(prompt), self.limits.cut(slot, target)

    def token_logprobs(
        self, direction: str, sources: Sequence[Ids], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if any(len(t) == 0 for t in targets):
            raise ValueError("empty target: nothing to score")
        uniq: dict[Ids, int] = {}
        index = [uniq.setdefault(tuple(s), len(uniq)) for s in sources]
        if len(uniq) <= self.share_ratio * len(sources) and all(len(s) > 0 for s in uniq):
            return self._shared_prompt_logprobs(list(uniq), index, targets)
        return self._joint_logprobs(sources, targets)

    def _shared_prompt_logprobs(
        self, prompts: list[Ids], index: list[int], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts once (left-padded, cache kept), then every target on its prompt's cache."""
        p_ids, p_mask = _pad(prompts, self.pad, left=True)
        p_pos = (p_mask.cumsum(1) - 1).clamp(min=0)
        first = self.model.base_model(
            input_ids=p_ids.to(self.device),
            attention_mask=p_mask.to(self.device),
            position_ids=p_pos.to(self.device),
            use_cache=True,
            return_dict=True,
        )
        row = torch.as_tensor(index, device=self.device)
        cache = first.past_key_values
        cache.reorder_cache(row)  # one cache row per request (rows of a prompt repeated)
        t_ids, t_mask = _pad(targets, self.pad, left=False)
        t_pos = p_mask.sum(1)[row.cpu()].unsqueeze(1) + torch.arange(t_ids.shape[1])
        second = self.model.base_model(
            input_ids=t_ids.to(self.device),
            attention_mask=torch.cat([p_mask[row.cpu()], t_mask], 1).to(self.device),
            position_ids=t_pos.to(self.device),
            past_key_values=cache,
            use_cache=True,
            return_dict=True,
        )
        # the prompt's last position predicts target token 0; target position j predicts j + 1
        hidden = torch.cat(
            [
                first.last_hidden_state[:, -1:].index_select(0, row),
                second.last_hidden_state[:, :-1],
            ],
            1,
        )
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        head = self.model.get_output_embeddings()
        return _target_logprobs(hidden, head, t_ids.to(self.device), t_mask.to(self.device), cap)

    def _joint_logprobs(
        self, sources: Sequence[Ids], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One left-padded pass over prompt + target per request."""
        seqs = [tuple(s) + tuple(t) for s, t in zip(sources, targets, strict=True)]
        ids, mask = _pad(seqs, self.pad, left=True)  # targets end every row at the same column
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        keep = max(len(t) for t in targets) + 1
        out = self.model.base_model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=pos.to(self.device),
            use_cache=False,
            return_dict=True,
        )
        # column j of the last `keep` positions predicts the token at column j + 1
        labels = torch.full((len(seqs), keep), self.pad, dtype=torch.long)
        tmask = torch.zeros((len(seqs), keep), dtype=torch.long)
        for i, t in enumerate(targets):
            labels[i, keep - 1 - len(t) : keep - 1] = torch.as_tensor(t)
            tmask[i, keep - 1 - len(t) : keep - 1] = 1
        hidden = out.last_hidden_state[:, -keep:]
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        return _target_logprobs(
            hidden,
            self.model.get_output_embeddings(),
            labels.to(self.device),
            tmask.to(self.device),
            cap,
        )


def _target_logprobs(
    hidden: torch.Tensor,
    head: Any,
    labels: torch.Tensor,
    tmask: torch.Tensor,
    softcap: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum, count) of target-token log-probs per row, running the vocabulary head only on the
    real target positions (no logits for padding or prompt tokens)."""
    sel = tmask.bool()
    logits = head(hidden[sel]).float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    lp = logits.gather(-1, labels[sel].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    tok = torch.zeros(tmask.shape, dtype=lp.dtype, device=lp.device)
    tok = tok.masked_scatter(sel, lp)
    return tok.sum(1), tmask.sum(1).to(lp.dtype)


# ---- construction ----------------------------------------------------------------------------


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
    same on every run, see models/wordpiece.py), or built from an explicit ``vocab``.

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


def tiny_causal(tokenizer: Any, cfg: TinyConfig, seed: int = 0) -> Any:
    """A randomly initialised Llama-style causal LM sized by ``cfg``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    conf = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **cfg.extra,
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
