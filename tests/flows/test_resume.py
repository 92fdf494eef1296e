"""Resume after SIGKILL: finished shards are not recomputed; artefacts are byte-identical."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE

pytestmark = pytest.mark.integration


def _cmd(root: Path, run_id: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ctxsim.flows.cli",
        "run",
        "--config",
        str(REPO / "configs/quickstart.yaml"),
        "--root",
        str(root),
        "--until",
        "queries",
        "--run-id",
        run_id,
        "--no-progress",
        "--set",
        f"shard.paths=['{SAMPLE}']",
        "--set",
        "shard.n_shards=4",
    ]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PREFECT_API_URL", None)
    env.update(extra)
    return env


def _part_hashes(root: Path) -> dict[str, str]:
    out = {}
    for manifest in sorted(root.glob("*/*/_MANIFEST.json")):
        m = json.loads(manifest.read_text())
        for p in m["parts"] + m["files"]:
            out[f"{m['stage']}/{p['file']}"] = p["sha256"]
    return out


def test_sigkill_mid_stage_then_resume(tmp_path: Path):
    killed_root = tmp_path / "killed"
    fault = tmp_path / "fault.json"  # shard 2 sleeps: a window to SIGKILL the run mid-stage
    fault.write_text(json.dumps({"stage": "shard", "shard": 2, "kind": "delay", "seconds": 300}))
    proc = subprocess.Popen(
        _cmd(killed_root, "r1"),
        cwd=REPO,
        start_new_session=True,
        env=_env(CTXSIM_FAULT_FILE=str(fault)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
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

    rerun = subprocess.run(
        _cmd(killed_root, "r1") + ["--json"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    record = json.loads((killed_root / "runs" / "r1.json").read_text())
    assert record["status"] == "completed"
    assert record["stages"]["shard"]["shards_computed"] == 2  # shards 0 and 1 were reused

    clean_root = tmp_path / "clean"
    clean = subprocess.run(
        _cmd(clean_root, "r2"), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=400
    )
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert _part_hashes(killed_root) == _part_hashes(clean_root)
    assert len(_part_hashes(clean_root)) >= 7

    again = subprocess.run(
        _cmd(clean_root, "r3"), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=400
    )
    assert again.returncode == 0, again.stderr[-3000:]
    rec3 = json.loads((clean_root / "runs" / "r3.json").read_text())
    assert {s["status"] for s in rec3["stages"].values()} == {"reused"}


# what a rerun may change: the wall-clock fields of the train metrics and model card (which the
# evaluate stage's published model card extends)
TIMING_FILES = {
    "train/files/metrics.json",
    "train/files/model/README.md",
    "evaluate/files/model/README.md",
}


def test_two_fresh_runs_give_byte_identical_artefacts(tmp_path: Path):
    """Same config and seed in two processes (tokenizers' and Python's hashes seeded
    differently) on two roots: every artefact is byte-identical, the tiny generator's learnt
    vocabulary and weights, its scores, the labels, the surrogate's weights and the evaluation
    report (which names models relative to the root) included."""
    hashes = []
    for name in ("a", "b"):
        cmd = _cmd(tmp_path / name, name)
        cmd[cmd.index("--until") + 1] = "evaluate"
        run = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=500)
        assert run.returncode == 0, run.stderr[-3000:]
        hashes.append(
            {k: v for k, v in _part_hashes(tmp_path / name).items() if k not in TIMING_FILES}
        )
    assert {k.split("/")[0] for k in hashes[0]} >= {"generator", "score", "label", "evaluate"}
    assert "evaluate/files/report.md" in hashes[0]
    assert "generator/files/model/model.safetensors" in hashes[0]
    differing = sorted(k for k in hashes[0] if hashes[0][k] != hashes[1].get(k))
    assert not differing and hashes[0].keys() == hashes[1].keys()


#: a quickstart shrunk to minutes, through `score` (two query shards: one is killed)
SMALL = [
    "queries.n_corpus=30",
    "queries.n_shards=2",
    "retrieve.top_k=40",
    "screen.keep=12",
    "select.max_size=4",
    "generator.train_steps=3",
    "generator.n_eval=10",
    "pairs.pairs_per_query=2",
    "pairs.idf_sample=500",
    "run.torch_threads=1",
]


def _small_cmd(root: Path, run_id: str) -> list[str]:
    cmd = _cmd(root, run_id)
    cmd[cmd.index("--until") + 1] = "score"
    i = cmd.index("shard.n_shards=4")
    del cmd[i - 1 : i + 1]  # the corpus in its default shards
    for s in SMALL:
        cmd += ["--set", s]
    return cmd


def test_sigkill_mid_score_then_resume_is_byte_identical_to_a_clean_run(tmp_path: Path):
    """The costly stage, with its score cache: killed while shard 1 waits (shard 0 finished and
    its generative terms cached), the rerun computes only shard 1 and every artefact matches a
    clean run byte for byte."""
    killed_root = tmp_path / "killed"
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
    proc = subprocess.Popen(
        _small_cmd(killed_root, "k1"),
        cwd=REPO,
        start_new_session=True,
        env=_env(CTXSIM_FAULT_FILE=str(fault)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
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

    rerun = subprocess.run(
        _small_cmd(killed_root, "k1"),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    record = json.loads((killed_root / "runs" / "k1.json").read_text())
    assert record["status"] == "completed"
    assert record["stages"]["score"]["shards_computed"] == 1  # shard 0 was reused

    clean_root = tmp_path / "clean"
    clean = subprocess.run(
        _small_cmd(clean_root, "c1"),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert clean.returncode == 0, clean.stderr[-3000:]
    killed, fresh = _part_hashes(killed_root), _part_hashes(clean_root)
    assert any(k.startswith("score/") for k in fresh)
    assert sorted(k for k in fresh if fresh[k] != killed.get(k)) == []
    assert killed.keys() == fresh.keys()


def test_sigkill_mid_train_then_resume_is_byte_identical_to_a_clean_run(tmp_path: Path):
    """Training, with its checkpoints: killed once a checkpoint is complete, the rerun resumes
    from it (the train stats say so) and every artefact matches a clean run byte for byte (the
    wall-clock fields of the metrics and model card aside)."""
    sets = ["train.max_steps=120", "train.eval_steps=10"]

    def cmd(root: Path, run_id: str) -> list[str]:
        c = _small_cmd(root, run_id)
        c[c.index("--until") + 1] = "train"
        for s in sets:
            c += ["--set", s]
        return c

    killed_root = tmp_path / "killed"
    proc = subprocess.Popen(
        cmd(killed_root, "k1"),
        cwd=REPO,
        start_new_session=True,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
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

    rerun = subprocess.run(
        cmd(killed_root, "k1"), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    (manifest,) = killed_root.glob("train/*/_MANIFEST.json")
    assert json.loads(manifest.read_text())["stats"]["resumed"] is True

    clean_root = tmp_path / "clean"
    clean = subprocess.run(
        cmd(clean_root, "c1"), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert clean.returncode == 0, clean.stderr[-3000:]
    killed, fresh = (
        {k: v for k, v in _part_hashes(root).items() if k not in TIMING_FILES}
        for root in (killed_root, clean_root)
    )
    assert "train/files/model/model.safetensors" in fresh
    assert sorted(k for k in fresh if fresh[k] != killed.get(k)) == []
    assert killed.keys() == fresh.keys()
