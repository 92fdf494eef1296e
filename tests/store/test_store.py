"""Artefact store: atomic publish, checksums, races, unsafe names."""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
from pathlib import Path

import pyarrow as pa
import pytest

from ctxsim.store.artefacts import MANIFEST, ArtefactStore, StoreError, fingerprint
from tests.forking import exit_when_done


def _table(n: int, offset: int = 0) -> pa.Table:
    return pa.table({"x": list(range(offset, offset + n)), "y": [f"r{i}" for i in range(n)]})


def _publish(store: ArtefactStore, fp: str, n_shards: int = 2) -> None:
    for s in range(n_shards):
        store.write_shard("demo", fp, s, _table(3, 10 * s), {"rows": 3}, 0.0)
    store.publish("demo", fp, n_shards, {"stats": {"rows": 3 * n_shards}})


def test_fingerprint_is_order_independent_and_sensitive():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


def test_publish_then_read_back(tmp_path: Path):
    store = ArtefactStore(tmp_path)
    _publish(store, "abc123")
    art = store.get("demo", "abc123")
    assert art is not None and art.num_rows == 6
    assert art.read_table().column("x").to_pylist() == [0, 1, 2, 10, 11, 12]
    assert not store.partial_dir("demo", "abc123").exists()
    manifest = json.loads((art.path / MANIFEST).read_text())
    assert [p["rows"] for p in manifest["parts"]] == [3, 3]
    assert all(len(p["sha256"]) == 64 for p in manifest["parts"])


def test_publish_refuses_unfinished_shards(tmp_path: Path):
    store = ArtefactStore(tmp_path)
    store.write_shard("demo", "fp1", 0, _table(2), {}, 0.0)
    with pytest.raises(StoreError, match="shard 1 is not finished"):
        store.publish("demo", "fp1", 2, {})
    assert store.get("demo", "fp1") is None


def test_corrupted_part_is_detected_and_quarantined(tmp_path: Path):
    store = ArtefactStore(tmp_path)
    _publish(store, "fpc")
    part = store.final_dir("demo", "fpc") / "part-00001.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    assert store.get("demo", "fpc") is None
    assert not store.final_dir("demo", "fpc").exists()
    assert any(p.name.startswith(".corrupt-fpc") for p in (tmp_path / "demo").iterdir())


def test_truncated_shard_is_not_trusted_on_resume(tmp_path: Path):
    store = ArtefactStore(tmp_path)
    store.write_shard("demo", "fpt", 0, _table(5), {}, 0.0)
    part = store.partial_dir("demo", "fpt") / "part-00000.parquet"
    part.write_bytes(part.read_bytes()[:20])
    assert store.shard_done("demo", "fpt", 0) is None


@pytest.mark.parametrize("bad", ["../evil", "/abs", "a/b", "..", ""])
def test_unsafe_names_cannot_escape_root(tmp_path: Path, bad: str):
    store = ArtefactStore(tmp_path)
    with pytest.raises(StoreError):
        store.final_dir(bad, "fp")
    with pytest.raises(StoreError):
        store.run_path(bad)


def _racer(root: str, barrier: mp.Barrier) -> None:  # type: ignore[valid-type]
    store = ArtefactStore(root)
    for s in range(3):
        store.write_shard("demo", "race", s, _table(4, s), {}, 0.0)
    barrier.wait()
    store.publish("demo", "race", 3, {})


@pytest.mark.parametrize("round_", range(4))
def test_two_writers_publishing_the_same_artefact(tmp_path: Path, round_: int):
    # Many stage files widen the window in which one publisher lists `files/` while the other
    # renames the partial directory away (a race CI once hit); the claim-first publish closes it.
    files = ArtefactStore(tmp_path).open_partial("demo", "race") / "files"
    for k in range(300):
        (files / f"f{k}.bin").write_bytes(b"x")
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=exit_when_done, args=(_racer, str(tmp_path), barrier)) for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    art = ArtefactStore(tmp_path).get("demo", "race")
    assert art is not None and art.num_rows == 12
    assert len(art.manifest["files"]) == 300
    leftovers = [p.name for p in (tmp_path / "demo").iterdir() if p.name != "race"]
    assert leftovers == []


