"""The Rust tokenizer's own threads, switched on around the calls that wait on tokenisation."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def tokenizer_threads(on: bool) -> Iterator[None]:
    """The Rust tokenizer's own threads, on for the duration when ``on``. On a GPU the corpus
    pass and the score engine wait on tokenisation: MiniLM at 64 tokens on an H100 encoded 1,460
    paragraphs/s with them off and 4,530 with them on (bench/results/gpu_h100_lm_route_2.md).
    The project turns them off by default (flows/prefect_env.py: forked workers); a forked child
    turns them off again itself, so leaving them on here costs at most that warning."""
    if not on:
        yield
        return
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = old
