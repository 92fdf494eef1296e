"""Content-addressed artefact store: the source of truth for resume and inspection.

Layout under ROOT::

    <stage>/<fingerprint>/part-00000.parquet ... + files/ + _MANIFEST.json   (published, immutable)
    <stage>/.partial-<fingerprint>/part-00003.parquet + _shard-00003.json    (in progress)
    runs/<run-id>.json                                                       (run records)

A stage's output becomes visible only by one ``os.rename`` of the finished partial directory, so a
reader never sees half an artefact. Each shard is itself published by rename together with its
done-marker (which records the part's sha256), so a rerun after a crash skips finished shards and
recomputes any whose bytes no longer match.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# content hashes live in models/ (models/encoders.py names a model by them); re-exported here
from ctxsim.models.digests import content_digest as content_digest
from ctxsim.models.digests import sha256_file as sha256_file
from ctxsim.store.atomic import atomic_path, write_json_atomic
from ctxsim.store.logs import get_logger

MANIFEST = "_MANIFEST.json"
#: the folder of a root's caches (``ROOT/_cache``): also one of the markers of an artefact root
CACHE_DIR = "_cache"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


class StoreError(RuntimeError):
    """An artefact is missing, corrupted or addressed by an unsafe name."""


def safe_name(value: str, what: str) -> str:
    """Reject names that could escape the artefact root (``../x``, ``/abs``, ``a/b``)."""
    if not _SAFE_NAME.match(value) or ".." in value:
        raise StoreError(f"unsafe {what} {value!r}: use letters, digits, '_', '-', '.' only")
    return value


def fingerprint(payload: dict[str, Any]) -> str:
    """Stable 16-hex-digit hash of a JSON-serialisable payload (sorted keys)."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _warn(msg: str, *args: Any) -> None:
    """A warning through the project's logger (Prefect's inside a flow)."""
    get_logger("ctxsim.store").warning(msg, *args)


def part_name(shard: int) -> str:
    return f"part-{shard:05d}.parquet"


@dataclass
class Artefact:
    """A published, immutable stage output."""

    stage: str
    fingerprint: str
    path: Path
    manifest: dict[str, Any] = field(repr=False)
    #: set by :meth:`ArtefactStore.publish` when another writer published it first: a run that
    #: computed shards but lost the race says "reused (computed by another run)", not "published"
    by_other: bool = field(default=False, repr=False, compare=False)

    @property
    def parts(self) -> list[Path]:
        return [self.path / p["file"] for p in self.manifest.get("parts", [])]

    @property
    def files_dir(self) -> Path:
        """Non-tabular outputs (models, vectorisers, plots) live here."""
        return self.path / "files"

    @property
    def num_rows(self) -> int:
        return int(sum(p["rows"] for p in self.manifest.get("parts", [])))

    @property
    def stats(self) -> dict[str, Any]:
        return self.manifest.get("stats", {})

    @property
    def cpu_seconds(self) -> float | None:
        """The CPU-seconds its computation took (every shard), as its manifest records them;
        None for an artefact published before they were recorded."""
        value = self.stats.get("cpu_seconds")
        return float(value) if value is not None else None

    def read_table(self, columns: list[str] | None = None) -> pa.Table:
        parts = self.parts
        if not parts:
            return pa.table({})
        return pa.concat_tables([pq.read_table(p, columns=columns) for p in parts])

    def read_part(self, shard: int, columns: list[str] | None = None) -> pa.Table:
        return pq.read_table(self.path / part_name(shard), columns=columns)


def artefact_at(path: str | Path, verify: bool = False) -> Artefact | None:
    """The published artefact whose folder is ``path`` (``ROOT/<stage>/<fingerprint>``, as a run
    record names it), read through its store (``verify``: check its parts too); None when none
    is published there."""
    path = Path(path).expanduser()
    return ArtefactStore(path.parent.parent, create=False).get(
        path.parent.name, path.name, verify=verify
    )


def total_cpu_seconds(paths: Iterable[str | Path]) -> float:
    """The CPU-seconds of the artefacts at ``paths`` together (what a run's stages cost, from
    their manifests); one not published there, or not recording them, counts 0."""
    total = 0.0
    for path in paths:
        art = artefact_at(path)
        total += (art.cpu_seconds if art is not None else None) or 0.0
    return total


def _by_other(art: Artefact) -> Artefact:
    """``art``, marked as published by another writer (see :attr:`Artefact.by_other`)."""
    art.by_other = True
    return art