def test_run_records_round_trip(tmp_path: Path):
    store = ArtefactStore(tmp_path)
    store.write_run("r1", {"run_id": "r1", "started_at": "1"})
    store.write_run("r2", {"run_id": "r2", "started_at": "2"})
    assert [r["run_id"] for r in store.list_runs()] == ["r1", "r2"]
    with pytest.raises(StoreError, match="no run"):
        store.read_run("nope")


def _corrupt_part(store: ArtefactStore, fp: str) -> Path:
    part = store.final_dir("demo", fp) / "part-00001.parquet"
    part.write_bytes(part.read_bytes()[:-7])  # truncated: "Unexpected end of stream" on read
    return part


def test_quarantine_logs_the_part_and_where_it_went(tmp_path: Path, caplog):
    store = ArtefactStore(tmp_path)
    _publish(store, "fpq")
    _corrupt_part(store, "fpq")
    with caplog.at_level(logging.WARNING):
        assert store.get("demo", "fpq") is None
    (moved,) = [p for p in (tmp_path / "demo").iterdir() if p.name.startswith(".corrupt-fpq")]
    (msg,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "part-00001.parquet" in msg and str(moved) in msg


@pytest.mark.parametrize("by_run", [False, True])
def test_inspect_reports_a_corrupt_part_in_one_line(tmp_path: Path, by_run: bool):
    """`ctxsim inspect` names the corrupt part instead of crashing in the parquet reader, and
    moves nothing (the next run quarantines and recomputes)."""
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    store = ArtefactStore(tmp_path)
    _publish(store, "fpi")
    _corrupt_part(store, "fpi")
    store.write_run("r1", {"run_id": "r1", "stages": {"demo": {"fingerprint": "fpi"}}})
    res = CliRunner().invoke(
        app, ["inspect", "demo", "--root", str(tmp_path)] + (["--run", "r1"] if by_run else [])
    )
    assert res.exit_code != 0 and isinstance(res.exception, SystemExit)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "part-00001.parquet" in lines[0] and "corrupt" in lines[0]
    assert "Traceback" not in res.output
    assert store.final_dir("demo", "fpi").is_dir()  # left in place by a read-only command


def test_runs_skips_a_truncated_run_record_with_a_warning(tmp_path: Path, caplog):
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    store = ArtefactStore(tmp_path)
    record = {"run_id": "good", "status": "done", "started_at": "1", "stages": {}}
    store.write_run("good", record)
    store.write_run("cut", {**record, "run_id": "cut"})
    cut = store.run_path("cut")
    cut.write_bytes(cut.read_bytes()[:25])
    with caplog.at_level(logging.WARNING):
        res = CliRunner().invoke(app, ["runs", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "run good: done" in res.stdout and "cut" not in res.stdout
    assert any(str(cut) in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)


def test_digests_go_to_the_sessions_cache_not_the_home_directory(tmp_path: Path):
    """content_digest wrote ~/.cache/ctxsim/digests.json from every test: tests.conftest points
    it into the session's temporary folder (tests must not share state through home)."""
    import os

    from ctxsim.store.artefacts import content_digest
    from tests.conftest import HOME_DIGESTS

    def stamp() -> tuple[int, int] | None:
        return (
            (HOME_DIGESTS.stat().st_size, HOME_DIGESTS.stat().st_mtime_ns)
            if (HOME_DIGESTS.exists())
            else None
        )

    before = stamp()
    f = tmp_path / "corpus.txt"
    f.write_text("a file no test hashed before")
    digest = content_digest(f)
    assert stamp() == before
    private = Path(os.environ["CTXSIM_DIGEST_CACHE"])
    assert private.resolve() != HOME_DIGESTS.resolve() and Path.home() / ".cache" not in (
        private.resolve().parents
    )
    assert digest in json.loads(private.read_text()).values()
