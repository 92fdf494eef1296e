"""Shard leases (store/lease.py) and their use in store.stage.compute_shard, with real processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.lease import Lease, LeaseTimeout, is_stale, lease_path, shard_lease
from ctxsim.store.stage import (
    RunParams,
    Stage,
    StageParams,
    compute_shard,
    publish_stage,
    resolve_stage,
)
from tests.forking import exit_when_done

N_SHARDS = 12


class SlowParams(StageParams):
    log: str


class SlowStage(Stage):
    """Logs every computation it starts (O_APPEND: one line per write, atomic) and sleeps."""

    name = "leasetest"
    version = "1"
    Params = SlowParams

    def num_shards(self, ctx: Any) -> int:
        return N_SHARDS

    def run_shard(self, ctx: Any, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        fd = os.open(ctx.params.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{os.getpid()} {shard}\n".encode())
        os.close(fd)
        time.sleep(float(os.environ.get("LEASETEST_SLEEP", "0.05")))
        return pa.table({"x": pa.array([shard * 10 + i for i in range(5)], pa.int64())}), {"n": 5}


def _plan(root: Path, log: Path):
    stage = SlowStage()
    return resolve_stage(
        stage, SlowParams(log=str(log)), RunParams(root=str(root)), ArtefactStore(root), {}
    )


def _worker(root: str, log: str, seed: int) -> None:
    plan = _plan(Path(root), Path(log))
    order = list(range(N_SHARDS))
    random.Random(seed).shuffle(order)
    for s in order:
        compute_shard(plan, s)


def test_lease_is_exclusive_and_released(tmp_path: Path) -> None:
    a, b = Lease(tmp_path / "x.lease", ttl=30), Lease(tmp_path / "x.lease", ttl=30)
    assert a.try_acquire()
    assert not b.try_acquire()
    assert not b.acquire(timeout=0.3, poll=0.05)
    assert b.holder()["owner"] == a.owner
    a.release()
    assert not (tmp_path / "x.lease").exists()
    assert b.try_acquire()
    b.release()


def test_expired_foreign_lease_is_taken_over_live_one_is_not(tmp_path: Path) -> None:
    path = tmp_path / "y.lease"
    live = {"owner": "other:1:abc", "host": "other-host", "pid": 1, "expires_at": time.time() + 60}
    path.write_text(json.dumps(live))
    assert not is_stale(live)
    busy = lease_path(tmp_path, "s", "fp", 0)
    busy.parent.mkdir(parents=True)
    busy.write_text(json.dumps(live))
    with pytest.raises(LeaseTimeout, match="other:1:abc"):
        with shard_lease(tmp_path, "s", "fp", 0, timeout=0.3):
            pass
    lease = Lease(path, ttl=30)
    assert not lease.acquire(timeout=0.3, poll=0.05)
    path.write_text(json.dumps({**live, "expires_at": time.time() - 1}))
    assert lease.acquire(timeout=2, poll=0.05)
    assert json.loads(path.read_text())["owner"] == lease.owner
    lease.release()


def test_garbage_lease_file_counts_as_expired(tmp_path: Path) -> None:
    path = tmp_path / "z.lease"
    path.write_bytes(b"\x00{half")
    lease = Lease(path, ttl=30)
    assert lease.acquire(timeout=2, poll=0.05)
    lease.release()


def test_heartbeat_keeps_a_short_lease_alive(tmp_path: Path, monkeypatch) -> None:
    """Driven by the heartbeat's own beats, not by a sleep racing the TTL: wait (generously)
    for three renewals, each at least ttl/3 after the one before, then stop the beats and read
    the record: it was renewed past the moment an unrenewed lease would have gone stale. A
    beat delayed under load arrives late, and the test waits for it; only a lost renewal
    (a stall of 2 TTL-thirds, 2 s) fails it."""
    beats: list[bool] = []
    done = threading.Event()
    renew = Lease.renew

    def counted(self: Lease) -> bool:
        ok = renew(self)
        beats.append(ok)
        if len(beats) == 3 or not ok:
            self._stop.set()  # the heartbeat ends after this beat: the record stays as written
            done.set()
        return ok

    monkeypatch.setattr(Lease, "renew", counted)
    path = tmp_path / "hb.lease"
    a = Lease(path, ttl=3.0)
    assert a.try_acquire()
    first = json.loads(path.read_text())["expires_at"]
    assert done.wait(timeout=120), "the heartbeat never renewed the lease"
    assert beats == [True, True, True]
    info = json.loads(path.read_text())
    assert info["owner"] == a.owner
    assert info["expires_at"] >= first + a.ttl  # alive past its first expiry
    assert not is_stale(info, now=first)  # at that moment a competitor could not take it
    a.release()
    assert not path.exists()


def test_renew_notices_a_lost_lease_and_release_keeps_the_new_owners(tmp_path: Path) -> None:
    path = tmp_path / "lost.lease"
    a = Lease(path, ttl=30)
    assert a.try_acquire()
    a._stop.set()  # silence the heartbeat; we renew by hand
    other = {"owner": "thief:2:def", "host": "elsewhere", "pid": 2, "expires_at": time.time() + 60}
    path.write_text(json.dumps(other))
    assert not a.renew()
    assert a.lost
    a.release()
    assert json.loads(path.read_text())["owner"] == "thief:2:def"


def _hold_forever(path: str, ready: str) -> None:
    lease = Lease(path, ttl=600)
    lease.acquire()
    Path(ready).write_text("1")
    time.sleep(600)


def test_lease_of_a_killed_process_on_this_host_is_taken_at_once(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    path, ready = tmp_path / "k.lease", tmp_path / "ready"
    p = ctx.Process(target=_hold_forever, args=(str(path), str(ready)))
    p.start()
    try:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists()
        assert not Lease(path, ttl=600).try_acquire()  # alive: respected despite a 10-min TTL
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        holder = json.loads(path.read_text())
        assert holder["host"] == socket.gethostname() and holder["pid"] == p.pid
        taker = Lease(path, ttl=600)
        assert taker.acquire(timeout=3, poll=0.05)
        taker.release()
    finally:
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)


def test_concurrent_workers_compute_every_shard_exactly_once(tmp_path: Path) -> None:
    root, log = tmp_path / "root", tmp_path / "computed.log"
    ctx = mp.get_context("fork")
    procs = [
        ctx.Process(target=exit_when_done, args=(_worker, str(root), str(log), seed))
        for seed in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = [ln.split() for ln in log.read_text().splitlines()]
    shards = sorted(int(s) for _, s in lines)
    assert shards == list(range(N_SHARDS)), "a shard was computed twice or never"
    assert len({pid for pid, _ in lines}) >= 2, "expected the work to be spread over processes"
    plan = _plan(root, log)
    infos = [compute_shard(plan, s) for s in range(N_SHARDS)]
    assert all(i["reused"] for i in infos)
    art = publish_stage(plan, N_SHARDS, infos)
    assert art.num_rows == 5 * N_SHARDS
    assert sorted(art.read_table()["x"].to_pylist()) == sorted(
        s * 10 + i for s in range(N_SHARDS) for i in range(5)
    )
    assert not list((root / "_leases").rglob("*.lease")), "a lease was left behind"


def _compute_one(root: str, log: str, shard: int) -> None:
    os.environ["LEASETEST_SLEEP"] = "600"
    compute_shard(_plan(Path(root), Path(log)), shard)


def test_shard_of_a_killed_worker_is_recomputed_by_the_next(tmp_path: Path) -> None:
    root, log = tmp_path / "root", tmp_path / "computed.log"
    ctx = mp.get_context("fork")
    p = ctx.Process(target=exit_when_done, args=(_compute_one, str(root), str(log), 3))
    p.start()
    lease = lease_path(ArtefactStore(root).root, "leasetest", _plan(root, log).fingerprint, 3)
    deadline = time.monotonic() + 20
    while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lease.exists(), "the worker should hold the shard's lease while computing"
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    info = compute_shard(_plan(root, log), 3)
    assert info["reused"] is False and info["rows"] == 5
    assert [ln.split()[1] for ln in log.read_text().splitlines()] == ["3", "3"]
    assert not lease.exists()
