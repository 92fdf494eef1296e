"""Diverse context sets Cs (Sec. 3.3, "Constructing C"): incremental greedy selection.

Candidates arrive in rank order. A candidate is taken unless

1. its text chunk has already contributed a context (each chunk gives at most one), or
2. the word set of its (i-1)-th sentence (the sentence just before the centre slot) has Jaccard
   similarity >= ``threshold`` (paper: 0.5) with that of any context already chosen,

until ``max_size`` (|Cs|, paper 500) contexts are chosen.

Three implementations of the same rule, all returning the chosen candidate indices:

- :func:`select_exact` — the reference: every candidate against every chosen set, O(n·|Cs|).
- :func:`select_prefix` — exact by construction: prefix filtering (Bayardo et al., "Scaling up
  all pairs similarity search", WWW 2007). If J(A, B) >= t then |A ∩ B| >= ceil(t·|A|), so the
  smallest shared token lies within the first |A| - ceil(t·|A|) + 1 tokens of A in any fixed
  global order, and likewise for B; indexing each chosen set by its prefix tokens and probing with
  the candidate's prefix therefore finds every conflict. Hits are verified exactly.
- :func:`select_lsh` — datasketch ``MinHashLSH`` over MinHash signatures (computed here in one
  vectorised pass, rare-token-agnostic), hits verified exactly. MinHash LSH has false negatives:
  a conflicting pair can be missed with probability (1 - J^r)^b, so the LSH operating threshold
  (``lsh_threshold``) is set below the rule's threshold; :func:`lsh_miss_probability` gives the
  miss rate at the rule's boundary. Use ``prefix`` when selections must equal the rule exactly.

Word sets: lower-cased ``\\w+`` tokens. J(∅, ∅) = 1 (two empty sentences are identical, which is
also what two empty MinHash signatures report); J(∅, B) = 0 for non-empty B.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+")
_EPS = 1e-9


def word_set(text: str | None) -> frozenset[str]:
    """The set of lower-cased word tokens of a sentence (None counts as empty)."""
    return frozenset(_WORD.findall(text.lower())) if text else frozenset()


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """|A ∩ B| / |A ∪ B|, with J(∅, ∅) = 1."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def _min_overlap(n: int, threshold: float) -> int:
    """Smallest integer overlap that J >= threshold can imply for a set of size n (rounded down
    by a hair so that float error can only lengthen prefixes, never shorten them)."""
    return max(1, math.ceil(threshold * n - _EPS))


def _check(n: int, chunk_ids: Sequence[int] | None, prev_sets: Sequence) -> None:
    if chunk_ids is not None and len(chunk_ids) != n:
        raise ValueError(f"chunk_ids has {len(chunk_ids)} entries, prev_sets has {n}")


def select_exact(
    prev_sets: Sequence[frozenset[str]],
    chunk_ids: Sequence[int] | None,
    max_size: int,
    threshold: float | None = 0.5,
) -> list[int]:
    """Reference greedy selection: each candidate is compared with every chosen context.

    ``chunk_ids=None`` disables the one-context-per-chunk rule, ``threshold=None`` the Jaccard
    rule (the "no diversity" ablation of Sec. 5.4 disables both).
    """
    n = len(prev_sets)
    _check(n, chunk_ids, prev_sets)
    chosen: list[int] = []
    chosen_sets: list[frozenset[str]] = []
    used_chunks: set[int] = set()
    for i in range(n):
        if len(chosen) >= max_size:
            break
        if chunk_ids is not None and chunk_ids[i] in used_chunks:
            continue
        a = prev_sets[i]
        if threshold is not None and any(jaccard(a, b) >= threshold for b in chosen_sets):
            continue
        chosen.append(i)
        chosen_sets.append(a)
        if chunk_ids is not None:
            used_chunks.add(chunk_ids[i])
    return chosen


def token_ranks(sets: Sequence[frozenset[str]]) -> dict[str, int]:
    """Rank of every token by ascending set frequency (0 = rarest): the prefix-filter order that
    keeps posting lists short. Compute it once over many queries' candidates and reuse it."""
    freq: dict[str, int] = {}
    for st in sets:
        for tok in st:
            freq[tok] = freq.get(tok, 0) + 1
    return {t: r for r, t in enumerate(sorted(freq, key=lambda t: (freq[t], t)))}


