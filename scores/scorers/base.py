"""The terms of Eq. 3 as scorers: each one a small class with its name, the artefacts it needs and
a method giving its per-(query, context) values; a registry ``scores/eq3.py`` reads.

S = lambda_disc * disc + lambda_fwd * fwd + lambda_left * left + lambda_right * right: the
discriminative term comes from one scorer (``discriminator``: the BiLSTM of Eq. 1), the three
generative terms from another (``generator``: log-likelihoods from the `generator` artefact).
A new scorer is one module here with a ``ContextScorer`` subclass under ``@register_scorer``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from ctxsim.store.errors import InputError


@dataclass(frozen=True)
class Windows:
    """The (query, context) rows to score and their texts: the query sentences, each context's
    two sides as text (``lefts``/``rights``, "" for an absent side) and as sentence ids (by row
    of the sorted contexts, ``crow``) with the sentence-text table they index."""

    qid: np.ndarray
    cid: np.ndarray
    sents: np.ndarray
    lefts: np.ndarray
    rights: np.ndarray
    left_ids: list[list[int]]
    right_ids: list[list[int]]
    crow: np.ndarray
    s_keys: np.ndarray
    s_text: np.ndarray

    def __len__(self) -> int:
        return len(self.qid)


@dataclass
class Scored:
    """A scorer's output: columns of the score table (one value per window) and its stats."""

    columns: dict[str, np.ndarray]
    stats: dict[str, Any] = field(default_factory=dict)


class ContextScorer:
    """One source of Eq. 3 terms for (sentence, context) windows."""

    name: ClassVar[str]
    #: which part of Eq. 3 it gives: the discriminative term or the generative ones
    role: ClassVar[Literal["disc", "gen"]]
    #: the columns of ``SCORE_SCHEMA`` it fills
    columns: ClassVar[tuple[str, ...]]

    def inputs(self, params: Any) -> tuple[str, ...]:
        """The stage inputs it reads under these score settings (``ctx.input`` names)."""
        raise NotImplementedError

    def score(self, ctx: Any, params: Any, windows: Windows) -> Scored:
        """Its values for every window (``ctx``: the stage context, ``params``: ScoreParams)."""
        raise NotImplementedError


#: scorer name -> its instance
SCORERS: dict[str, ContextScorer] = {}


def register_scorer(cls: type[ContextScorer]) -> type[ContextScorer]:
    """Class decorator: make a scorer known by its name."""
    if cls.name in SCORERS and type(SCORERS[cls.name]) is not cls:
        raise ValueError(f"scorer {cls.name!r} is registered twice")
    SCORERS[cls.name] = cls()
    return cls


def get_scorer(name: str, role: str | None = None) -> ContextScorer:
    """The registered scorer ``name`` (of ``role`` when given); a ValueError naming the known
    ones otherwise."""
    known = [n for n, s in SCORERS.items() if role is None or s.role == role]
    if name not in known:
        raise InputError(f"unknown scorer {name!r}: one of {', '.join(known)}")
    return SCORERS[name]
