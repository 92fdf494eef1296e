"""A Prefect server on PostgreSQL (started here on loopback in a temporary directory), behind
basic auth, runs one deployment through a worker — what docker-compose.yml does, without Docker.

`make ci-deps` (part of `make test`) installs Debian's postgresql when it is missing.
"""

from __future__ import annotations

import base64
import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ctxsim.flows import ops
from tests.ops_support import (
    OPS_CONFIG,
    cli,
    client_env,
    free_port,
    run_deployment,
    server_extra_env,
    stop_group,
    wait_flow_run,
)

pytestmark = pytest.mark.integration


def pg_bindir() -> Path | None:
    """Debian keeps the server binaries in /usr/lib/postgresql/<v>/bin, off PATH."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: p.split("/")[4])
    return Path(cands[-1]).parent if cands else None


BINDIR = pg_bindir()


def _as_pg_user(argv: list[str]) -> list[str]:
    """initdb/postgres refuse to run as root: run them as the `postgres` system user then."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory):
    if BINDIR is None:
        pytest.skip("PostgreSQL is not installed (make ci-deps installs Debian's postgresql)")
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a `postgres` user to run the server as")
    # Not under pytest's basetemp: that is private (0700) to us, and the server may run as
    # the `postgres` user, which must own its directories.
    base = Path(tempfile.mkdtemp(prefix="ctxsim-pg-"))
    data, sock = base / "data", base / "sock"
    password = secrets.token_hex(12)
    (base / "pw").write_text(password + "\n")
    sock.mkdir()
    if os.geteuid() == 0:
        os.chmod(base, 0o755)
        for p in (base, sock, base / "pw"):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    port = free_port()
    pg_ctl = [str(BINDIR / "pg_ctl"), "-D", str(data)]
    try:
        _run(
            _as_pg_user(
                [
                    str(BINDIR / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "prefect",
                    "--auth=scram-sha-256",
                    f"--pwfile={base / 'pw'}",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ]
            )
        )
        opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off"
        _run(
            _as_pg_user(
                [*pg_ctl, "-o", opts, "-l", str(base / "pg.log"), "-w", "-t", "120", "start"]
            ),
            log=base / "pg.log",
        )
        env = {**os.environ, "PGPASSWORD": password}
        _run(
            [
                str(BINDIR / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "prefect",
                "prefect",
            ],
            env=env,
        )
        yield {
            "port": port,
            "password": password,
            "url": f"postgresql+asyncpg://prefect:{password}@127.0.0.1:{port}/prefect",
        }
    finally:
        subprocess.run(
            _as_pg_user([*pg_ctl, "-m", "fast", "-w", "stop"]), capture_output=True, timeout=120
        )
        shutil.rmtree(base, ignore_errors=True)


def _run(argv: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> None:
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    if res.returncode != 0:
        extra = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
        raise AssertionError(f"{' '.join(argv)} failed:\n{res.stdout}\n{res.stderr}\n{extra}")


def _psql(pg: dict, sql: str) -> str:
    res = subprocess.run(
        [
            str(BINDIR / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(pg["port"]),
            "-U",
            "prefect",
            "-d",
            "prefect",
            "-tAc",
            sql,
        ],
        env={**os.environ, "PGPASSWORD": pg["password"]},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return res.stdout.strip()


def test_deployment_runs_on_a_postgres_backed_server_behind_auth(postgres, tmp_path) -> None:
    home = tmp_path / "home"
    auth = f"admin:{secrets.token_hex(8)}"
    extra = {**server_extra_env(), "PREFECT_SERVER_API_AUTH_STRING": auth}
    info = ops.start_server(
        "127.0.0.1",
        free_port(),
        home / "server",
        postgres["url"],
        ui=False,
        timeout=420,
        extra_env=extra,
    )
    worker = None
    try:
        assert info.database == "postgresql"
        assert not (home / "server" / "prefect.db").exists()
        # basic auth: health is open, everything else needs the credentials
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(
                urllib.request.Request(
                    info.api_url + "/flows/filter",
                    data=b"{}",
                    method="POST",
                    headers={"Content-Type": "application/json"},
                ),
                timeout=30,
            )
        assert err.value.code == 401
        token = base64.b64encode(auth.encode()).decode()
        ok = urllib.request.urlopen(
            urllib.request.Request(
                info.api_url + "/flows/filter",
                data=b"{}",
                method="POST",
                headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
            ),
            timeout=30,
        )
        assert ok.status == 200

        env = client_env(info.api_url, home, PREFECT_API_AUTH_STRING=auth)
        cli(["prefect", "work-pool", "create", "ctxsim", "--type", "process"], env)
        cli(["prefect", "--no-prompt", "deploy", "--name", "shard"], env, timeout=600)
        worker = ops.start_workers(ops.worker_specs("ctxsim", n_cpu=1), tmp_path / "logs", env)[0]
        root = tmp_path / "artefacts"
        run = run_deployment(
            "ctxsim-stage/shard", {"config": OPS_CONFIG, "root": str(root), "run_id": "pg"}, env
        )
        state = wait_flow_run(info.api_url, run, auth=auth, logs=tmp_path / "logs")
        assert state == "COMPLETED"
        rec = json.loads((root / "runs" / "pg.json").read_text())
        assert rec["status"] == "completed" and list(rec["stages"]) == ["shard"]
        # the run lives in PostgreSQL, not in a SQLite file
        assert _psql(postgres, f"select state_type from flow_run where id = '{run}'") == "COMPLETED"
        assert int(_psql(postgres, "select count(*) from deployment")) == 1
    finally:
        if worker is not None:
            stop_group(worker)
        with contextlib.suppress(Exception):
            ops.stop_process(info.pid)
