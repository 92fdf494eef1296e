"""The causal-LM backend: a prompt template per direction, only the target tokens scored."""

from __future__ import annotations

import copy
import string
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ctxsim.models.contextual.generator.prefix import Continuation, PrefixCache, prefix_groups
from ctxsim.models.contextual.generator.protocol import (
    DEFAULT_TEMPLATES,
    DIRECTIONS,
    TARGET_SLOT,
    GenerativeScorer,
    Ids,
    Limits,
    _pad,
    _place,
    _target_logprobs,
    check_direction,
    label_logprobs,
    output_cache,
    with_cache,
)

#: each decoder layer's modules ``compile("blocks")`` wraps (Llama-style layers: SmolLM2, Gemma 3)
BLOCK_MODULES = ("mlp", "input_layernorm", "post_attention_layernorm")


class CausalPrefixScorer(GenerativeScorer):
    """Decoder-only LM; a prompt template per direction, only ``{target}`` tokens scored.

    Requests that share a prompt (the forward term: one context, many candidate sentences) run
    the prompt once and reuse its key/value cache for every target, as the seq2seq backend
    reuses an encoded source. Requests whose prompts share only a beginning (the left term of
    retrieved contexts: "Passage: ___ {sentence}" before each context) run that common prefix
    once and the rest of each prompt on its cache."""

    backend = "causal"
    shares_sources = True
    #: run prompts once per batch when at most this share of the requests have distinct prompts
    share_ratio = 0.75
    #: a common prompt prefix is run once when it is at least this many tokens (0: never) ...
    min_shared_prefix = 8
    #: ... and the batch's prompt tokens it saves are at least this share
    prefix_share_min = 0.15

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
        # what an otherwise empty prompt holds (a PMI null window with no context at all): the
        # first target token needs a position to be predicted from, so the start of a document
        start = tokenizer.bos_token_id
        start = tokenizer.eos_token_id if start is None else start
        self.start: Ids = self.prefix or (() if start is None else (int(start),))
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        self.pad = int(pad)
        self._lit_cache: dict[str, Ids] = {}
        self._tail: Any = label_logprobs  # compiled by ``compile``
        self._compiled: str | None = None
        #: tokens the decoder stack has run (padding and prompts included): the engine's measure
        #: of work per scored token
        self.tokens_run = 0
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

    @property
    def compiled(self) -> str | None:
        """The scope ``compile`` put under torch.compile, None when eager."""
        return self._compiled

    def compile(self, scope: str = "blocks", backend: str = "inductor") -> bool:
        """Put part of the model under ``torch.compile`` (dynamic shapes) for scoring; False
        (and eager, with a warning) when this machine cannot compile. Eager, a 135M LM's small
        element-wise kernels (RMSNorm's float32 round trip, SiLU times the up projection, the
        float32 copy of the logits) take most of a GPU's kernel time and much of a CPU's.

        ``scope``:

        * ``blocks``: each layer's MLP and RMSNorms and the final norm. The layers share one
          small graph, so the compile takes seconds, and it fuses exactly the element-wise work
          around the products: the books_generated right term 1.33x on one CPU thread (23.8
          against 31.7 CPU-s, bench/results/score_lm_route_blocks.md). The engine's
          ``compile`` option (the score stage's ``compile_blocks``).
        * ``decoder``: the whole decoder stack. About 100 s of inductor per graph on an H100's
          host, with a graph for the prefix pass, the continuation, batches of one and new
          cache lengths: still compiling after 290-350 s there
          (bench/results/gpu_h100_compile.md); 1.16x on a CPU after 213.8 CPU-s of compiling
          (bench/results/score_lm_route_compile.md).
        * ``head``: the vocabulary head's log-softmax alone (1.02x on an H100, within noise).

        Idempotent for one scope; ``uncompiled`` undoes it. ``backend``: any torch.compile
        backend (the tests trace with ``eager``: dynamo alone, no kernels built)."""
        if scope not in ("blocks", "decoder", "head"):
            raise ValueError(f"compile scope must be blocks, decoder or head, got {scope!r}")
        if self._compiled == scope:
            return True
        self.uncompiled()

        def comp(m: Any) -> Any:
            return torch.compile(m, dynamic=True, backend=backend)

        base = self.model.base_model
        self._compiled = scope
        try:  # compile now, on a batch of two rows (a batch of one would specialise the graph)
            if scope == "blocks":
                for layer in base.layers:
                    for name in BLOCK_MODULES:
                        setattr(layer, name, comp(getattr(layer, name)))
                base.norm = comp(base.norm)
            elif scope == "decoder":
                setattr(self.model, self.model.base_model_prefix, comp(base))
            self._tail = comp(label_logprobs)
            with torch.inference_mode():
                if scope == "blocks":
                    hidden = self.model.config.hidden_size
                    x = torch.zeros(2, 3, hidden, device=self.device, dtype=self.model.dtype)
                    base.layers[0].mlp(base.layers[0].input_layernorm(x))
                    base.norm(x)
                lab = torch.zeros(2, dtype=torch.long, device=self.device)
                logits = torch.zeros(2, 8, device=self.device, dtype=self.model.dtype)
                self._tail(logits, lab, None)
        except Exception as e:  # noqa: BLE001 - no compiler here: scoring goes on eager
            warnings.warn(
                f"torch.compile unavailable ({type(e).__name__}: {e}); scoring eager",
                stacklevel=2,
            )
            self.uncompiled()
            return False
        return True

    def uncompiled(self) -> None:
        """Back to the eager modules (a FLOP counter, or training, needs them)."""
        model = self.model
        base = model.base_model
        if hasattr(base, "_orig_mod"):
            setattr(model, model.base_model_prefix, base._orig_mod)
            base = model.base_model
        for layer in getattr(base, "layers", ()):
            for name in BLOCK_MODULES:
                mod = getattr(layer, name, None)
                if hasattr(mod, "_orig_mod"):
                    setattr(layer, name, mod._orig_mod)
        if hasattr(getattr(base, "norm", None), "_orig_mod"):
            base.norm = base.norm._orig_mod
        self._tail = label_logprobs
        self._compiled = None

    def hidden_states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = self.model.base_model(input_ids=ids, attention_mask=mask, use_cache=False)
        return out.last_hidden_state

    @property
    def vocab_size(self) -> int:
        # out_features: also there once the head is int8-quantised (models/contextual/quantize.py)
        return int(self.model.get_output_embeddings().out_features)

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
        if not prompt:
            if not self.start:
                raise ValueError(
                    f"direction {direction!r}: the prompt is empty and the tokenizer has no "
                    "bos/eos token to start it (give the template a literal, or a context)"
                )
            prompt = list(self.start)
        return tuple(prompt), self.limits.cut(slot, target)

    def build_requests(
        self,
        direction: str,
        sources: Sequence[tuple[Ids | None, Ids | None, Ids | None]],
        targets: Sequence[Ids],
    ) -> list[tuple[Ids, Ids]]:
        """``build_ids`` of many examples, each distinct source's prompt laid out once (a
        prompt does not depend on its target; the right term's K windows of a sentence share
        one): the engine's host work per window is then a dictionary lookup and a cut."""
        slot = TARGET_SLOT[check_direction(direction)]
        prompts: dict[tuple[Ids | None, Ids | None, Ids | None], Ids] = {}
        cut = self.limits.cut
        out = []
        for src, tgt in zip(sources, targets, strict=True):
            prompt = prompts.get(src)
            if prompt is None:
                prompt = prompts[src] = self.build_ids(direction, src, ())[0]
            out.append((prompt, cut(slot, tgt)))
        return out

    def token_logprobs(
        self, direction: str, sources: Sequence[Ids], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if any(len(t) == 0 for t in targets):
            raise ValueError("empty target: nothing to score")
        uniq: dict[Ids, int] = {}
        index = [uniq.setdefault(tuple(s), len(uniq)) for s in sources]
        if len(uniq) <= self.share_ratio * len(sources) and all(len(s) > 0 for s in uniq):
            return self._shared_prompt_logprobs(list(uniq), index, targets)
        groups = prefix_groups(sources, self.min_shared_prefix) if self.min_shared_prefix else []
        saved = sum((len(g) - 1) * n for g, n in groups)
        if groups and saved >= self.prefix_share_min * sum(len(s) for s in sources):
            prefixes: list[Ids] = []
            index = [0] * len(sources)
            suffixes: list[Ids] = [()] * len(sources)
            for members, n in groups:
                for i in members:
                    index[i] = len(prefixes)
                    suffixes[i] = tuple(sources[i][n:])
                prefixes.append(tuple(sources[members[0]][:n]))
            return self._shared_prefix_logprobs(prefixes, index, suffixes, targets)
        return self._joint_logprobs(sources, targets)

    def _shared_prompt_logprobs(
        self, prompts: list[Ids], index: list[int], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts once (left-padded, cache kept), then every target on its prompt's cache: the
        shared-prefix pass with nothing left of the prompt after the prefix."""
        return self._shared_prefix_logprobs(prompts, index, [()] * len(targets), targets)

    def _shared_prefix_logprobs(
        self,
        prefixes: list[Ids],
        index: list[int],
        suffixes: Sequence[Ids],
        targets: Sequence[Ids],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefixes once (left-padded, cache kept); then each request's rest of the prompt and
        its target on its prefix's cache, only the target tokens scored."""
        enc = self.encode_prefixes(prefixes)
        return self.continue_logprobs(enc, index, suffixes, targets)

    def encode_prefixes(self, prefixes: Sequence[Ids]) -> PrefixCache:
        """One left-padded pass over the prefixes, keeping their keys/values: what any number
        of continuation batches (``continue_logprobs``) then run on."""
        p_ids, p_mask = _pad(prefixes, self.pad, left=True)
        p_pos = (p_mask.cumsum(1) - 1).clamp(min=0)
        self.tokens_run += p_ids.numel()
        first = self.model.base_model(
            input_ids=p_ids.to(self.device),
            attention_mask=p_mask.to(self.device),
            position_ids=p_pos.to(self.device),
            use_cache=True,
            return_dict=True,
        )
        return PrefixCache(output_cache(first), first.last_hidden_state[:, -1:], p_mask)

    def prepare_continuation(
        self,
        enc_mask: torch.Tensor,
        index: Sequence[int],
        suffixes: Sequence[Ids],
        targets: Sequence[Ids],
    ) -> Continuation:
        """The host-side half of ``continue_logprobs`` (numpy layout, no model): what the
        engine builds in a thread while the previous batch runs. ``enc_mask`` is the prefix
        encoding's mask (``PrefixCache.mask``)."""
        row = torch.as_tensor(list(index), dtype=torch.long)
        # a target's last token predicts nothing that is scored: it is not run
        rest = [tuple(s) + tuple(t[:-1]) for s, t in zip(suffixes, targets, strict=True)]
        r_ids, r_mask = _pad(rest, self.pad, left=False)
        r_pos = enc_mask.sum(1)[row].unsqueeze(1) + torch.arange(r_ids.shape[1])
        attn = torch.cat([enc_mask[row], r_mask], 1)
        # column c of the hidden states predicts the token at column c of the second segment
        # (column 0 from the prefix's last position); a target starts after its suffix
        starts = [len(suf) for suf in suffixes]
        labels, tmask = _place(targets, starts, r_ids.shape[1] + 1, self.pad)
        parts = (row, r_ids, r_pos, attn, labels, tmask)
        if self.device.type == "cuda":  # pinned: the copies to the GPU overlap the compute
            parts = tuple(t.pin_memory() for t in parts)
        return Continuation(*parts)

    def run_continuation(
        self, enc: PrefixCache, batch: Continuation, head_chunk: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum, count) of target log-probs of a prepared batch on its prefixes' keys/values.
        ``enc`` is left as it was (its cache is gathered into a copy), so one encoding serves
        many batches; ``head_chunk`` > 0 runs the vocabulary head that many tokens at a time."""
        dev = self.device
        row = batch.row.to(dev, non_blocking=True)
        hidden = enc.last.index_select(0, row)
        if batch.ids.shape[1]:  # else every target is one token, predicted by its prefix
            cache = copy.copy(enc.cache)  # the copy's layers take new, gathered tensors
            cache.layers = [copy.copy(layer) for layer in enc.cache.layers]
            cache.reorder_cache(row)  # one cache row per request (rows of a prefix repeated)
            self.tokens_run += batch.ids.numel()
            second = self.model.base_model(
                input_ids=batch.ids.to(dev, non_blocking=True),
                attention_mask=batch.attn.to(dev, non_blocking=True),
                position_ids=batch.pos.to(dev, non_blocking=True),
                **with_cache(self.model.base_model, cache),
                use_cache=True,
                return_dict=True,
            )
            hidden = torch.cat([hidden, second.last_hidden_state], 1)
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        head = self.model.get_output_embeddings()
        labels = batch.labels.to(dev, non_blocking=True)
        tmask = batch.tmask.to(dev, non_blocking=True)
        return _target_logprobs(hidden, head, labels, tmask, cap, head_chunk, self._tail)

    def continue_logprobs(
        self,
        enc: PrefixCache,
        index: Sequence[int],
        suffixes: Sequence[Ids],
        targets: Sequence[Ids],
        head_chunk: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum, count) of target log-probs for requests ``index`` (rows of ``enc``), each
        running its rest of the prompt and its target on its prefix's cache."""
        batch = self.prepare_continuation(enc.mask, index, suffixes, targets)
        return self.run_continuation(enc, batch, head_chunk)

    def _joint_hidden(
        self, sources: Sequence[Ids], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One left-padded pass over prompt + target but its last token per request: (hidden
        states of the last ``max target`` columns, target labels, target mask), each column
        predicting the label in its own column."""
        seqs = [tuple(s) + tuple(t[:-1]) for s, t in zip(sources, targets, strict=True)]
        ids, mask = _pad(seqs, self.pad, left=True)  # targets end every row at the same column
        self.tokens_run += ids.numel()
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        keep = max(len(t) for t in targets)
        out = self.model.base_model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=pos.to(self.device),
            use_cache=False,
            return_dict=True,
        )
        labels, tmask = _place(targets, [keep - len(t) for t in targets], keep, self.pad)
        return out.last_hidden_state[:, -keep:], labels.to(self.device), tmask.to(self.device)

    def _joint_logprobs(
        self, sources: Sequence[Ids], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, labels, tmask = self._joint_hidden(sources, targets)
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        return _target_logprobs(hidden, self.model.get_output_embeddings(), labels, tmask, cap)

    def target_logits(
        self, sources: Sequence[Ids], targets: Sequence[Ids]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits over the vocabulary at every target token (tokens, vocab), the target ids,
        the target mask (requests, columns)): what token-level distillation matches."""
        if any(len(t) == 0 for t in targets):
            raise ValueError("empty target: nothing to score")
        hidden, labels, tmask = self._joint_hidden(sources, targets)
        sel = tmask.bool()
        logits = self.model.get_output_embeddings()(hidden[sel]).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits, labels[sel], tmask
