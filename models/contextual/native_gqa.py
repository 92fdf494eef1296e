"""Grouped-query attention without key/value copies on CPU: transformers' own switch, scoped.

SmolLM2 and Gemma 3 give several query heads one key/value head. With a padding mask,
transformers' sdpa path copies every key/value head once per query head (``repeat_kv``) before
calling torch's attention, unless ``TRANSFORMERS_SDPA_FORCE_GQA`` says the kernel takes grouped
heads itself. torch's CPU flash kernel does, with a mask and with the same arithmetic: the
books_generated right term scores identically, 1.11x faster on one thread with a third of the
peak memory growth (bench/results/score_lm_route_native_gqa.md; MedQuAD's windows: no faster,
less memory). On CUDA a masked call with grouped heads would leave the flash kernels for the math
one, so the switch is CPU only. Calls of one query a row (decoding) already avoid the copies on
transformers' own path; switched over they round differently in bf16 (so the sampler scopes it
to its prompt pass). The score engine now attends on CPU with two products per key/value head
group instead (models/contextual/grouped_attention.py) for the architectures that reproduces;
this switch stays for the sampler and for the others.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

#: read by transformers.integrations.sdpa_attention.use_gqa_in_sdpa on every attention call
GQA_ENV = "TRANSFORMERS_SDPA_FORCE_GQA"


@contextlib.contextmanager
def native_gqa(device: torch.device | str) -> Iterator[None]:
    """Grouped heads handed to torch's attention as they are, for the duration, on CPU. A value
    the user set for the variable is left alone (``0`` turns this off)."""
    if torch.device(device).type != "cpu" or GQA_ENV in os.environ:
        yield
        return
    os.environ[GQA_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(GQA_ENV, None)
