"""Deployments, schedules, retries and runners against a real Prefect server (SQLite) on loopback.

One server, one `prefect deploy --all` and two `ctxsim worker` CPU workers serve the whole module.
The pipeline runs only the spine stages (tests/ops_config.yaml: shard, contexts, queries).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ctxsim.flows import ops
from ctxsim.tasks import STAGES
from tests.ops_support import (
    BIN,
    OPS_CONFIG,
    REPO,
    SPINE,
    artefact_digests,
    cli,
    client,
    client_env,
    free_port,
    run_deployment,
    server_extra_env,
    start_cli_workers,
    stop_group,
    wait_flow_run,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """`ctxsim server` on a free loopback port (SQLite), stopped by `ctxsim server --stop`."""
    home = tmp_path_factory.mktemp("prefect-sqlite")
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    senv = {**os.environ, **server_extra_env()}
    senv.pop("PREFECT_API_URL", None)
    args = ["--home", str(home / "server")]
    started = cli(
        ["ctxsim", "server", "--no-ui", "--port", str(port), "--timeout", "420", *args],
        senv,
        timeout=480,
    )
    pid = int((home / "server" / "server.pid").read_text().split()[0])
    env = client_env(url, home, CTXSIM_FAULT_FILE=str(home / "fault.json"))
    try:
        yield SimpleNamespace(url=url, env=env, home=home, pid=pid, started=started.stdout)
    finally:
        stopped = cli(["ctxsim", "server", "--stop", *args], senv, check=False)
        if f"stopped server pid {pid}" not in stopped.stdout:
            ops.stop_process(pid)


@pytest.fixture(scope="module")
def deployed(server):
    """`prefect deploy --all` from the repository, two CPU workers, and two runs kicked off:
    a clean nightly run up to `queries`, and a `queries` stage run whose `shard` stage fails
    in its second shard (injected fault)."""
    cli(
        ["prefect", "work-pool", "create", "ctxsim", "--type", "process", "--overwrite"], server.env
    )
    out = cli(["prefect", "--no-prompt", "deploy", "--all"], server.env, timeout=600).stdout
    assert "ctxsim/nightly" in out
    roots = SimpleNamespace(clean=server.home / "clean", faulty=server.home / "faulty")
    (server.home / "fault.json").write_text(
        json.dumps({"stage": "shard", "shard": 1, "root": str(roots.faulty)})
    )
    workers = start_cli_workers(server.env, server.home / "workers", n=2)
    try:
        clean = run_deployment(
            "ctxsim/nightly",
            {
                "config": OPS_CONFIG,
                "root": str(roots.clean),
                "until": "queries",
                "run_id": "clean",
            },
            server.env,
        )
        faulty = run_deployment(
            "ctxsim-stage/queries",
            {
                "config": OPS_CONFIG,
                "root": str(roots.faulty),
                "run_id": "faulty",
            },
            server.env,
        )
        yield SimpleNamespace(roots=roots, clean=clean, faulty=faulty, logs=server.home / "workers")
    finally:
        stop_group(workers)


def test_server_binds_loopback_only_and_says_how_to_stop(server) -> None:
    assert ops.healthy(server.url)
    assert f"healthy at {server.url}" in server.started and "sqlite" in server.started
    assert f"kill {server.pid}" in server.started and "ctxsim server --stop" in server.started
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    addrs = set()
    for table in ("tcp", "tcp6"):  # listening sockets (state 0A) on the API port
        with open(f"/proc/{server.pid}/net/{table}") as f:
            for ln in f.read().splitlines()[1:]:
                local, state = ln.split()[1], ln.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    addrs.add(local.rsplit(":", 1)[0])
    assert addrs == {"0100007F"}, "the API port must be bound to 127.0.0.1 only"


def test_deploy_all_registers_the_pipeline_and_every_stage(server, deployed) -> None:
    with client(server.url) as c:
        deps = c.read_deployments()
        flows = {f.id: f.name for f in c.read_flows()}
    names = {f"{flows[d.flow_id]}/{d.name}" for d in deps}
    assert {"ctxsim/nightly"} | {f"ctxsim-stage/{s}" for s in STAGES} <= names
    for d in deps:
        assert d.work_pool_name == "ctxsim"
        assert d.pull_steps and "set_working_directory" in json.dumps(d.pull_steps)


def test_nightly_cron_creates_scheduled_runs(server, deployed) -> None:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    with client(server.url) as c:
        dep = c.read_deployment_by_name("ctxsim/nightly")
        assert [s.schedule.cron for s in dep.schedules] == ["0 2 * * *"]
        deadline, runs = time.monotonic() + 90, []
        while time.monotonic() < deadline:
            runs = [
                r
                for r in c.read_flow_runs(
                    deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id]))
                )
                if r.state and r.state.type.value == "SCHEDULED" and r.auto_scheduled
            ]
            if runs:
                break
            time.sleep(1)
    assert runs, "the scheduler created no runs for the nightly cron"
    for r in runs:
        t = r.expected_start_time
        assert (t.hour, t.minute, t.second) == (2, 0, 0) and t.utcoffset().total_seconds() == 0


def test_deployed_run_completes_with_the_spine_artefacts(server, deployed) -> None:
    state = wait_flow_run(server.url, deployed.clean, logs=deployed.logs)
    assert state == "COMPLETED"
    rec = json.loads((deployed.roots.clean / "runs" / "clean.json").read_text())
    assert rec["status"] == "completed" and set(rec["stages"]) == set(SPINE)
    assert all(s["status"] == "completed" for s in rec["stages"].values())
    res = cli(
        ["ctxsim", "inspect", "queries", "--root", str(deployed.roots.clean), "--json"], server.env
    )
    info = json.loads(res.stdout)
    assert info["num_rows"] == rec["stages"]["queries"]["rows"] > 0
    assert {c["name"] for c in info["schema"]} >= {"query_id", "text", "sent_id", "origin"}


def test_failed_deployed_run_is_retried_reusing_finished_shards(server, deployed) -> None:
    root = deployed.roots.faulty
    assert wait_flow_run(server.url, deployed.faulty, logs=deployed.logs) == "FAILED"
    rec = json.loads((root / "runs" / "faulty.json").read_text())
    assert rec["status"] == "failed" and "injected fault in shard shard 1" in rec["error"]
    assert rec["stages"] == {}  # nothing published: the first stage failed half-way
    (partial,) = (root / "shard").glob(".partial-*")
    assert (partial / "_shard-00000.json").exists() and not (partial / "_shard-00001.json").exists()
    shard0 = partial / "part-00000.parquet"
    before = (shard0.stat().st_ino, shard0.stat().st_mtime_ns)

    (server.home / "fault.json").unlink()  # the cause is fixed; retry the same flow run
    cli(["prefect", "flow-run", "retry", deployed.faulty], server.env)
    assert wait_flow_run(server.url, deployed.faulty, logs=deployed.logs) == "COMPLETED"
    rec = json.loads((root / "runs" / "faulty.json").read_text())
    assert rec["status"] == "completed" and set(rec["stages"]) == set(SPINE)
    sh = rec["stages"]["shard"]
    assert sh["status"] == "completed" and sh["shards"] == 2 and sh["shards_computed"] == 1
    published = Path(sh["path"]) / "part-00000.parquet"
    assert (published.stat().st_ino, published.stat().st_mtime_ns) == before  # same bytes, moved
    # and the retried result equals the clean run's
    assert wait_flow_run(server.url, deployed.clean) == "COMPLETED"
    assert artefact_digests(root) == artefact_digests(deployed.roots.clean)


def spine_run(env: dict[str, str], root: Path, run_id: str, *sets: str) -> None:
    """`ctxsim run` of the ops config up to `queries` with config overrides."""
    args = ["ctxsim", "run", "--config", OPS_CONFIG, "--root", str(root), "--until", "queries"]
    args += ["--run-id", run_id, "--no-progress"] + [x for kv in sets for x in ("--set", kv)]
    cli(args, env, timeout=600)


@pytest.mark.parametrize("runner", ["dask", "ray"])
def test_dask_and_ray_runs_are_byte_identical_to_sequential(
    server, deployed, runner, tmp_path
) -> None:
    pytest.importorskip(f"prefect_{runner}", reason=f"pip install prefect-{runner}")
    assert wait_flow_run(server.url, deployed.clean) == "COMPLETED"
    root = tmp_path / runner
    spine_run(server.env, root, runner, f"run.task_runner={runner}", "run.max_workers=2")
    rec = json.loads((root / "runs" / f"{runner}.json").read_text())
    assert rec["status"] == "completed"
    assert sum(s["shards_computed"] for s in rec["stages"].values()) >= 4  # really fanned out
    assert artefact_digests(root) == artefact_digests(deployed.roots.clean)


def test_run_on_an_existing_dask_cluster_as_the_several_hosts_recipe(
    server, deployed, tmp_path
) -> None:
    """README "Scaling to several hosts": a `dask scheduler` and two `dask worker` processes
    started by hand (each in its own directory, as on other hosts), then `ctxsim run` pointed at
    the scheduler. The shards run in those workers, and the result equals the sequential run's."""
    pytest.importorskip("prefect_dask", reason="pip install prefect-dask")
    assert wait_flow_run(server.url, deployed.clean) == "COMPLETED"
    port = free_port()
    env = {**server.env, "DASK_DISTRIBUTED__WORKER__DAEMON": "false"}
    procs = [
        subprocess.Popen(
            [
                str(BIN / "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "scheduler.log", "wb"),
            start_new_session=True,
        )
    ]
    try:
        for i in range(2):
            host = tmp_path / f"host{i}"
            host.mkdir()
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "dask"),
                        "worker",
                        f"tcp://127.0.0.1:{port}",
                        "--nthreads",
                        "1",
                        "--no-nanny",
                        "--no-dashboard",
                        "--host",
                        "127.0.0.1",
                    ],
                    cwd=host,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=open(host / "worker.log", "wb"),
                    start_new_session=True,
                )
            )
        from distributed import Client

        with Client(f"tcp://127.0.0.1:{port}", timeout=60) as c:
            c.wait_for_workers(2, timeout=120)
        root = tmp_path / "cluster-root"
        spine_run(
            server.env,
            root,
            "cluster",
            "run.task_runner=dask",
            f"run.runner_address=tcp://127.0.0.1:{port}",
        )
        assert artefact_digests(root) == artefact_digests(deployed.roots.clean)
        worker_pids = {p.pid for p in procs[1:]}
        shard_dir = next(d for d in (root / "shard").iterdir() if (d / "_MANIFEST.json").exists())
        parts = json.loads((shard_dir / "_MANIFEST.json").read_text())["parts"]
        ran_on = {int(p["worker"].rsplit(":", 1)[1]) for p in parts}
        assert ran_on and ran_on <= worker_pids, (ran_on, worker_pids)
    finally:
        for p in reversed(procs):
            stop_group(p)


