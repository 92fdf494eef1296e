"""The encoder-decoder backend (BERT2BERT ``EncoderDecoderModel``, Sec. 3.2.2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ctxsim.models.contextual.generator.protocol import (
    CONTROL_TOKENS,
    DIRECTIONS,
    TARGET_SLOT,
    GenerativeScorer,
    Ids,
    Limits,
    _pad,
    _target_logprobs,
    check_direction,
)


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
