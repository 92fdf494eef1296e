"""Scorers of Eq. 3's terms and their registry (``base.py``): ``discriminator`` (the disc term)
``encoder`` (a sentence encoder's cosine as the disc term) and ``generator`` (the generative
terms)."""

from ctxsim.scores.scorers.base import (
    SCORERS,
    ContextScorer,
    Scored,
    Windows,
    get_scorer,
    register_scorer,
)
from ctxsim.scores.scorers.discriminator import DiscriminatorScorer
from ctxsim.scores.scorers.encoder import EncoderScorer
from ctxsim.scores.scorers.generator import INT8_FLOAT_LAYERS, GeneratorScorer

__all__ = [
    "INT8_FLOAT_LAYERS",
    "SCORERS",
    "ContextScorer",
    "DiscriminatorScorer",
    "EncoderScorer",
    "GeneratorScorer",
    "Scored",
    "Windows",
    "get_scorer",
    "register_scorer",
]
