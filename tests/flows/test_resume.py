"""Resume after SIGKILL: finished shards are not recomputed; artefacts are byte-identical.

One clean run of a shrunk quickstart (``SMALL``, through ``evaluate``) serves the whole module:
every drill compares its resumed artefacts with it byte for byte, and the drills of the costly
stages (score, train) start from a root seeded with its published upstream artefacts (they are
content-addressed: ``<root>/<stage>/<fingerprint>/``), so only the stage under test is computed,
killed and resumed. A second clean run, in another process at the same time, is the other half
of the byte-identity check. Every `ctxsim run` of the module talks to the session's Prefect
server (SQLite, loopback; tests/conftest.py ``prefect_server``) instead of starting an ephemeral
one each: what these drills prove lives in the artefact store, and a killed run's flow run
merely stays "running" on that server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ctxsim.tasks import STAGES
from tests.conftest import REPO, SMALL_QUICKSTART

pytestmark = pytest.mark.integration

#: a quickstart shrunk to minutes: the corpus in four shards (one is killed mid-stage), two
#: query shards (one is killed mid-score), and enough training steps to kill it after a
#: checkpoint
SMALL = [
    *SMALL_QUICKSTART,
    "shard.n_shards=4",
    "queries.n_shards=2",
    "train.max_steps=120",
    "train.eval_steps=10",
    "run.torch_threads=1",
]

# what a rerun may change: the wall-clock fields of the train metrics and model card (which the
# evaluate stage's published model card extends)
TIMING_FILES = {
    "train/files/metrics.json",
    "train/files/model/README.md",
    "evaluate/files/model/README.md",
}


def _cmd(root: Path, run_id: str, until: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "ctxsim.flows.cli",
        "run",
        "--config",
        str(REPO / "configs/quickstart.yaml"),
        "--root",
        str(root),
        "--until",
        until,
        "--run-id",
        run_id,
        "--no-progress",
    ]
    for s in SMALL:
        cmd += ["--set", s]
    return cmd


#: the module's Prefect server (set by the ``prefect_api`` fixture)
API: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def prefect_api(prefect_server: str):
    """The session's Prefect server (tests/conftest.py) for every run of the module."""
    API["PREFECT_API_URL"] = prefect_server
    try:
        yield prefect_server
    finally:
        API.clear()


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(API)
    env.update(extra)
    return env


