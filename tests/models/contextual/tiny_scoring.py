"""Tiny generative scorers' shared parts for the tests of scoring (the engine, the score stage,
its cache, Eq. 3): one model size, one vocabulary, one window generator, so every test folder
imports them from here rather than from another test module."""

from __future__ import annotations

import numpy as np

from ctxsim.models.contextual.generator import TinyConfig

TINY = TinyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
#: a tiny discriminator stage's params (the BiLSTM coherence model): seconds, not minutes
TINY_DISCRIMINATOR = {
    "epochs": 1,
    "hidden": 8,
    "emb_dim": 8,
    "head_hidden": 8,
    "max_windows_per_epoch": 300,
    "max_val_windows": 200,
}
WORDS = "the cat sat on a mat while dog ran far away from home it was dark and stormy night".split()


def windows(n: int, seed: int = 0) -> list[list[str]]:
    """Windows of very different lengths, with contexts shared by several sentences."""
    rng = np.random.default_rng(seed)

    def sent() -> str:
        return " ".join(rng.choice(WORDS, size=int(rng.integers(1, 14))))

    ctxs = [(sent(), sent()) for _ in range(max(2, n // 4))]
    sents = [sent() for _ in range(max(2, n // 3))]
    out = []
    for _ in range(n):
        lft, r = ctxs[int(rng.integers(len(ctxs)))]
        out.append((lft, sents[int(rng.integers(len(sents)))], r))
    return [list(x) for x in zip(*out, strict=True)]
