"""Shard leases: two workers sharing one artefact root never compute the same shard at once.

A lease is a small JSON file created with ``O_CREAT | O_EXCL`` (atomic on local filesystems and
NFSv3+), holding the owner (host, pid, random token) and an expiry time. The holder renews it from
a heartbeat thread every ``ttl / 3`` seconds; a lease is *stale* when its expiry has passed (the
holder or its machine was lost) or, on the same host, when its process no longer exists (SIGKILL).
A stale lease is taken over under a short-lived takeover lock, so two waiters cannot both steal it.

Why not ``fcntl.flock``: advisory locks are not reliable across machines on NFS/CIFS and die
silently with the mount; an expiring file lease works on any shared POSIX path and says who holds
it. The guarantee is "not at once" while clocks agree to within the TTL; and because shard
outputs are deterministic and published by atomic rename, a lost race only ever wastes work,
never corrupts an artefact.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxsim.store.atomic import write_bytes_atomic
from ctxsim.store.errors import InputError


def default_ttl() -> float:
    """Lease lifetime in seconds (``CTXSIM_LEASE_TTL``, default 60): how long a lost worker's
    shard stays blocked before another worker takes it over."""
    text = os.environ.get("CTXSIM_LEASE_TTL", "60")
    try:
        ttl = float(text)
    except ValueError:
        raise InputError(f"CTXSIM_LEASE_TTL={text!r}: expected seconds, e.g. 60") from None
    if not ttl > 0:  # NaN too
        raise InputError(f"CTXSIM_LEASE_TTL={text!r}: must be > 0 seconds")
    return ttl


class LeaseTimeout(TimeoutError):
    """The lease stayed held by a live owner for longer than the caller would wait."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        # Half-written by a holder that died between create and write: treat as expired.
        return {"owner": "?", "host": "?", "pid": -1, "expires_at": 0.0}


def is_stale(info: dict[str, Any], now: float | None = None) -> bool:
    """Expired, or held by a dead process on this very host."""
    now = time.time() if now is None else now
    if float(info.get("expires_at", 0.0)) < now:
        return True
    return info.get("host") == socket.gethostname() and not _pid_alive(int(info.get("pid", -1)))


class Lease:
    """An expiring, renewable exclusive lease on one file path."""

    def __init__(self, path: str | Path, ttl: float | None = None):
        ttl = default_ttl() if ttl is None else ttl
        if ttl <= 0:
            raise ValueError(f"lease ttl must be > 0 seconds, got {ttl}")
        self.path = Path(path)
        self.ttl = float(ttl)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.held = False
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- the file ---------------------------------------------------------------------------
    def _payload(self) -> bytes:
        now = time.time()
        info = {
            "owner": self.owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "acquired_at": now,
            "expires_at": now + self.ttl,
            "ttl": self.ttl,
        }
        return json.dumps(info).encode()

    def holder(self) -> dict[str, Any] | None:
        """The current lease record on disk (anyone's), or None when free."""
        return _read(self.path)

    def try_acquire(self) -> bool:
        """One attempt: create the lease, or take it over if it is stale. Never blocks."""
        if self.held:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._create():
            return True
        info = _read(self.path)
        if info is None:  # released between our create and read: try once more
            return self._create()
        if not is_stale(info):
            return False
        return self._take_over(info)

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, self._payload())
            os.fsync(fd)
        finally:
            os.close(fd)
        self.held, self.lost = True, False
        self._start_heartbeat()
        return True

    def _take_over(self, seen: dict[str, Any]) -> bool:
        """Remove a stale lease and create ours, under a takeover lock (one thief at a time)."""
        lock = self.path.with_name(self.path.name + ".takeover")
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - lock.stat().st_mtime > self.ttl:  # the thief itself died
                    lock.unlink()
            return False
        os.close(fd)
        try:
            current = _read(self.path)
            if current is not None:
                if current.get("owner") != seen.get("owner") or not is_stale(current):
                    return False  # renewed or replaced meanwhile: not ours to take
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
            return self._create()
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()

    def acquire(self, timeout: float | None = None, poll: float = 0.2) -> bool:
        """Block until held (True), or until ``timeout`` seconds passed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.try_acquire():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(poll)
        return True

    def renew(self) -> bool:
        """Push the expiry forward; False (and ``lost``) if someone else holds it now."""
        if not self.held:
            return False
        info = _read(self.path)
        if info is None or info.get("owner") != self.owner or info["expires_at"] < time.time():
            self.lost = True
            return False
        write_bytes_atomic(self.path, self._payload())
        return True

    def release(self) -> None:
        """Stop the heartbeat and remove the lease if it is still ours."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
        if self.held:
            info = _read(self.path)
            if info is not None and info.get("owner") == self.owner:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
        self.held = False

    # ---- heartbeat --------------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"lease:{self.path.name}", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if not self.renew():
                    return
            except OSError:  # shared filesystem hiccup: try again next beat
                continue

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lease_path(root: str | Path, stage: str, fp: str, shard: int) -> Path:
    """Where the lease of one shard lives: outside the partial directory, so publishing (which
    renames that directory) never carries a lease file into an artefact."""
    return Path(root) / "_leases" / stage / fp / f"shard-{shard:05d}.lease"


@contextlib.contextmanager
def shard_lease(
    root: str | Path,
    stage: str,
    fp: str,
    shard: int,
    ttl: float | None = None,
    timeout: float | None = None,
) -> Iterator[Lease]:
    """Hold the lease of one shard for the duration of the block (waiting while it is busy)."""
    lease = Lease(lease_path(root, stage, fp, shard), ttl)
    if not lease.acquire(timeout=timeout):
        holder = lease.holder() or {}
        raise LeaseTimeout(
            f"{stage}/{fp} shard {shard}: still leased by {holder.get('owner', '?')} after "
            f"{timeout}s ({lease.path})"
        )
    try:
        yield lease
    finally:
        lease.release()