def select_prefix(
    prev_sets: Sequence[frozenset[str]],
    chunk_ids: Sequence[int] | None,
    max_size: int,
    threshold: float | None = 0.5,
    ranks: dict[str, int] | None = None,
) -> list[int]:
    """Exact greedy selection with a prefix-filter index over the chosen sets (see module doc).

    ``ranks`` fixes the global token order (rare first, :func:`token_ranks`); tokens it does not
    know, or all tokens when it is None, are ordered longest first (short words are the common
    ones). Any fixed order gives the exact result; a good one only makes it faster.
    """
    n = len(prev_sets)
    _check(n, chunk_ids, prev_sets)
    if threshold is None:
        return select_exact(prev_sets, chunk_ids, max_size, None)
    if threshold <= 0:
        # Every pair conflicts (J >= 0 always): only the first eligible candidate survives.
        return select_exact(prev_sets, chunk_ids, max_size, threshold)
    rk = ranks or {}

    def order_key(tok: str) -> tuple[int, int, str]:
        return (rk.get(tok, -1), -len(tok), tok)

    chosen: list[int] = []
    chosen_sets: list[frozenset[str]] = []
    chosen_len: list[int] = []
    used_chunks: set[int] = set()
    index: dict[str, list[int]] = {}  # prefix token -> positions in chosen_sets
    n_empty_chosen = 0
    for i in range(n):
        if len(chosen) >= max_size:
            break
        if chunk_ids is not None and chunk_ids[i] in used_chunks:
            continue
        a = prev_sets[i]
        la = len(a)
        if not a:
            if n_empty_chosen:  # J(∅, ∅) = 1 >= threshold
                continue
            prefix: list[str] = []
        else:
            prefix = sorted(a, key=order_key)[: la - _min_overlap(la, threshold) + 1]
            # size filter: J >= t needs t·|A| <= |B| <= |A| / t (padded against float error)
            lo, hi = threshold * la - _EPS, la / threshold + _EPS
            conflict = False
            seen: set[int] = set()
            for tok in prefix:
                for j in index.get(tok, ()):
                    if j in seen:
                        continue
                    seen.add(j)
                    lb = chosen_len[j]
                    if lb < lo or lb > hi:
                        continue
                    inter = len(a & chosen_sets[j])
                    if inter / (la + lb - inter) >= threshold:
                        conflict = True
                        break
                if conflict:
                    break
            if conflict:
                continue
        pos = len(chosen_sets)
        chosen.append(i)
        chosen_sets.append(a)
        chosen_len.append(la)
        if not a:
            n_empty_chosen += 1
        for tok in prefix:
            index.setdefault(tok, []).append(pos)
        if chunk_ids is not None:
            used_chunks.add(chunk_ids[i])
    return chosen


# ---- MinHash LSH ------------------------------------------------------------------------------
_MERSENNE = np.uint64((1 << 61) - 1)
_MAX32 = np.uint64((1 << 32) - 1)


def minhash_signatures(
    prev_sets: Sequence[frozenset[str]], num_perm: int, seed: int = 1
) -> np.ndarray:
    """MinHash signatures (n, num_perm) uint64 of many word sets in one vectorised pass.

    Each distinct token is hashed once (a seeded universal hash (a·h + b) mod 2^61-1 of a stable
    64-bit token hash, truncated to 32 bits like datasketch's legacy scheme); a set's signature is
    the column-wise minimum over its tokens. Empty sets get the all-max signature.
    """
    vocab: dict[str, int] = {}
    flat: list[int] = []
    offsets = np.zeros(len(prev_sets) + 1, dtype=np.int64)
    for i, s in enumerate(prev_sets):
        for tok in s:
            flat.append(vocab.setdefault(tok, len(vocab)))
        offsets[i + 1] = len(flat)
    rng = np.random.default_rng(seed)
    a = rng.integers(1, int(_MERSENNE), size=num_perm, dtype=np.uint64)
    b = rng.integers(0, int(_MERSENNE), size=num_perm, dtype=np.uint64)
    # Stable token hash (Python's hash() is salted per process): blake2b, 32 bits.
    import hashlib

    hv = np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(t.encode(), digest_size=4).digest(), "little")
            for t in vocab
        ),
        dtype=np.uint64,
        count=len(vocab),
    )
    # (a*h + b) mod p with h < 2^32 and a < 2^61 overflows uint64; a*h mod 2^64 is what
    # datasketch's legacy scheme computes too, then mod p and a 32-bit mask. It is a fixed
    # pseudo-random map per permutation, which is all MinHash needs.
    phv = (hv[:, None] * a[None, :] + b[None, :]) % _MERSENNE & _MAX32
    sig = np.full((len(prev_sets), num_perm), _MAX32, dtype=np.uint64)
    if flat:
        rows = phv[np.asarray(flat, dtype=np.int64)]
        sizes = np.diff(offsets)
        nonempty = np.flatnonzero(sizes)
        sig[nonempty] = np.minimum.reduceat(rows, offsets[nonempty], axis=0)
    return sig