class ArtefactStore:
    """Publishes and finds artefacts under one root directory."""

    def __init__(self, root: str | Path, create: bool = True):
        """``create=False`` for read-only use (``ctxsim runs``, ``inspect``): makes no folder."""
        self.root = Path(root).expanduser().resolve()
        if create:
            self.root.mkdir(parents=True, exist_ok=True)

    # ---- addressing -------------------------------------------------------------------------
    def cache_dir(self, *parts: str, create: bool = True) -> Path:
        """``ROOT/_cache/<parts...>``, created unless ``create=False`` (a cache that makes its
        folder on its first write): the one place caches that outlive an artefact live (a
        stage's checkpoints by fingerprint, the score and sample caches, screen's context cache,
        explain's inputs)."""
        d = self.root.joinpath(CACHE_DIR, *parts)
        if create:
            d.mkdir(parents=True, exist_ok=True)
        return d

    def final_dir(self, stage: str, fp: str) -> Path:
        return self.root / safe_name(stage, "stage name") / safe_name(fp, "fingerprint")

    def partial_dir(self, stage: str, fp: str) -> Path:
        return (
            self.root / safe_name(stage, "stage name") / f".partial-{safe_name(fp, 'fingerprint')}"
        )

    # ---- reading ----------------------------------------------------------------------------
    def get(self, stage: str, fp: str, verify: bool = True) -> Artefact | None:
        """The published artefact, or None. A corrupted one is moved aside and reported as None."""
        path = self.final_dir(stage, fp)
        mpath = path / MANIFEST
        if not mpath.exists():
            return None
        try:
            manifest = json.loads(mpath.read_text())
        except json.JSONDecodeError:
            self._quarantine(path, "unreadable manifest")
            return None
        if verify:
            problem = self._verify(path, manifest)
            if problem:
                self._quarantine(path, problem)
                return None
        return Artefact(stage, fp, path, manifest)

    def require(self, stage: str, fp: str) -> Artefact:
        art = self.get(stage, fp)
        if art is None:
            raise StoreError(f"artefact {stage}/{fp} is missing under {self.root}")
        return art

    def latest(self, stage: str) -> Artefact | None:
        """Most recently published artefact of a stage (for `inspect` without a run id)."""
        sdir = self.root / safe_name(stage, "stage name")
        if not sdir.is_dir():
            return None
        found = [
            d for d in sdir.iterdir() if (d / MANIFEST).exists() and not d.name.startswith(".")
        ]
        if not found:
            return None
        newest = max(found, key=lambda d: (d / MANIFEST).stat().st_mtime)
        return self.get(stage, newest.name, verify=False)

    def _verify(self, path: Path, manifest: dict[str, Any]) -> str | None:
        for p in manifest.get("parts", []) + manifest.get("files", []):
            f = path / p["file"]
            if not f.exists():
                return f"missing {p['file']}"
            if f.stat().st_size != p["bytes"] or sha256_file(f) != p["sha256"]:
                return f"checksum mismatch in {p['file']}"
        return None

    def _quarantine(self, path: Path, why: str) -> None:
        dest = path.with_name(f".corrupt-{path.name}-{int(time.time())}-{uuid.uuid4().hex[:6]}")
        try:
            os.rename(path, dest)
            (dest / "_WHY").write_text(why + "\n")
        except OSError as e:
            _warn("artefact %s is corrupt (%s) but could not be moved aside: %s", path, why, e)
            return
        _warn("artefact %s is corrupt (%s): moved to %s; it will be recomputed", path, why, dest)

    # ---- writing ----------------------------------------------------------------------------
    def open_partial(self, stage: str, fp: str) -> Path:
        pdir = self.partial_dir(stage, fp)
        (pdir / "files").mkdir(parents=True, exist_ok=True)
        return pdir

    def remove_empty_partial(self, stage: str, fp: str) -> None:
        """Drop ``.partial-<fp>`` once the artefact is published, if it holds nothing (a run
        that reused another run's work opened it and wrote no shard)."""
        pdir = self.partial_dir(stage, fp)
        for d in (pdir / "files", pdir):
            try:
                d.rmdir()  # only ever removes an empty directory
            except OSError:
                return

    def shard_done(self, stage: str, fp: str, shard: int) -> dict[str, Any] | None:
        """Done-marker of a finished shard whose part still matches its checksum, else None."""
        return self._checked_marker(self.partial_dir(stage, fp), shard)

    @staticmethod
    def _checked_marker(pdir: Path, shard: int) -> dict[str, Any] | None:
        marker = pdir / f"_shard-{shard:05d}.json"
        try:
            info = json.loads(marker.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        f = pdir / info["file"]
        try:
            if f.stat().st_size == info["bytes"] and sha256_file(f) == info["sha256"]:
                return info
        except FileNotFoundError:
            return None
        marker.unlink(missing_ok=True)
        _warn("finished part %s no longer matches its checksum: it will be recomputed", f)
        return None

    def write_shard(
        self,
        stage: str,
        fp: str,
        shard: int,
        table: pa.Table,
        stats: dict[str, Any],
        seconds: float,
    ) -> dict[str, Any]:
        """Write one shard's part and then its done-marker, each by atomic rename."""
        pdir = self.open_partial(stage, fp)
        name = part_name(shard)
        with atomic_path(pdir / name) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        info = {
            "shard": shard,
            "file": name,
            "rows": table.num_rows,
            "bytes": (pdir / name).stat().st_size,
            "sha256": sha256_file(pdir / name),
            "seconds": round(seconds, 4),
            "stats": stats,
            "schema": table.schema.to_string(show_schema_metadata=False),
            # which process computed it: on a cluster, the host and pid of the worker
            "worker": f"{socket.gethostname()}:{os.getpid()}",
        }
        write_json_atomic(pdir / f"_shard-{shard:05d}.json", info)
        return info

    def publish(
        self, stage: str, fp: str, n_shards: int, manifest_extra: dict[str, Any]
    ) -> Artefact:
        """Turn a partial directory whose shards are all done into a published artefact."""
        final = self.final_dir(stage, fp)
        existing = self.get(stage, fp)
        if existing is not None:  # another writer won the race: theirs is equivalent
            return _by_other(existing)
        pdir = self.partial_dir(stage, fp)
        # Cheap check (markers only) before claiming; parts are verified once, after the claim.
        for shard in range(n_shards):
            if not (pdir / f"_shard-{shard:05d}.json").exists():
                won = self._await_concurrent_publish(stage, fp)
                if won is not None:
                    return _by_other(won)
                raise StoreError(f"{stage}/{fp}: shard {shard} is not finished, cannot publish")
        # Claim the partial directory by renaming it to a private name before reading anything
        # else from it: a concurrent publisher then either wins the rename or finds it gone,
        # and nobody lists a directory that is being renamed away.
        staging = pdir.with_name(f".publish-{fp}-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(pdir, staging)
        except FileNotFoundError:
            won = self._await_concurrent_publish(stage, fp)
            if won is None:
                raise StoreError(
                    f"{stage}/{fp}: partial directory vanished during publish"
                ) from None
            return _by_other(won)
        parts = []
        for shard in range(n_shards):
            info = self._checked_marker(staging, shard)
            if info is None:  # changed between the check and the claim: give it back
                os.rename(staging, pdir)
                raise StoreError(f"{stage}/{fp}: shard {shard} is not finished, cannot publish")
            parts.append({k: info[k] for k in ("file", "rows", "bytes", "sha256", "shard")})
            parts[-1]["worker"] = info.get("worker")
        files = []
        for f in sorted((staging / "files").rglob("*")):
            if f.is_file():
                files.append(
                    {
                        "file": str(f.relative_to(staging)),
                        "bytes": f.stat().st_size,
                        "sha256": sha256_file(f),
                    }
                )
        schema = None
        if parts:
            schema = pq.read_schema(staging / parts[0]["file"]).to_string(
                show_schema_metadata=False
            )
        manifest = {
            "stage": stage,
            "fingerprint": fp,
            "parts": parts,
            "files": files,
            "schema": schema,
            "num_rows": sum(p["rows"] for p in parts),
            "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": socket.gethostname(),
            **manifest_extra,
        }
        for marker in staging.glob("_shard-*.json"):
            marker.unlink()
        write_json_atomic(staging / MANIFEST, manifest)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staging, final)
        except OSError:
            # The final directory exists already (a concurrent run published first): keep theirs.
            shutil.rmtree(staging, ignore_errors=True)
            won = self.get(stage, fp)
            if won is None:
                raise StoreError(
                    f"{stage}/{fp}: publish lost a race and the winner is invalid"
                ) from None
            return _by_other(won)
        return Artefact(stage, fp, final, manifest)

    def _await_concurrent_publish(
        self, stage: str, fp: str, timeout: float = 60.0
    ) -> Artefact | None:
        """If another writer is mid-publish of the same artefact, wait for its result."""
        sdir = self.root / stage
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            won = self.get(stage, fp)
            if won is not None:
                return won
            if not any(sdir.glob(f".publish-{fp}-*")):
                return self.get(stage, fp)
            time.sleep(0.05)
        return None

    # ---- run records ------------------------------------------------------------------------
    def run_path(self, run_id: str) -> Path:
        return self.root / "runs" / f"{safe_name(run_id, 'run id')}.json"

    def write_run(self, run_id: str, record: dict[str, Any]) -> None:
        path = self.run_path(run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, record)

    def read_run(self, run_id: str) -> dict[str, Any]:
        path = self.run_path(run_id)
        if not path.exists():
            raise StoreError(f"no run {run_id!r} under {self.root / 'runs'}")
        try:
            return json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise StoreError(f"run record {path} is unreadable ({e})") from None

    def list_runs(self) -> list[dict[str, Any]]:
        rdir = self.root / "runs"
        if not rdir.is_dir():
            return []
        runs = []
        for p in rdir.glob("*.json"):
            try:
                record = json.loads(p.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                _warn("run record %s is unreadable (%s): skipped", p, e)
                continue
            if not isinstance(record, dict):
                _warn("run record %s is not a JSON object: skipped", p)
                continue
            runs.append(record)
        return sorted(runs, key=lambda r: str(r.get("started_at", "")))
