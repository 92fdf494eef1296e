"""How the scoring engine (models/contextual/score_engine.py) packs requests into forward calls.

Its knobs (:class:`EngineConfig`) and the greedy cuts it runs: padded batches of whole requests,
groups of prompt prefixes run once each, and the continuation batches that run on a group's
keys/values. Every cut keeps the given order and closes a batch the moment one more request would
break a budget; ``scale`` (1.0, halved after each out-of-memory error) shrinks every budget.
Pure functions of lengths, so the packing can be read (and tested) apart from the forward calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ctxsim.models.contextual.generator import GenerativeScorer, Ids
from ctxsim.models.contextual.generator.prefix import prefix_groups


@dataclass
class EngineConfig:
    """Batching knobs (the score stage's params feed these)."""

    token_budget: int = 8192  # padded source + target tokens per forward call
    max_batch: int = 256  # examples per forward call
    max_logit_elems: int = 1 << 27  # batch x target positions x vocab (float32 logits)
    bf16_on_cuda: bool = True
    bf16_on_cpu: bool = False  # matmuls in bf16 on CPU; scores move by ~1e-2 nats (off: exact)
    num_threads: int = 0  # CPU torch threads; 0 leaves torch's default
    progress: bool = False  # a progress bar per direction (stderr; one line per 30 s in logs)
    # order a prefix-sharing scorer's requests by prompt (not prompt length), so prompts that
    # share a beginning land in one batch and run it once (CausalPrefixScorer)
    prefix_order: bool = True
    # causal scorers: run each distinct prompt (or shared beginning of prompts) once for a group
    # of prompts, then their targets in batches sorted by length on the prompts' keys/values, so
    # neither prompts nor padding are recomputed per batch (off: one padded batch per cut of
    # the requests, the prompts of each batch run once in it)
    # None (auto): on, except for a dynamically int8-quantised scorer
    # (models/contextual/quantize.py),
    # whose activations take one scale per batch, so its scores depend on the batching
    # (Spearman 0.97 between the two paths on books_generated, bench/results/score_lm_route.md):
    # it keeps the padded path and with it the int8 labels and score cache of earlier runs
    group_prompts: bool | None = None
    # target tokens per vocabulary-head call (grouped path; 0: all at once). None: 128 on a CPU
    # (the logits stay in its caches), all on CUDA (one large product: 1.27x the windows/s of
    # 128 for SmolLM2 on an H100, 1.75x for Gemma's 262k vocabulary, same scores;
    # bench/results/gpu_h100_lm_route.md)
    head_chunk: int | None = None
    # cuDNN's attention on CUDA (torch's own choice on Hopper). It builds an execution plan per
    # new shape, and the engine's batches change shape every call: 1.7-1.9 ms of host time per
    # call on an H100. Off (flash / memory-efficient attention instead), SmolLM2's right term
    # ran 1.34x the windows/s under bf16 autocast but 0.87x with bf16 weights, one run each
    # (bench/results/gpu_h100_lm_route_2.md); the 1.34x compared a process's first full run
    # with its second, and a first run is 1.45-1.49x slower by itself
    # (bench/results/gpu_h100_compile.md): no gain shown, so torch's choice stays the default
    cudnn_attention: bool = True
    prefetch: bool = True  # lay out the next batch in a thread while the current one runs
    # the Rust tokenizer's threads while the engine tokenises its texts. None: on CUDA only,
    # where the GPU waits on the host (a 100,000-window books_generated run tokenises 37,132
    # texts: 2.2 s on one thread of this CPU); measured on an H100, 1.02x, within noise
    # (bench/results/gpu_h100_compile.md)
    tokenizer_threads: bool | None = None
    # torch.compile each layer's MLP and norms of a causal scorer (CausalPrefixScorer.compile,
    # scope "blocks"; the score stage's compile_blocks): the layers share one small graph,
    # seconds to compile, 1.33x the engine on one CPU thread
    # (bench/results/score_lm_route_blocks.md). The whole decoder compiles for minutes per
    # graph and recompiles per shape (bench/results/gpu_h100_compile.md): not offered here
    compile: bool = False


def head_chunk_for(cfg: EngineConfig, device_type: str) -> int:
    """The vocabulary head's chunk on ``device_type`` (``cfg.head_chunk`` None: by device)."""
    if cfg.head_chunk is not None:
        return cfg.head_chunk
    return 0 if device_type == "cuda" else 128


def dynamic_int8(scorer: GenerativeScorer) -> bool:
    """Whether the scorer's model holds torch's dynamically quantised (int8) layers."""
    mods = (m for mod in scorer.modules() for m in mod.modules())
    return any(type(m).__module__.startswith("torch.ao.nn.quantized.dynamic") for m in mods)


def padded_batches(
    order: list[int],
    distinct: list[tuple[Ids, Ids]],
    cfg: EngineConfig,
    scale: float,
    vocab: int,
) -> list[list[int]]:
    """Greedy cut of the sorted requests under the token, size and logit budgets."""
    batches: list[list[int]] = []
    cur: list[int] = []
    max_s = max_t = 0
    for i in order:
        s, t = len(distinct[i][0]), len(distinct[i][1]) + 1
        ns, nt, nb = max(max_s, s), max(max_t, t), len(cur) + 1
        fits = (
            nb <= max(1, int(cfg.max_batch * scale))
            and nb * (ns + nt) <= cfg.token_budget * scale
            and nb * nt * vocab <= cfg.max_logit_elems * scale
        )
        if cur and not fits:
            batches.append(cur)
            cur, ns, nt = [], s, t
        cur.append(i)
        max_s, max_t = ns, nt
    if cur:
        batches.append(cur)
    return batches


def shared_prefixes(
    prompts: list[Ids], least: int, share_min: float
) -> tuple[list[Ids], np.ndarray, np.ndarray]:
    """(prefixes to run once, the prefix of each prompt, its length): a shared beginning of
    several distinct prompts (the left term's "Passage: ___ {sentence}") by the scorer's own
    rule (``prefix_groups`` of at least ``least`` tokens, kept when they save ``share_min`` of
    the prompt tokens), else each prompt whole."""
    n = len(prompts)
    which, cut = np.arange(n), np.fromiter(map(len, prompts), np.int64, n)
    prefixes = list(prompts)
    if least > 0 and n > 1:
        groups = prefix_groups(prompts, least)
        saved = sum((len(g) - 1) * k for g, k in groups)
        if saved >= share_min * int(cut.sum()):
            prefixes = []
            for members, k in groups:
                which[members] = len(prefixes)
                cut[members] = k
                prefixes.append(tuple(prompts[members[0]][:k]))
    return prefixes, which, cut


def prefix_pass_groups(
    order: list[int],
    prefixes: list[Ids],
    by_prefix: list[list[int]],
    cfg: EngineConfig,
    scale: float,
) -> list[list[int]]:
    """Cuts of the length-sorted prefixes: one prefix pass each, under the token budget
    (padded prefix tokens) and at most 16 x ``max_batch`` requests (memory of the
    bookkeeping, and enough requests to sort by length)."""
    cap_req = max(1, 16 * cfg.max_batch)
    groups: list[list[int]] = []
    cur: list[int] = []
    width = n_req = 0
    for k in order:
        w, r = max(width, len(prefixes[k])), n_req + len(by_prefix[k])
        if cur and ((len(cur) + 1) * w > cfg.token_budget * scale or r > cap_req):
            groups.append(cur)
            cur, w, r = [], len(prefixes[k]), len(by_prefix[k])
        cur.append(k)
        width, n_req = w, r
    if cur:
        groups.append(cur)
    return groups


def continuation_batches(
    reqs: list[int],
    rows: list[int],
    suffixes: list[Ids],
    distinct: list[tuple[Ids, Ids]],
    cfg: EngineConfig,
    scale: float,
    vocab: int,
    head_chunk: int,
) -> list[tuple[list[int], list[int]]]:
    """Greedy cut of length-sorted continuations under the token, size and logit budgets (the
    logit budget only when the vocabulary head runs whole: ``head_chunk`` 0)."""
    out: list[tuple[list[int], list[int]]] = []
    cur_i: list[int] = []
    cur_r: list[int] = []
    width = tgt = 0
    for i, r in zip(reqs, rows, strict=True):
        t = len(distinct[i][1]) + 1
        w, nt, nb = max(width, len(suffixes[i]) + t), max(tgt, t), len(cur_i) + 1
        fits = (
            nb <= max(1, int(cfg.max_batch * scale))
            and nb * w <= cfg.token_budget * scale
            and (head_chunk > 0 or nb * nt * vocab <= cfg.max_logit_elems * scale)
        )
        if cur_i and not fits:
            out.append((cur_i, cur_r))
            cur_i, cur_r, w, nt = [], [], len(suffixes[i]) + t, t
        cur_i.append(i)
        cur_r.append(r)
        width, tgt = w, nt
    if cur_i:
        out.append((cur_i, cur_r))
    return out