@functools.cache
def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """datasketch's own (bands b, rows r) choice for an operating threshold (computed once:
    datasketch integrates false-positive/negative areas for every (b, r), which is slow)."""
    from datasketch import MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    return lsh.b, lsh.r


def lsh_miss_probability(jaccard_value: float, lsh_threshold: float, num_perm: int) -> float:
    """Probability that LSH misses a pair with this Jaccard: (1 - J^r)^b."""
    b, r = lsh_params(lsh_threshold, num_perm)
    return (1.0 - jaccard_value**r) ** b


def select_lsh(
    prev_sets: Sequence[frozenset[str]],
    chunk_ids: Sequence[int] | None,
    max_size: int,
    threshold: float | None = 0.5,
    num_perm: int = 128,
    lsh_threshold: float = 0.3,
    seed: int = 1,
    sig_block: int = 256,
) -> list[int]:
    """Greedy selection with datasketch MinHashLSH candidate conflicts + exact verification.

    Never takes a context that the exact rule rejects for a *found* conflict; may take one whose
    conflict LSH missed (probability :func:`lsh_miss_probability`).
    """
    n = len(prev_sets)
    _check(n, chunk_ids, prev_sets)
    if threshold is None:
        return select_exact(prev_sets, chunk_ids, max_size, None)
    from datasketch import LeanMinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=num_perm, params=lsh_params(lsh_threshold, num_perm))
    chosen: list[int] = []
    chosen_sets: dict[int, frozenset[str]] = {}
    used_chunks: set[int] = set()
    sig = np.zeros((0, num_perm), np.uint64)
    sig_lo = 0  # signatures are computed in blocks, only as far as the greedy scan gets
    for i in range(n):
        if len(chosen) >= max_size:
            break
        if chunk_ids is not None and chunk_ids[i] in used_chunks:
            continue
        a = prev_sets[i]
        if i >= sig_lo + len(sig):
            sig_lo = i
            sig = minhash_signatures(prev_sets[i : i + sig_block], num_perm, seed)
        m = LeanMinHash(seed=seed, hashvalues=sig[i - sig_lo], scheme="legacy")
        if any(jaccard(a, chosen_sets[j]) >= threshold for j in lsh.query(m)):
            continue
        chosen.append(i)
        chosen_sets[i] = a
        lsh.insert(i, m, check_duplication=False)
        if chunk_ids is not None:
            used_chunks.add(chunk_ids[i])
    return chosen


def select(
    prev_sets: Sequence[frozenset[str]],
    chunk_ids: Sequence[int] | None,
    max_size: int,
    threshold: float | None = 0.5,
    method: str = "prefix",
    num_perm: int = 128,
    lsh_threshold: float = 0.3,
    seed: int = 1,
    ranks: dict[str, int] | None = None,
) -> list[int]:
    """Dispatch on ``method`` in {"prefix", "lsh", "exact"} (``ranks``: prefix token order)."""
    if method == "prefix":
        return select_prefix(prev_sets, chunk_ids, max_size, threshold, ranks)
    if method == "exact":
        return select_exact(prev_sets, chunk_ids, max_size, threshold)
    if method == "lsh":
        return select_lsh(prev_sets, chunk_ids, max_size, threshold, num_perm, lsh_threshold, seed)
    raise ValueError(f"unknown selection method {method!r}; use prefix, lsh or exact")
