"""Run records after a crash, concurrent runs, read-only listing.

The orphaned-server drill starts a real `ctxsim run` (ephemeral Prefect server, its own
database under the root), SIGKILLs it mid-stage and checks that the server goes too and that
`ctxsim runs` calls the run "crashed". Whatever it started is killed in ``finally``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxsim.flows.cli import app
from ctxsim.store.artefacts import ArtefactStore
from tests.conftest import REPO, SAMPLE

QUICKSTART = REPO / "configs" / "quickstart.yaml"


def _dead_pid() -> int:
    """A pid that belonged to a process of ours which has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _record(run_id: str, status: str, **extra: object) -> dict:
    stages = {
        name: {
            "fingerprint": f"{i:016x}",
            "status": "completed",
            "rows": 1,
            "shards": 1,
            "shards_computed": 1,
            "seconds": 0.1,
            "path": "x",
        }
        for i, name in enumerate(["shard", "contexts", "queries", "index", "retrieve"])
    }
    return {"run_id": run_id, "status": status, "started_at": run_id, "stages": stages, **extra}


# ---- item 10 -------------------------------------------------------------------------------
def test_runs_lists_stages_in_pipeline_order(tmp_path: Path) -> None:
    ArtefactStore(tmp_path).write_run("a", _record("a", "completed"))  # stored key-sorted
    res = CliRunner().invoke(app, ["runs", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    names = [line.split()[0] for line in res.output.splitlines()[1:]]
    assert names == ["shard", "contexts", "queries", "index", "retrieve"]
    res = CliRunner().invoke(app, ["runs", "--root", str(tmp_path), "--json"])
    assert list(json.loads(res.output)["runs"][0]["stages"]) == names


def test_read_only_commands_create_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no configs/ here: the default root is ./data/artefacts
    res = CliRunner().invoke(app, ["runs"])
    assert res.exit_code == 0 and "no runs under" in res.output
    res = CliRunner().invoke(app, ["inspect", "shard"])
    assert res.exit_code != 0
    res = CliRunner().invoke(app, ["runs", "--root", str(tmp_path / "elsewhere")])
    assert res.exit_code == 0
    assert list(tmp_path.iterdir()) == []


# ---- item 9 --------------------------------------------------------------------------------
def test_a_running_record_whose_process_is_gone_reads_crashed(tmp_path: Path) -> None:
    store = ArtefactStore(tmp_path)
    host = socket.gethostname()
    store.write_run("dead", _record("dead", "running", host=host, pid=_dead_pid()))
    store.write_run("live", _record("live", "running", host=host, pid=os.getpid()))
    store.write_run("old", _record("old", "running"))  # no pid recorded: cannot tell
    res = CliRunner().invoke(app, ["runs", "--root", str(tmp_path), "--json"])
    status = {r["run_id"]: r["status"] for r in json.loads(res.output)["runs"]}
    assert status == {"dead": "crashed", "live": "running", "old": "running"}


def test_run_records_name_their_process(tmp_path: Path) -> None:
    from ctxsim.flows.config import load_config
    from ctxsim.flows.pipeline import execute

    cfg = load_config(QUICKSTART, [f"shard.paths=['{SAMPLE}']"], str(tmp_path))
    record = execute(cfg, until="shard", run_id="r1", use_prefect=False)
    assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()


def test_a_run_that_computed_nothing_says_reused_by_another_run_and_leaves_no_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A second run of the same stage waits on the first one's shard leases; by the time it
    has them, the first run has published. Simulated in order: the other run's whole stage is
    computed and published just as this run starts on its first shard."""
    import ctxsim.flows.pipeline as pipeline
    from ctxsim.flows.config import load_config
    from ctxsim.store.stage import compute_shard, run_stage_locally

    cfg = load_config(QUICKSTART, [f"shard.paths=['{SAMPLE}']"], str(tmp_path))
    other = {"done": False}

    def meanwhile_another_run_publishes(plan, shard):  # noqa: ANN001, ANN202
        if not other["done"]:
            other["done"] = True
            run_stage_locally(plan)  # the concurrent run: computes and publishes it all
        return compute_shard(plan, shard)

    monkeypatch.setattr(pipeline, "compute_shard", meanwhile_another_run_publishes)
    with caplog.at_level(logging.INFO, logger="ctxsim"):
        record = pipeline.execute(cfg, until="shard", run_id="second", use_prefect=False)
    assert other["done"]
    stage = record["stages"]["shard"]
    assert stage["status"] == "reused" and stage["shards_computed"] == 0
    assert stage["computed_by"] == "another run"
    assert any("reused (computed by another run) shard" in r.message for r in caplog.records)
    assert not any("published shard" in r.message for r in caplog.records)
    assert [p.name for p in (tmp_path / "shard").iterdir()] == [stage["fingerprint"]]


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    """Running, not a zombie (a container's init may be slow to reap an orphan)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_for(predicate, limit: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
def test_kill_9_of_a_run_takes_its_ephemeral_server_along_and_the_run_reads_crashed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "art"
    fault = tmp_path / "fault.json"  # the shard stage sleeps: a window to kill the run in
    fault.write_text(json.dumps({"stage": "shard", "shard": 0, "kind": "delay", "seconds": 600}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["CTXSIM_FAULT_FILE"] = str(fault)
    ctxsim = str(Path(sys.executable).with_name("ctxsim"))
    cmd = [ctxsim, "run", "-c", str(QUICKSTART), "--root", str(root), "--run-id", "killed"]
    cmd += ["--set", f"shard.paths=['{SAMPLE}']", "--until", "shard", "-q"]
    run = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path
    )
    servers: list[int] = []
    try:
        record = root / "runs" / "killed.json"
        assert _wait_for(record.exists, 300), "the run never started its flow"
        servers = [
            p for p in _children(run.pid) if b"uvicorn" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]
        assert servers, "no ephemeral Prefect server among the run's children"
        run.send_signal(signal.SIGKILL)
        run.wait()
        assert _wait_for(lambda: not any(_alive(p) for p in servers), 60), (
            "the ephemeral server outlived its run"
        )
        res = CliRunner().invoke(app, ["runs", "--root", str(root), "--json"])
        (rec,) = json.loads(res.output)["runs"]
        assert rec["run_id"] == "killed" and rec["status"] == "crashed"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for p in servers:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
