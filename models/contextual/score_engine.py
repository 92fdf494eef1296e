"""Batched scoring engine for the generative terms of Eq. (3) (S itself:
models/contextual/eq3_combine.py).

What makes it fast, compared with one pair per forward call (bench/bench_score.py measures it):

* every distinct text is tokenised once per engine; identical (source, target) requests are
  computed once;
* causal scorers (``group_prompts``): each distinct prompt, or shared beginning of prompts, runs
  once for a group of prompts; every target then runs on the group's keys/values in batches
  sorted by length, the next batch laid out in a thread while the current one runs, the
  vocabulary head in chunks (docs/scoring.md, bench/bench_lm_route.py);
* otherwise requests are sorted by length (seq2seq: by source, so pairs that share a context sit
  together) and cut into batches by a padded-token budget, so padding stays small (the cuts and
  their knobs, :class:`EngineConfig`: models/contextual/score_batching.py);
* seq2seq: one encoder pass per distinct source in a batch, reused by every target that shares
  it (the ``fwd`` source ``(c<, c>)`` is shared by every sentence scored against a context);
* ``torch.inference_mode``; bf16 autocast on CUDA (log-softmax in float32); torch threads on CPU,
  and optionally bf16 autocast on CPUs with bf16 instructions (AVX512-BF16/AMX: about 2x here,
  rank order of scores unchanged: Spearman 0.9995 against float32, bench/bench_score.py);
* the vocabulary head runs only on real target positions (no logits for prompts or padding),
  and a target's last token, which predicts nothing scored, is not run;
* on CPU, a causal scorer's attention is two batched products per key/value head group
  (models/contextual/grouped_attention.py), other scorers' grouped key/value heads go to
  torch's attention uncopied (models/contextual/native_gqa.py).

Robust by construction: a CUDA out-of-memory error halves the failing batch and retries both
halves (and halves the budget for what follows); every request lands in its own output slot, so
no pair is lost or duplicated and the scores do not depend on the batch size (up to float
rounding). ``oom_hook(batch_size)`` is called before each forward so tests can simulate OOM.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ctxsim.models.contextual.generator import (
    DIRECTIONS,
    TARGET_SLOT,
    GenerativeScorer,
    Ids,
    check_direction,
    eq3_example,
)
from ctxsim.models.contextual.native_gqa import native_gqa
from ctxsim.models.contextual.score_batching import (
    EngineConfig,
    continuation_batches,
    dynamic_int8,
    head_chunk_for,
    padded_batches,
    prefix_pass_groups,
    shared_prefixes,
)
from ctxsim.models.tokenizer_threads import tokenizer_threads

OOM_ERRORS: tuple[type[BaseException], ...] = (torch.OutOfMemoryError,)


def _none(_: str) -> None:
    """The generated slot's source part (``eq3_example``'s None)."""
    return None


@dataclass
class EngineStats:
    requests: int = 0
    distinct_requests: int = 0
    distinct_texts: int = 0
    forward_calls: int = 0
    encoder_sources: int = 0
    target_tokens: int = 0
    padded_tokens: int = 0  # per batch: rows x (longest source + longest target)
    run_tokens: int = 0  # tokens the model actually ran (prompts once, padding included)
    oom_retries: int = 0
    seconds: float = 0.0
    per_direction_seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "per_direction_seconds"}
        d.update({f"seconds_{k}": round(v, 4) for k, v in self.per_direction_seconds.items()})
        d["seconds"] = round(self.seconds, 4)
        return d


class ScoringEngine:
    """Scores many (sentence, context) pairs with any :class:`GenerativeScorer`."""

    def __init__(
        self,
        scorer: GenerativeScorer,
        config: EngineConfig | None = None,
        oom_hook: Callable[[int], None] | None = None,
    ):
        self.scorer = scorer
        self.config = config or EngineConfig()
        self.oom_hook = oom_hook
        self.stats = EngineStats()
        self._scale = 1.0  # shrinks after an OOM
        self._ids: dict[str, Ids] = {}  # every text tokenised once for the engine's lifetime
        self._head_chunk = head_chunk_for(self.config, scorer.device.type)
        if self.config.compile and hasattr(scorer, "compile") and not scorer.compiled:
            scorer.compile()  # each layer's MLP and norms (CausalPrefixScorer.compile)
        threads = self.config.tokenizer_threads
        self._tokenizer_threads = scorer.device.type == "cuda" if threads is None else threads
        if self.config.num_threads > 0 and scorer.device.type == "cpu":
            torch.set_num_threads(self.config.num_threads)

    # ---- public ---------------------------------------------------------------------------
    def score(
        self,
        lefts: Sequence[str],
        sentences: Sequence[str],
        rights: Sequence[str],
        directions: Sequence[str] = DIRECTIONS,
    ) -> dict[str, np.ndarray]:
        """Mean target-token log-prob of each Eq. (3) term for each window ``[l, s, r]``."""
        if not len(lefts) == len(sentences) == len(rights):
            raise ValueError("lefts, sentences and rights must have the same length")
        t0 = time.perf_counter()
        texts = list(dict.fromkeys([*lefts, *sentences, *rights]))
        new = [t for t in texts if t not in self._ids]
        with tokenizer_threads(self._tokenizer_threads):
            self._ids.update(zip(new, self.scorer.tokenize(new), strict=True))
        ids = self._ids
        self.stats.distinct_texts += len(texts)
        out: dict[str, np.ndarray] = {}
        for d in directions:
            td = time.perf_counter()
            slot = TARGET_SLOT[check_direction(d)]
            parts = (lefts, sentences, rights)
            given = [ids.get if k != slot else _none for k in range(3)]
            sources = [
                (given[0](lft), given[1](s), given[2](r))
                for lft, s, r in zip(lefts, sentences, rights, strict=True)
            ]
            reqs = self.scorer.build_requests(d, sources, [ids[t] for t in parts[slot]])
            out[d] = self.score_ids(d, reqs)
            self.stats.per_direction_seconds[d] = self.stats.per_direction_seconds.get(d, 0.0) + (
                time.perf_counter() - td
            )
        self.stats.seconds += time.perf_counter() - t0
        return out

    def score_ids(self, direction: str, requests: Sequence[tuple[Ids, Ids]]) -> np.ndarray:
        """Mean log-prob per target token for each (source ids, target ids) request."""
        n = len(requests)
        self.stats.requests += n
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        uniq: dict[tuple[Ids, Ids], int] = {}
        where = np.fromiter((uniq.setdefault(r, len(uniq)) for r in requests), np.int64, n)
        distinct = list(uniq)
        self.stats.distinct_requests += len(distinct)
        total = np.full(len(distinct), np.nan, dtype=np.float64)
        count = np.zeros(len(distinct), dtype=np.float64)
        run0 = getattr(self.scorer, "tokens_run", 0)
        if self._grouped(distinct):
            with self._inference():
                self._score_grouped(direction, distinct, total, count)
            self.stats.run_tokens += getattr(self.scorer, "tokens_run", 0) - run0
            if np.isnan(total).any():
                raise RuntimeError(f"{int(np.isnan(total).sum())} requests were not scored")
            return (total / np.maximum(count, 1.0)).astype(np.float32)[where]
        prefix = self.config.prefix_order and getattr(self.scorer, "min_shared_prefix", 0) > 0
        if self.scorer.shares_sources:  # keep requests of one source together (one encoding)
            rank = {s: i for i, s in enumerate(sorted({s for s, _ in distinct}))}
            # by prompt: requests sharing a prompt's beginning sit together (prefix reuse);
            # else by length first (least padding)
            keys = [(0 if prefix else len(s), rank[s], len(t)) for s, t in distinct]
        else:  # one sequence per request: sort by its padded length
            keys = [(len(s) + len(t), len(t), 0) for s, t in distinct]
        order = sorted(range(len(distinct)), key=keys.__getitem__)
        bar = tqdm(
            total=len(distinct),
            desc=f"score {direction}",
            unit="pair",
            mininterval=30.0,
            disable=not self.config.progress,
        )
        with self._inference(), bar:
            vocab = max(self.scorer.vocab_size, 1)
            for batch in padded_batches(order, distinct, self.config, self._scale, vocab):
                self._run(direction, batch, distinct, total, count)
                bar.update(len(batch))
        self.stats.run_tokens += getattr(self.scorer, "tokens_run", 0) - run0
        if np.isnan(total).any():  # cannot happen unless a batch was skipped: fail loudly
            raise RuntimeError(f"{int(np.isnan(total).sum())} requests were not scored")
        return (total / np.maximum(count, 1.0)).astype(np.float32)[where]

    # ---- grouped prompts (causal scorers) -------------------------------------------------
    def _grouped(self, distinct: list[tuple[Ids, Ids]]) -> bool:
        on = self.config.group_prompts
        if on is None:
            on = not dynamic_int8(self.scorer)
        return (
            on
            and hasattr(self.scorer, "encode_prefixes")
            and all(len(s) > 0 and len(t) > 0 for s, t in distinct)
        )

    def _score_grouped(
        self,
        direction: str,
        distinct: list[tuple[Ids, Ids]],
        total: np.ndarray,
        count: np.ndarray,
    ) -> None:
        """Groups of prefixes run once each (up to the token budget per group), then every
        request of the group as its rest of the prompt + target on the group's keys/values, in
        batches sorted by that length (so they hardly pad)."""
        prompts = list(dict.fromkeys(s for s, _ in distinct))
        pid = {s: i for i, s in enumerate(prompts)}
        prefixes, which, cut = shared_prefixes(
            prompts,
            getattr(self.scorer, "min_shared_prefix", 0),
            getattr(self.scorer, "prefix_share_min", 0.0),
        )
        req_prefix = np.fromiter((which[pid[s]] for s, _ in distinct), np.int64, len(distinct))
        suffixes = [s[cut[pid[s]] :] for s, _ in distinct]
        by_prefix: list[list[int]] = [[] for _ in prefixes]
        for i, k in enumerate(req_prefix):
            by_prefix[k].append(i)
        order = sorted(range(len(prefixes)), key=lambda k: (len(prefixes[k]), prefixes[k]))
        bar = tqdm(
            total=len(distinct),
            desc=f"score {direction}",
            unit="pair",
            mininterval=30.0,
            disable=not self.config.progress,
        )
        with bar:
            groups = prefix_pass_groups(order, prefixes, by_prefix, self.config, self._scale)
            for group in groups:
                reqs = [i for k in group for i in by_prefix[k]]
                self._run_group(group, prefixes, req_prefix, reqs, suffixes, distinct, total, count)
                bar.update(len(reqs))

    def _run_group(
        self,
        group: list[int],
        prefixes: list[Ids],
        req_prefix: np.ndarray,
        reqs: list[int],
        suffixes: list[Ids],
        distinct: list[tuple[Ids, Ids]],
        total: np.ndarray,
        count: np.ndarray,
    ) -> None:
        """One prefix pass for ``group``, then its requests' continuation batches (the next
        one laid out in a thread while the current runs); an OOM in the prefix pass halves the
        group, one in a batch halves the batch."""
        sc: Any = self.scorer
        try:
            if self.oom_hook is not None:
                self.oom_hook(len(group))
            enc = sc.encode_prefixes([prefixes[k] for k in group])
        except OOM_ERRORS:
            if len(group) == 1:
                raise
            out_of_memory = True
        else:
            out_of_memory = False
        if out_of_memory:  # retried outside the handler (see _run)
            self._oom()
            half = len(group) // 2
            for part in (group[:half], group[half:]):
                keep = set(part)
                sub = [i for i in reqs if req_prefix[i] in keep]
                self._run_group(part, prefixes, req_prefix, sub, suffixes, distinct, total, count)
            return
        # forward_calls counts scored batches (as on the padded path); prefix passes count as
        # encoder_sources, their tokens in padded_tokens
        self.stats.encoder_sources += len(group)
        self.stats.padded_tokens += int(enc.mask.numel())
        local = {k: j for j, k in enumerate(group)}
        rows = [local[int(req_prefix[i])] for i in reqs]
        srt = sorted(
            range(len(reqs)),
            key=lambda j: (len(suffixes[reqs[j]]) + len(distinct[reqs[j]][1]), j),
        )
        batches = continuation_batches(
            [reqs[j] for j in srt],
            [rows[j] for j in srt],
            suffixes,
            distinct,
            self.config,
            self._scale,
            max(self.scorer.vocab_size, 1),
            self._head_chunk,
        )

        def prepare(b: tuple[list[int], list[int]]) -> Any:
            ids, rws = b
            return sc.prepare_continuation(
                enc.mask, rws, [suffixes[i] for i in ids], [distinct[i][1] for i in ids]
            )

        pool = ThreadPoolExecutor(1) if self.config.prefetch and len(batches) > 1 else None
        try:
            nxt = pool.submit(prepare, batches[0]) if pool else None
            for bi, b in enumerate(batches):
                ready = nxt.result() if nxt is not None else prepare(b)
                if pool is not None and bi + 1 < len(batches):
                    nxt = pool.submit(prepare, batches[bi + 1])
                self._run_cont(enc, b, ready, suffixes, distinct, total, count, prepare)
        finally:
            if pool is not None:
                pool.shutdown(wait=True)

    def _run_cont(
        self,
        enc: Any,
        b: tuple[list[int], list[int]],
        ready: Any,
        suffixes: list[Ids],
        distinct: list[tuple[Ids, Ids]],
        total: np.ndarray,
        count: np.ndarray,
        prepare: Callable[[tuple[list[int], list[int]]], Any],
    ) -> None:
        ids, rws = b
        try:
            if self.oom_hook is not None:
                self.oom_hook(len(ids))
            sc: Any = self.scorer
            lp, n = sc.run_continuation(enc, ready, self._head_chunk)
        except OOM_ERRORS:
            if len(ids) == 1:
                raise
            out_of_memory = True
        else:
            out_of_memory = False
        if out_of_memory:
            self._oom()
            h = len(ids) // 2
            for part in ((ids[:h], rws[:h]), (ids[h:], rws[h:])):
                self._run_cont(enc, part, prepare(part), suffixes, distinct, total, count, prepare)
            return
        idx = np.asarray(ids)
        total[idx] = lp.double().cpu().numpy()
        count[idx] = n.double().cpu().numpy()
        self.stats.forward_calls += 1
        tl = [len(distinct[i][1]) for i in ids]
        self.stats.target_tokens += int(sum(tl))
        self.stats.padded_tokens += int(ready.ids.numel())

    def _oom(self) -> None:
        self.stats.oom_retries += 1
        self._scale = max(self._scale / 2, 1e-3)
        if self.scorer.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- internals ------------------------------------------------------------------------
    def _inference(self) -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        stack.enter_context(native_gqa(self.scorer.device))  # no key/value head copies on CPU
        if self.scorer.backend == "causal":  # short queries: two products beat the flash kernel
            # imported here: transformers' attention registry costs a CLI process ~3 s to load
            from ctxsim.models.contextual.grouped_attention import grouped_matmul

            stack.enter_context(grouped_matmul(self.scorer.model, self.scorer.device))
        dev = self.scorer.device.type
        if (dev == "cuda" and self.config.bf16_on_cuda) or (
            dev == "cpu" and self.config.bf16_on_cpu
        ):
            stack.enter_context(torch.autocast(dev, dtype=torch.bfloat16))
        if dev == "cuda" and not self.config.cudnn_attention:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
            stack.enter_context(sdpa_kernel(backends))
        return stack

    def _run(
        self,
        direction: str,
        batch: list[int],
        distinct: list[tuple[Ids, Ids]],
        total: np.ndarray,
        count: np.ndarray,
    ) -> None:
        srcs = [distinct[i][0] for i in batch]
        tgts = [distinct[i][1] for i in batch]
        try:
            if self.oom_hook is not None:
                self.oom_hook(len(batch))
            lp, n = self.scorer.token_logprobs(direction, srcs, tgts)
        except OOM_ERRORS:
            if len(batch) == 1:
                raise
            out_of_memory = True
        else:
            out_of_memory = False
        if out_of_memory:
            # retried after the handler has ended: inside it, the exception's traceback keeps the
            # failed forward's frames, and with them every activation it allocated (seen on an
            # H200: 139 GB held, a 2 MB allocation failing twelve halvings down)
            self.stats.oom_retries += 1
            self._scale = max(self._scale / 2, 1e-3)
            if self.scorer.device.type == "cuda":
                torch.cuda.empty_cache()
            half = len(batch) // 2
            self._run(direction, batch[:half], distinct, total, count)
            self._run(direction, batch[half:], distinct, total, count)
            return
        idx = np.asarray(batch)
        total[idx] = lp.double().cpu().numpy()
        count[idx] = n.double().cpu().numpy()
        self.stats.forward_calls += 1
        self.stats.encoder_sources += len(set(srcs))
        self.stats.target_tokens += int(sum(len(t) for t in tgts))
        self.stats.padded_tokens += len(batch) * (
            max(len(s) for s in srcs) + max(len(t) for t in tgts)
        )


def naive_score(
    scorer: GenerativeScorer,
    lefts: Sequence[str],
    sentences: Sequence[str],
    rights: Sequence[str],
    directions: Sequence[str] = DIRECTIONS,
) -> dict[str, np.ndarray]:
    """The baseline the engine is measured against: one pair per ``log_prob`` call."""
    out: dict[str, np.ndarray] = {}
    for d in directions:
        vals = []
        for lft, s, r in zip(lefts, sentences, rights, strict=True):
            src, tgt = eq3_example(d, lft, s, r)
            vals.append(scorer.log_prob(d, [src], [tgt])[0])
        out[d] = np.asarray(vals, dtype=np.float32)
    return out
