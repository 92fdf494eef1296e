"""The generative-scorer protocol every backend follows: directions, sources, limits, and the
base class whose ``log_prob`` gives one Eq. (3) term per target."""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

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


@functools.cache
def _cache_keyword(model_class: type) -> str:
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def with_cache(model: Any, cache: Any) -> dict[str, Any]:
    """The keyword that hands ``cache`` to a transformers model's forward: ``cache`` since
    transformers 5.2x (``past_key_values`` still works there but warns), ``past_key_values``
    before. Looked up once per model class: the sampler calls it on every generated token."""
    model = getattr(model, "_orig_mod", model)  # a torch.compile wrapper: the model's own forward
    return {_cache_keyword(type(model)): cache}


def output_cache(out: Any) -> Any:
    """The keys/values a forward returned, under either name (see ``with_cache``)."""
    got = out.get("cache")
    return got if got is not None else out.get("past_key_values")


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


def _place(
    seqs: Sequence[Sequence[int]], starts: Sequence[int] | np.ndarray, width: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``width`` ids holding ``seqs[i]`` from column ``starts[i]`` (pad elsewhere), and
    the matching 0/1 mask. One numpy scatter, not a tensor write per row: with thousands of rows
    per batch the per-row writes cost more host time than the forward on a GPU
    (bench/results/gpu_h200.md)."""
    n = len(seqs)
    lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=n)
    flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=int(lens.sum()))
    rows = np.repeat(np.arange(n), lens)
    offsets = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
    cols = np.repeat(np.asarray(starts, dtype=np.int64), lens) + offsets
    ids = np.full((n, width), pad_id, dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    ids[rows, cols] = flat
    mask[rows, cols] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def _pad(seqs: Sequence[Sequence[int]], pad_id: int, left: bool = False) -> tuple[Any, Any]:
    width = max(len(s) for s in seqs)
    starts = [width - len(s) for s in seqs] if left else [0] * len(seqs)
    return _place(seqs, starts, width, pad_id)


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

    def build_requests(
        self,
        direction: str,
        sources: Sequence[tuple[Ids | None, Ids | None, Ids | None]],
        targets: Sequence[Ids],
    ) -> list[tuple[Ids, Ids]]:
        """``build_ids`` of many examples (the engine's per-window layout)."""
        return [self.build_ids(direction, s, t) for s, t in zip(sources, targets, strict=True)]

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
        sentence embedding, the baseline the Origin similarity has to beat."""
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


def label_logprobs(
    logits: torch.Tensor, labels: torch.Tensor, softcap: float | None
) -> torch.Tensor:
    """log p(label) under each row's softmax, in float32 (Gemma's logit soft-capping first).
    Eager, it writes the logits again in float32 and reads them twice; under ``torch.compile``
    (``CausalPrefixScorer.compile``) it is one pass over the head's own output: 1.02x the
    windows/s of SmolLM2's right term on an H100, within noise
    (bench/results/gpu_h100_compile.md)."""
    logits = logits.float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)


def _target_logprobs(
    hidden: torch.Tensor,
    head: Any,
    labels: torch.Tensor,
    tmask: torch.Tensor,
    softcap: float | None,
    chunk: int = 0,
    tail: Any = label_logprobs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum, count) of target-token log-probs per row, running the vocabulary head only on the
    real target positions (no logits for padding or prompt tokens). ``chunk`` > 0 runs the head
    and its log-sum-exp that many tokens at a time: the logits of a whole batch (tokens x
    vocabulary, 200 MB for 1,000 tokens of a 49k vocabulary) leave the CPU's caches, and the
    log-sum-exp's passes over them cost a sixth of a SmolLM2 batch (profiled). ``tail`` turns
    logits into label log-probs (``label_logprobs``, or its compiled form)."""
    sel = tmask.bool()
    h, lab = hidden[sel], labels[sel]
    step = chunk if chunk > 0 else max(len(h), 1)
    parts = [
        tail(head(h[lo : lo + step]), lab[lo : lo + step], softcap) for lo in range(0, len(h), step)
    ]
    lp = torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)
    tok = torch.zeros(tmask.shape, dtype=lp.dtype, device=lp.device)
    tok = tok.masked_scatter(sel, lp)
    return tok.sum(1), tmask.sum(1).to(lp.dtype)