def _run(root: Path, run_id: str, until: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        _cmd(root, run_id, until), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _part_hashes(root: Path, until: str = "evaluate", timing: bool = True) -> dict[str, str]:
    """sha256 of every published part and file of the stages up to ``until`` (``timing=False``:
    without the wall-clock files)."""
    stages = set(list(STAGES)[: list(STAGES).index(until) + 1])
    out = {}
    for manifest in sorted(root.glob("*/*/_MANIFEST.json")):
        m = json.loads(manifest.read_text())
        if m["stage"] not in stages:
            continue
        for p in m["parts"] + m["files"]:
            key = f"{m['stage']}/{p['file']}"
            if timing or key not in TIMING_FILES:
                out[key] = p["sha256"]
    return out


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Two clean runs through ``evaluate`` in two processes at once, on two roots (read-only
    for the tests: they copy from them): ``root`` is the reference, ``other`` its twin."""
    roots = [tmp_path_factory.mktemp("resume-clean"), tmp_path_factory.mktemp("resume-twin")]
    logs = [root.with_name(f"{root.name}.stderr") for root in roots]
    procs = []
    for root, log in zip(roots, logs, strict=True):
        with open(log, "wb") as err:
            procs.append(
                subprocess.Popen(
                    _cmd(root, "clean", "evaluate"),
                    cwd=REPO,
                    env=_env(),
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            )
    try:
        for proc, log in zip(procs, logs, strict=True):
            proc.wait(timeout=900)
            assert proc.returncode == 0, log.read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    record = json.loads((roots[0] / "runs" / "clean.json").read_text())
    assert record["status"] == "completed"
    return SimpleNamespace(root=roots[0], other=roots[1], stages=record["stages"])


def _seed(root: Path, clean: SimpleNamespace, before: str) -> None:
    """Copy the clean run's published artefacts of every stage before ``before`` into ``root``
    (a rerun finds them by fingerprint and reuses them, checksums verified)."""
    for name in list(STAGES)[: list(STAGES).index(before)]:
        if name in clean.stages:
            fp = clean.stages[name]["fingerprint"]
            shutil.copytree(clean.root / name / fp, root / name / fp)


def _start_killable(root: Path, run_id: str, until: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        _cmd(root, run_id, until),
        cwd=REPO,
        start_new_session=True,
        env=_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_sigkill_mid_stage_then_resume(tmp_path: Path, clean: SimpleNamespace):
    killed_root = tmp_path / "killed"
    fault = tmp_path / "fault.json"  # shard 2 sleeps: a window to SIGKILL the run mid-stage
    fault.write_text(json.dumps({"stage": "shard", "shard": 2, "kind": "delay", "seconds": 300}))
    proc = _start_killable(killed_root, "r1", "queries", CTXSIM_FAULT_FILE=str(fault))
    partial = killed_root / "shard"
    deadline = time.monotonic() + 240
    done: list[Path] = []
    while time.monotonic() < deadline:
        done = sorted(partial.glob(".partial-*/_shard-*.json")) if partial.exists() else []
        if len(done) >= 2:
            break
        if proc.poll() is not None:
            pytest.fail(f"run ended early: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)
    assert len(done) == 2, "shards 0 and 1 should finish while shard 2 sleeps"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert not list(killed_root.glob("shard/*/_MANIFEST.json")), "nothing may be published"
    record = json.loads((killed_root / "runs" / "r1.json").read_text())
    assert record["status"] == "running"  # killed without a chance to record anything

    _run(killed_root, "r1", "queries")
    record = json.loads((killed_root / "runs" / "r1.json").read_text())
    assert record["status"] == "completed"
    assert record["stages"]["shard"]["shards_computed"] == 2  # shards 0 and 1 were reused

    fresh = _part_hashes(clean.root, until="queries")
    assert _part_hashes(killed_root) == fresh
    assert len(fresh) >= 7

    _run(killed_root, "r3", "queries")  # a finished root: every stage is reused
    rec3 = json.loads((killed_root / "runs" / "r3.json").read_text())
    assert {s["status"] for s in rec3["stages"].values()} == {"reused"}


def test_two_fresh_runs_give_byte_identical_artefacts(clean: SimpleNamespace):
    """Same config and seed in two processes (tokenizers' and Python's hashes seeded
    differently) on two roots: every artefact is byte-identical, the tiny generator's learnt
    vocabulary and weights, its scores, the labels, the surrogate's weights and the evaluation
    report (which names models relative to the root) included."""
    hashes = [_part_hashes(root, timing=False) for root in (clean.root, clean.other)]
    assert {k.split("/")[0] for k in hashes[0]} >= {
        "generator",
        "score",
        "label",
        "train",
        "evaluate",
    }
    assert "evaluate/files/report.md" in hashes[0]
    assert "generator/files/model/model.safetensors" in hashes[0]
    assert "train/files/model/model.safetensors" in hashes[0]
    differing = sorted(k for k in hashes[0] if hashes[0][k] != hashes[1].get(k))
    assert not differing and hashes[0].keys() == hashes[1].keys()


def test_sigkill_mid_score_then_resume_is_byte_identical_to_a_clean_run(
    tmp_path: Path, clean: SimpleNamespace
):
    """The costly stage, with its score cache: killed while shard 1 waits (shard 0 finished and
    its generative terms cached), the rerun computes only shard 1 and every artefact matches a
    clean run byte for byte. The root starts with the clean run's upstream artefacts."""
    killed_root = tmp_path / "killed"
    _seed(killed_root, clean, before="score")
    fault = tmp_path / "fault.json"
    fault.write_text(
        json.dumps(
            {
                "stage": "score",
                "shard": 1,
                "kind": "delay",
                "seconds": 600,
                "root": str(killed_root),
            }
        )
    )
    proc = _start_killable(killed_root, "k1", "score", CTXSIM_FAULT_FILE=str(fault))
    deadline = time.monotonic() + 480
    done: list[Path] = []
    while time.monotonic() < deadline:
        done = sorted((killed_root / "score").glob(".partial-*/_shard-*.json"))
        if done and Path(f"{fault}.attempts").exists():  # shard 0 done, shard 1 waiting
            break
        if proc.poll() is not None:
            pytest.fail(f"run ended early: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)
    assert len(done) == 1, "shard 0 of score should finish while shard 1 waits"
    assert list((killed_root / "_cache" / "scores").rglob("*.parquet")), "terms were cached"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert not list(killed_root.glob("score/*/_MANIFEST.json")), "nothing may be published"
    record = json.loads((killed_root / "runs" / "k1.json").read_text())
    assert {s["status"] for s in record["stages"].values()} == {"reused"}  # upstream: seeded

    _run(killed_root, "k1", "score")
    record = json.loads((killed_root / "runs" / "k1.json").read_text())
    assert record["status"] == "completed"
    assert record["stages"]["score"]["status"] == "completed"
    assert record["stages"]["score"]["shards_computed"] == 1  # shard 0 was reused

    killed, fresh = _part_hashes(killed_root), _part_hashes(clean.root, until="score")
    assert any(k.startswith("score/") for k in fresh)
    assert sorted(k for k in fresh if fresh[k] != killed.get(k)) == []
    assert killed.keys() == fresh.keys()


def test_sigkill_mid_train_then_resume_is_byte_identical_to_a_clean_run(
    tmp_path: Path, clean: SimpleNamespace
):
    """Training, with its checkpoints: killed once a checkpoint is complete, the rerun resumes
    from it (the train stats say so) and every artefact matches a clean run byte for byte (the
    wall-clock fields of the metrics and model card aside). The root starts with the clean
    run's upstream artefacts."""
    killed_root = tmp_path / "killed"
    _seed(killed_root, clean, before="train")
    proc = _start_killable(killed_root, "k1", "train")
    deadline = time.monotonic() + 480
    ready: list[Path] = []
    while time.monotonic() < deadline:
        # the trainer writes trainer_state.json last, then the stage seals the checkpoint
        # (its sha256 beside it): a checkpoint a resume can load
        ready = list(killed_root.glob("_cache/train/*/checkpoints/checkpoint-*.sha256"))
        if ready:
            break
        if proc.poll() is not None:
            pytest.fail(f"run ended before a checkpoint: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    assert ready, "no complete checkpoint appeared"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert not list(killed_root.glob("train/*/_MANIFEST.json")), "train must not be published"

    _run(killed_root, "k1", "train")
    (manifest,) = killed_root.glob("train/*/_MANIFEST.json")
    assert json.loads(manifest.read_text())["stats"]["resumed"] is True

    killed = _part_hashes(killed_root, timing=False)
    fresh = _part_hashes(clean.root, until="train", timing=False)
    assert "train/files/model/model.safetensors" in fresh
    assert sorted(k for k in fresh if fresh[k] != killed.get(k)) == []
    assert killed.keys() == fresh.keys()
