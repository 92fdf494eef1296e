"""Sampling contexts for a sentence from a causal LM: continuations (c>) and preceding sentences
(c<), one short sentence each, for `gencontexts` (tasks/gencontexts.py).

Why per-sample seeds: every sample draws from its own ``torch.Generator`` seeded by the caller
(from the sentence, side, template and sample index), so sample j of a sentence is the same text
whatever the batch it shares, the batch size, or K. That is what lets the stage cache samples and
pay only for the new ones when K grows. Decoding is one prompt pass plus one token per step with
the KV cache (left padding, explicit position ids), rows stop at end of text or a line break
and leave the batch once a quarter of it has (``_rows_to_keep``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ctxsim.models.contextual.generator.protocol import output_cache, with_cache
from ctxsim.models.contextual.native_gqa import native_gqa

#: prompt templates by name: ``{sentence}`` is the sentence; the sample is what follows.
#: right: the sentence as running text, the continuation is the next sentence (the scoring
#: template of the right term, models/contextual/generator.py DEFAULT_TEMPLATES["right"], with c<
# empty).
#: left_instruct: the left term's own fill-in template (DEFAULT_TEMPLATES["left"] with c> empty).
#: left_dialogue: a plain-text framing without instructions (the sentence quoted as a reply).
TEMPLATES: dict[str, str] = {
    "right": "{sentence}",
    "left_instruct": "Passage: ___ {sentence}\nThe missing sentence ___ is:",
    "left_dialogue": 'The sentence that came right before "{sentence}" was: "',
}


@dataclass(frozen=True)
class SamplingSettings:
    """What decides a sample besides the prompt and its seed (recorded as provenance)."""

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 0.95
    top_k: int = 100  # nucleus taken inside the top k tokens (sorting the full vocabulary per
    # step costs as much as the model's step on CPU)
    min_new_tokens: int = 2  # no end of text / line break before this many tokens


def render(template: str, sentence: str) -> str:
    if template not in TEMPLATES:
        raise ValueError(f"unknown prompt template {template!r}; known: {', '.join(TEMPLATES)}")
    return TEMPLATES[template].format(sentence=sentence.strip())


def stops_at_quote(template: str) -> bool:
    """Templates that open a quotation end the sample at the closing quote."""
    return TEMPLATES[template].endswith('"')


def first_sentence(text: str, quote: bool = False) -> str:
    """The sample up to its first line break (and closing quote with ``quote``), then up to its
    first sentence end (. ! ? followed by a space); whitespace trimmed."""
    text = text.split("\n", 1)[0]
    if quote:
        text = text.split('"', 1)[0]
    text = text.strip()
    for i, ch in enumerate(text):
        if ch in ".!?" and i + 1 < len(text) and text[i + 1] == " " and i >= 8:
            return text[: i + 1].strip()
    return text


def _stop_ids(tokenizer, quote: bool) -> torch.Tensor:
    """Token ids that end a one-sentence sample: text with a line break (or a double quote),
    text ending in . ! or ?, and end of text. Rows stop there, so a batch costs the length of
    its longest sentence, not ``max_new_tokens``."""
    marks = ("\n", '"') if quote else ("\n",)
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    stop = {
        i
        for i, text in enumerate(texts)
        if any(m in text for m in marks) or text.rstrip().endswith((".", "!", "?"))
    }
    if tokenizer.eos_token_id is not None:
        stop.add(int(tokenizer.eos_token_id))
    return torch.tensor(sorted(stop), dtype=torch.long)


def _draw(logits: torch.Tensor, s: SamplingSettings, gens: list[torch.Generator]) -> torch.Tensor:
    """One token per row: top-k, temperature, nucleus (top-p) truncation, then a draw from the
    row's own (CPU) generator. The top-k runs where the logits are: on a GPU only k values per
    row cross to the host, not the vocabulary (262,144 for Gemma: 1 MB a row and step)."""
    top, idx = torch.topk(logits.float(), min(s.top_k, logits.shape[-1]), dim=-1)  # sorted
    top, idx = top.cpu(), idx.cpu()
    probs = torch.softmax(top / max(s.temperature, 1e-6), dim=-1)
    if s.top_p < 1.0:
        drop = torch.cumsum(probs, dim=-1) - probs > s.top_p  # keep the token crossing top_p
        probs = probs.masked_fill(drop, 0.0)
    out = torch.empty(len(gens), dtype=torch.long)
    for r, g in enumerate(gens):
        out[r] = idx[r, torch.multinomial(probs[r], 1, generator=g)[0]]
    return out


def load_sampler_lm(path: str, device: str, bf16_warn: Any | None = None) -> tuple[Any, Any]:
    """(causal LM, tokenizer) from ``path`` for ``sample_texts`` (float32 on ``device``); given
    ``bf16_warn`` (bf16 weights on CPU: a logger's ``warning``) its weights cast to bfloat16
    (the sampler takes float32 logits). `gencontexts` loads it only when a sample is not in its
    cache; bench/bench_sampler.py times both."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ctxsim.models.contextual.quantize import to_bf16_weights

    tok = AutoTokenizer.from_pretrained(path)
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
    if bf16_warn is not None:
        to_bf16_weights(lm, "gencontexts.bf16_weights_on_cpu", bf16_warn)
    return lm, tok


@torch.no_grad()
def sample_texts(
    model: torch.nn.Module,
    tokenizer,
    prompts: Sequence[str],
    seeds: Sequence[int],
    settings: SamplingSettings,
    batch_size: int = 32,
    quote: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[str]:
    """One sampled text per (prompt, seed), trimmed to its first sentence (``quote``: prompts
    that open a quotation; see ``stops_at_quote``). ``progress`` is called with the number of
    samples finished after each batch."""
    if len(prompts) != len(seeds):
        raise ValueError("sample_texts: one seed per prompt")
    model.eval()
    device = next(model.parameters()).device
    stop = _stop_ids(tokenizer, quote).to(device)
    pad = tokenizer.pad_token_id
    pad = int(pad if pad is not None else (tokenizer.eos_token_id or 0))
    enc = [tokenizer(p, add_special_tokens=True)["input_ids"] for p in prompts]
    # batches of similar prompt length: little padding; results go back in input order
    order = sorted(range(len(enc)), key=lambda i: len(enc[i]))
    out: list[str] = [""] * len(enc)
    for lo in range(0, len(order), batch_size):
        rows = order[lo : lo + batch_size]
        tokens = _sample_batch(
            model, [enc[i] for i in rows], [int(seeds[i]) for i in rows], settings, stop, pad
        )
        for i, t in zip(rows, tokens, strict=True):
            out[i] = first_sentence(tokenizer.decode(t, skip_special_tokens=True), quote)
        if progress is not None:
            progress(len(rows))
    return out


def _sample_batch(
    model: torch.nn.Module,
    ids: list[list[int]],
    seeds: list[int],
    s: SamplingSettings,
    stop: torch.Tensor,
    pad: int,
) -> list[list[int]]:
    device = stop.device
    n = len(ids)
    # a sentence's K samples share its prompt: each distinct prompt runs once and its keys and
    # values are repeated for its rows (the prompt pass is about half the stage's tokens)
    uniq: dict[tuple[int, ...], int] = {}
    index = [uniq.setdefault(tuple(x), len(uniq)) for x in ids]
    prompts = list(uniq)
    width = max(len(x) for x in prompts)
    inp = torch.full((len(prompts), width), pad, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, x in enumerate(prompts):  # left padding: every row's last prompt token is at -1
        inp[r, width - len(x) :] = torch.tensor(x, dtype=torch.long)
        attn[r, width - len(x) :] = 1
    inp, attn = inp.to(device), attn.to(device)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    gens = [torch.Generator().manual_seed(seed) for seed in seeds]
    # the vocabulary head on the last prompt position only: the others' logits (a batch's
    # prompt tokens x 49k for SmolLM2) would cost about an eighth of the stage and go unused
    # grouped key/value heads uncopied in the prompt pass (the decoding steps, one query each,
    # already take them uncopied; their numerics, and with them bf16 samples, stay as they were)
    with native_gqa(device):
        res = model(
            input_ids=inp, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1
        )
    past, logits = output_cache(res), res.logits[:, -1, :]
    if RESERVE_CACHE:  # reserved per distinct prompt: its rows are gathered into it in one copy
        past.layers = [reserved(layer, s.max_new_tokens) for layer in past.layers]
    if len(prompts) < n:  # one row per sample from here on
        row = torch.tensor(index, dtype=torch.long, device=device)
        past.reorder_cache(row)
        logits, attn, pos = logits[row], attn[row], pos[row]
    done = torch.zeros(n, dtype=torch.bool, device=device)
    live = torch.arange(n, device=device)  # the sample each batch row holds
    out = torch.full((n, s.max_new_tokens), -1, dtype=torch.long, device=device)
    for step in range(s.max_new_tokens):
        if step < s.min_new_tokens:
            logits = logits.index_fill(-1, stop, float("-inf"))
        nxt = _draw(logits, s, gens).to(device)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        out[live, step] = torch.where(done, torch.full_like(nxt, -1), nxt)
        done |= torch.isin(nxt, stop)
        if bool(done.all()) or step + 1 == s.max_new_tokens:  # no logits are drawn from after
            break
        keep = _rows_to_keep(done)
        if keep is not None:  # finished rows leave the batch: the rest decode on fewer rows
            past.reorder_cache(keep)
            nxt, attn, pos, done, live = nxt[keep], attn[keep], pos[keep], done[keep], live[keep]
            gens = [gens[i] for i in keep.tolist()]
        rows = len(live)
        attn = torch.cat([attn, torch.ones((rows, 1), dtype=attn.dtype, device=device)], dim=1)
        pos = pos[:, -1:] + 1
        res = model(
            input_ids=nxt[:, None],
            attention_mask=attn,
            position_ids=pos,
            **with_cache(model, past),
            use_cache=True,
        )
        past, logits = output_cache(res), res.logits[:, -1, :]
    return [[t for t in row if t >= 0] for row in out.cpu().tolist()]


#: rows a decoding batch keeps however many have finished. float32 products give a row the same
#: values whatever rows share its batch down to 16 rows on a Xeon with AMX (at 9 and fewer the
#: kernels block otherwise), so float32 samples do not move when rows leave; bf16 kernels block
#: some products by the batch's size at any size (SmolLM2's 576x192 at 160 rows and fewer), so
#: bf16 samples move by rounding, as with another batch size
MIN_DECODE_ROWS = 64


def _rows_to_keep(done: torch.Tensor) -> torch.Tensor | None:
    """Batch rows to keep decoding (sorted), or None to keep them all: the unfinished rows,
    topped up with finished ones to ``MIN_DECODE_ROWS``; a batch shrinks only once it would lose
    a quarter of its rows (each shrink copies the key/value cache)."""
    rows = len(done)
    alive = int((~done).sum())
    target = max(alive, min(rows, MIN_DECODE_ROWS))
    if target > rows * 3 // 4:
        return None
    pick = torch.nonzero(~done).flatten()
    if target > alive:
        pick = torch.cat([pick, torch.nonzero(done).flatten()[: target - alive]])
    return pick.sort().values


#: decode into reserved key/value buffers (``reserved``); off: transformers' concatenation
RESERVE_CACHE = True


def reserved(layer: Any, extra: int) -> Any:
    """``layer`` (a transformers cache layer) with its keys/values moved into buffers with room
    for ``extra`` more tokens: each decoding step writes its token in place and attends over a
    view of the filled part, instead of transformers' concatenation (a new copy of the whole
    cache per layer and step). Other layer kinds (sliding windows) are returned as they are."""
    from transformers.cache_utils import DynamicLayer

    if type(layer) is not DynamicLayer or not layer.is_initialized:
        return layer
    return _reserved_class()(layer, extra)


@functools.cache
def _reserved_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        def __init__(self, layer: DynamicLayer, extra: int) -> None:
            super().__init__()
            b, h, n, d = layer.keys.shape
            self.device = layer.keys.device
            self._k = layer.keys.new_empty((b, h, n + extra, d))
            self._v = layer.values.new_empty((b, h, n + extra, layer.values.shape[-1]))
            self._k[:, :, :n] = layer.keys
            self._v[:, :, :n] = layer.values
            self._n = n
            self._views()
            self.is_initialized = True

        def _views(self) -> None:
            self.keys, self.values = self._k[:, :, : self._n], self._v[:, :, : self._n]

        def update(self, key_states, value_states, *args, **kwargs):
            m = key_states.shape[-2]
            if self._n + m > self._k.shape[-2]:
                raise RuntimeError("sampler: more decoding steps than its cache reserved")
            self._k[:, :, self._n : self._n + m] = key_states
            self._v[:, :, self._n : self._n + m] = value_states
            self._n += m
            self._views()
            return self.keys, self.values

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            idx = beam_idx.to(self._k.device)
            self._k, self._v = self._k.index_select(0, idx), self._v.index_select(0, idx)
            self._views()

    return ReservedLayer
