"""S(s, c) of Eq. (3) from its four terms (the generative ones scored by
models/contextual/score_engine.py), and the discriminator's term, log p(y=1|s,c)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