def test_serve_schedules_and_runs_the_pipeline(server, tmp_path) -> None:
    root = tmp_path / "served"
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            str(BIN / "ctxsim"),
            "serve",
            "--config",
            OPS_CONFIG,
            "--cron",
            "*/5 * * * *",
            "--name",
            "served",
            "--root",
            str(root),
            "--until",
            "shard",
        ],
        cwd=REPO,
        env=server.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline, dep = time.monotonic() + 240, None
        while time.monotonic() < deadline and dep is None:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                with client(server.url) as c:
                    dep = c.read_deployment_by_name("ctxsim-pipeline/served")
            except Exception:  # noqa: BLE001 - not registered yet
                time.sleep(1)
        assert dep is not None, (tmp_path / "serve.log").read_text()
        assert [s.schedule.cron for s in dep.schedules] == ["*/5 * * * *"]
        assert dep.parameters["root"] == str(root) and dep.parameters["until"] == "shard"
        run = run_deployment("ctxsim-pipeline/served", {"run_id": "served"}, server.env)
        assert wait_flow_run(server.url, run, timeout=300) == "COMPLETED"
        rec = json.loads((root / "runs" / "served.json").read_text())
        assert list(rec["stages"]) == ["shard"] and rec["status"] == "completed"
    finally:
        stop_group(proc)
        log.close()


@pytest.mark.parametrize("bad", ["../escape", "/tmp/abs-escape"])
def test_run_ids_from_the_cli_cannot_escape_the_root(server, tmp_path, bad) -> None:
    root = tmp_path / "root"
    res = cli(
        [
            "ctxsim",
            "run",
            "--config",
            OPS_CONFIG,
            "--root",
            str(root),
            "--until",
            "shard",
            "--run-id",
            bad,
            "--no-progress",
        ],
        server.env,
        check=False,
    )
    assert res.returncode != 0
    assert "unsafe run id" in res.stdout + res.stderr
    assert [p for p in tmp_path.iterdir() if p != root] == []  # nothing beside the root
    assert not Path("/tmp/abs-escape.json").exists()
    assert not list(root.rglob("*.json"))
