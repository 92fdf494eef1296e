"""Batched scoring engine for the generative terms of Eq. (3), and S itself.

What makes it fast, compared with one pair per forward call (bench/bench_score.py measures it):

* every distinct text is tokenised once per engine; identical (source, target) requests are
  computed once;
* causal scorers (``group_prompts``): each distinct prompt, or shared beginning of prompts, runs
  once for a group of prompts; every target then runs on the group's keys/values in batches
  sorted by length, the next batch laid out in a thread while the current one runs, the
  vocabulary head in chunks (docs/scoring.md, bench/bench_lm_route.py);
* otherwise requests are sorted by length (seq2seq: by source, so pairs that share a context sit
  together) and cut into batches by a padded-token budget, so padding stays small;
* seq2seq: one encoder pass per distinct source in a batch, reused by every target that shares
  it (the ``fwd`` source ``(c<, c>)`` is shared by every sentence scored against a context);
* ``torch.inference_mode``; bf16 autocast on CUDA (log-softmax in float32); torch threads on CPU,
  and optionally bf16 autocast on CPUs with bf16 instructions (AVX512-BF16/AMX: about 2x here,
  rank order of scores unchanged: Spearman 0.9995 against float32, bench/bench_score.py);
* the vocabulary head runs only on real target positions (no logits for prompts or padding).

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

from ctxsim.models.contextual.generator import DIRECTIONS, GenerativeScorer, Ids, eq3_example
from ctxsim.models.contextual.generator.causal import prefix_groups

OOM_ERRORS: tuple[type[BaseException], ...] = (torch.OutOfMemoryError,)


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
    head_chunk: int = 128  # target tokens per vocabulary-head call (grouped path; 0: all)
    prefetch: bool = True  # lay out the next batch in a thread while the current one runs


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
        self._ids.update(zip(new, self.scorer.tokenize(new), strict=True))
        cache = self._ids
        self.stats.distinct_texts += len(texts)
        out: dict[str, np.ndarray] = {}
        for d in directions:
            td = time.perf_counter()
            reqs = []
            for lft, s, r in zip(lefts, sentences, rights, strict=True):
                src, tgt = eq3_example(d, lft, s, r)
                reqs.append(self.scorer.example_ids(d, src, tgt, cache))
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
            for batch in self._batches(order, distinct):
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
            on = not _dynamic_int8(self.scorer)
        return (
            on
            and hasattr(self.scorer, "encode_prefixes")
            and all(len(s) > 0 and len(t) > 0 for s, t in distinct)
        )

    def _prefixes(self, prompts: list[Ids]) -> tuple[list[Ids], np.ndarray, np.ndarray]:
        """(prefixes to run once, the prefix of each prompt, its length): a shared beginning of
        several distinct prompts (the left term's "Passage: ___ {sentence}") by the scorer's own
        rule (``prefix_groups``, ``min_shared_prefix``, ``prefix_share_min``), else each prompt
        whole."""
        n = len(prompts)
        which, cut = np.arange(n), np.fromiter(map(len, prompts), np.int64, n)
        prefixes = list(prompts)
        least = getattr(self.scorer, "min_shared_prefix", 0)
        if least > 0 and n > 1:
            groups = prefix_groups(prompts, least)
            saved = sum((len(g) - 1) * k for g, k in groups)
            if saved >= getattr(self.scorer, "prefix_share_min", 0.0) * int(cut.sum()):
                prefixes = []
                for members, k in groups:
                    which[members] = len(prefixes)
                    cut[members] = k
                    prefixes.append(tuple(prompts[members[0]][:k]))
        return prefixes, which, cut

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
        prefixes, which, cut = self._prefixes(prompts)
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
            for group in self._prefix_groups(order, prefixes, by_prefix):
                reqs = [i for k in group for i in by_prefix[k]]
                self._run_group(group, prefixes, req_prefix, reqs, suffixes, distinct, total, count)
                bar.update(len(reqs))

    def _prefix_groups(
        self, order: list[int], prefixes: list[Ids], by_prefix: list[list[int]]
    ) -> list[list[int]]:
        """Cuts of the length-sorted prefixes: one prefix pass each, under the token budget
        (padded prefix tokens) and at most 16 x ``max_batch`` requests (memory of the
        bookkeeping, and enough requests to sort by length)."""
        cfg = self.config
        cap_req = max(1, 16 * cfg.max_batch)
        groups: list[list[int]] = []
        cur: list[int] = []
        width = n_req = 0
        for k in order:
            w, r = max(width, len(prefixes[k])), n_req + len(by_prefix[k])
            if cur and ((len(cur) + 1) * w > cfg.token_budget * self._scale or r > cap_req):
                groups.append(cur)
                cur, w, r = [], len(prefixes[k]), len(by_prefix[k])
            cur.append(k)
            width, n_req = w, r
        if cur:
            groups.append(cur)
        return groups

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
        batches = self._cont_batches(
            [reqs[j] for j in srt], [rows[j] for j in srt], suffixes, distinct
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

    def _cont_batches(
        self, reqs: list[int], rows: list[int], suffixes: list[Ids], distinct: list[tuple[Ids, Ids]]
    ) -> list[tuple[list[int], list[int]]]:
        """Greedy cut of length-sorted continuations under the token, size and logit budgets."""
        cfg, vocab = self.config, max(self.scorer.vocab_size, 1)
        out: list[tuple[list[int], list[int]]] = []
        cur_i: list[int] = []
        cur_r: list[int] = []
        width = tgt = 0
        for i, r in zip(reqs, rows, strict=True):
            t = len(distinct[i][1]) + 1
            w, nt, nb = max(width, len(suffixes[i]) + t), max(tgt, t), len(cur_i) + 1
            fits = (
                nb <= max(1, int(cfg.max_batch * self._scale))
                and nb * w <= cfg.token_budget * self._scale
                and (cfg.head_chunk > 0 or nb * nt * vocab <= cfg.max_logit_elems * self._scale)
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
            lp, n = sc.run_continuation(enc, ready, self.config.head_chunk)
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
        dev = self.scorer.device.type
        if (dev == "cuda" and self.config.bf16_on_cuda) or (
            dev == "cpu" and self.config.bf16_on_cpu
        ):
            stack.enter_context(torch.autocast(dev, dtype=torch.bfloat16))
        return stack

    def _batches(self, order: list[int], distinct: list[tuple[Ids, Ids]]) -> list[list[int]]:
        """Greedy cut of the sorted requests under the token, size and logit budgets."""
        cfg, vocab = self.config, max(self.scorer.vocab_size, 1)
        batches: list[list[int]] = []
        cur: list[int] = []
        max_s = max_t = 0
        for i in order:
            s, t = len(distinct[i][0]), len(distinct[i][1]) + 1
            ns, nt, nb = max(max_s, s), max(max_t, t), len(cur) + 1
            fits = (
                nb <= max(1, int(cfg.max_batch * self._scale))
                and nb * (ns + nt) <= cfg.token_budget * self._scale
                and nb * nt * vocab <= cfg.max_logit_elems * self._scale
            )
            if cur and not fits:
                batches.append(cur)
                cur, ns, nt = [], s, t
            cur.append(i)
            max_s, max_t = ns, nt
        if cur:
            batches.append(cur)
        return batches

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


def _dynamic_int8(scorer: GenerativeScorer) -> bool:
    """Whether the scorer's model holds torch's dynamically quantised (int8) layers."""
    mods = (m for mod in scorer.modules() for m in mod.modules())
    return any(type(m).__module__.startswith("torch.ao.nn.quantized.dynamic") for m in mods)


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


@dataclass(frozen=True)
class Lambdas:
    """Weights of Eq. (3): S = l1 log p(y=1|s,c) + l2 fwd + l3 left + l4 right."""

    disc: float = 1.0
    fwd: float = 1.0
    left: float = 1.0
    right: float = 1.0


def combine_eq3(
    disc_logprob: np.ndarray,
    gen_fwd: np.ndarray,
    gen_left: np.ndarray,
    gen_right: np.ndarray,
    lambdas: Lambdas,
) -> np.ndarray:
    """S(s, c) of Eq. (3), float32 (terms are already length-normalised mean log-probs).

    A term whose lambda is 0 is left out entirely, so it may be NaN (not computed)."""
    terms = [
        (lambdas.disc, disc_logprob),
        (lambdas.fwd, gen_fwd),
        (lambdas.left, gen_left),
        (lambdas.right, gen_right),
    ]
    s = np.zeros(len(np.asarray(disc_logprob)), dtype=np.float64)
    for lam, values in terms:
        if lam != 0.0:
            s += lam * np.asarray(values, dtype=np.float64)
    return s.astype(np.float32)


def log_sigmoid(logits: np.ndarray) -> np.ndarray:
    """log p(y=1) = log sigmoid(logit), numerically stable (Eq. 1 -> Eq. 3's first term)."""
    x = np.asarray(logits, dtype=np.float64)
    return (-np.logaddexp(0.0, -x)).astype(np.float32)
