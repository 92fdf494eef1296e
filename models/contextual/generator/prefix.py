"""Shared prompt beginnings of the causal backend (generator/causal.py): which prompts share
one (``prefix_groups``), a run prefix's cache (``PrefixCache``) and a batch of continuations on
it (``Continuation``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from ctxsim.models.contextual.generator.protocol import Ids


class PrefixCache(NamedTuple):
    """Prefixes run once: their keys/values, the hidden state of each one's last position (it
    predicts a continuation's first token) and their left-padding mask."""

    cache: Any
    last: torch.Tensor
    mask: torch.Tensor


class Continuation(NamedTuple):
    """One batch of continuations laid out on the host: rows of the prefix encoding, the
    rest-of-prompt + target ids (but each target's last token, which predicts nothing scored),
    their positions, the attention mask over prefix and rest, and the target labels and mask
    (``prepare_continuation``)."""

    row: torch.Tensor
    ids: torch.Tensor
    pos: torch.Tensor
    attn: torch.Tensor
    labels: torch.Tensor
    tmask: torch.Tensor


def prefix_groups(sources: Sequence[Ids], min_prefix: int) -> list[tuple[list[int], int]]:
    """Requests grouped by a common prompt prefix: [(member indices, prefix length)].

    Prompts in sorted order join the group before them while they share at least
    ``min_prefix`` tokens with its last member and at least half of its common prefix (so a
    group keeps the sentence its members share, not just a template's first words). A member
    may be all prefix (its target then follows the prefix directly); a request alone is its
    own group, its whole prompt the prefix."""
    order = sorted(range(len(sources)), key=lambda i: tuple(sources[i]))
    groups: list[tuple[list[int], int]] = []
    members: list[int] = []
    common = 0
    for i in order:
        s = sources[i]
        if members:
            prev = sources[members[-1]]
            n = 0
            for a, b in zip(prev, s, strict=False):
                if a != b:
                    break
                n += 1
            shared = n if len(members) == 1 else min(common, n)
            if n >= min_prefix and (len(members) == 1 or shared * 2 >= common):
                members.append(i)
                common = shared
                continue
            groups.append((members, common if len(members) > 1 else len(sources[members[0]])))
        members, common = [i], len(s)
    if members:
        groups.append((members, common if len(members) > 1 else len(sources[members[0]])))
    return groups
