"""docker-compose.yml, Dockerfile, .env handling and `ctxsim worker`: they must agree.

No Docker engine here: the compose file is validated by Debian's `docker-compose config -q`
when installed (`make ci-deps` installs it in CI), and its structure is checked on the file as
Compose resolves it (or as YAML resolves anchors when docker-compose is missing).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from ctxsim.flows import ops
from ctxsim.flows.cli import app
from ctxsim.flows.ops_compose import compose_worker_services

REPO = Path(__file__).resolve().parents[2]
COMPOSE = shutil.which("docker-compose")


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The compose file as Compose resolves it (with .env.example as the env file)."""
    d = tmp_path_factory.mktemp("compose")
    for name in ("docker-compose.yml", "Dockerfile"):
        shutil.copy(REPO / name, d / name)
    shutil.copy(REPO / ".env.example", d / ".env")
    if COMPOSE is None:  # resolve what Compose would: ${VAR:-default} with no VAR set
        raw = (REPO / "docker-compose.yml").read_text()
        return yaml.safe_load(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", raw))
    res = subprocess.run([COMPOSE, "config"], cwd=d, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return yaml.safe_load(res.stdout)


@pytest.mark.skipif(COMPOSE is None, reason="docker-compose not installed (make ci-deps)")
def test_docker_compose_config_is_valid(tmp_path: Path) -> None:
    for name in ("docker-compose.yml", "Dockerfile"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copy(REPO / ".env.example", tmp_path / ".env")
    res = subprocess.run([COMPOSE, "config", "-q"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    (tmp_path / ".env").write_text("CTXSIM_PORT=4200\n")  # secrets missing: must refuse
    res = subprocess.run([COMPOSE, "config", "-q"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode != 0 and "POSTGRES_PASSWORD" in res.stderr


def test_postgres_is_internal_and_healthchecked(compose: dict[str, Any]) -> None:
    pg = compose["services"]["postgres"]
    assert "ports" not in pg and "expose" not in pg
    assert set(pg["networks"]) == {"internal"}
    assert compose["networks"]["internal"]["internal"] is True
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    server = compose["services"]["prefect-server"]
    assert server["depends_on"]["postgres"]["condition"] == "service_healthy"
    url = server["environment"]["PREFECT_SERVER_DATABASE_CONNECTION_URL"]
    assert url.startswith("postgresql+asyncpg://") and "@postgres:5432/" in url


def test_only_the_api_port_is_published_on_loopback_with_auth(compose: dict[str, Any]) -> None:
    published = {n: s["ports"] for n, s in compose["services"].items() if s.get("ports")}
    assert list(published) == ["prefect-server"]
    (port,) = published["prefect-server"]
    if isinstance(port, dict):  # docker-compose config normalises to the long form
        assert port["target"] == 4200 and port.get("host_ip") == "127.0.0.1"
    else:
        assert port.removesuffix("/tcp") == "127.0.0.1:4200:4200"
    env = compose["services"]["prefect-server"]["environment"]
    assert env["PREFECT_SERVER_API_AUTH_STRING"]  # from the env file, never in the repo
    raw = (REPO / "docker-compose.yml").read_text()
    assert "${PREFECT_SERVER_API_AUTH_STRING:?" in raw and "${POSTGRES_PASSWORD:?" in raw
    assert "--host" in compose["services"]["prefect-server"]["command"]


def test_env_file_is_ignored_and_example_has_every_secret() -> None:
    res = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=REPO)
    assert res.returncode == 0, ".env must be git-ignored"
    tracked = subprocess.run(["git", "ls-files", ".env"], cwd=REPO, capture_output=True, text=True)
    assert tracked.stdout.strip() == ""
    example = dict(
        line.split("=", 1)
        for line in (REPO / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    for key in ("POSTGRES_PASSWORD", "PREFECT_SERVER_API_AUTH_STRING", "PREFECT_API_AUTH_STRING"):
        assert key in example
    assert example["PREFECT_API_AUTH_STRING"] == example["PREFECT_SERVER_API_AUTH_STRING"]
    assert ".env" in (REPO / ".dockerignore").read_text().split()


def test_compose_workers_match_ctxsim_worker(compose: dict[str, Any]) -> None:
    workers = {n: s for n, s in compose["services"].items() if n.startswith("worker-")}
    gpus = sorted(n.removeprefix("worker-gpu") for n in workers)
    assert len(gpus) >= 2
    expected = compose_worker_services(ops.worker_specs("ctxsim", gpus=gpus))
    assert set(workers) == set(expected)
    for name, svc in workers.items():
        assert svc["command"] == expected[name]["command"]
        assert svc["command"][svc["command"].index("--limit") + 1] == "1"
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices == expected[name]["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1 and len(devices[0]["device_ids"]) == 1
        vols = [
            v.removesuffix(":rw") if isinstance(v, str) else f"{v['source']}:{v['target']}"
            for v in svc["volumes"]
        ]
        assert "artefacts:/opt/ctxsim/data/artefacts" in vols
        assert svc["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"
        assert svc["depends_on"]["prefect-server"]["condition"] == "service_healthy"
    # every GPU is reserved by exactly one worker
    ids = [
        s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"][0]
        for s in workers.values()
    ]
    assert sorted(ids) == sorted(set(ids))


def test_dockerfile_installs_ctxsim_as_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert 'pip install ".[${EXTRAS}]"' in text
    assert "USER ctxsim" in text and "WORKDIR /opt/ctxsim" in text
    assert "COPY prefect.yaml" in text


def test_worker_cli_one_worker_per_gpu_with_limit_one() -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["worker", "--pool", "p", "--gpus", "0,1,3", "--dry-run"])
    assert res.exit_code == 0, res.output
    specs = json.loads(res.output)
    assert [s["env"]["CUDA_VISIBLE_DEVICES"] for s in specs] == ["0", "1", "3"]
    assert len({s["name"] for s in specs}) == 3
    for s in specs:
        argv = s["argv"]
        assert argv[:3] == ["prefect", "worker", "start"]
        assert argv[argv.index("--pool") + 1] == "p" and argv[argv.index("--limit") + 1] == "1"
        assert argv[argv.index("--type") + 1] == "process"
    res = runner.invoke(app, ["worker", "--cpu-workers", "3", "--dry-run"])
    cpu = json.loads(res.output)
    assert len(cpu) == 3 and all(s["env"]["CUDA_VISIBLE_DEVICES"] == "" for s in cpu)
    res = runner.invoke(app, ["worker", "--gpus", "0,0", "--dry-run"])
    assert res.exit_code == 2 and "twice" in res.output
    res = runner.invoke(app, ["worker", "--gpus", "0;rm -rf /", "--dry-run"])
    assert res.exit_code == 2


def test_worker_cli_compose_output_is_what_the_file_holds(compose: dict[str, Any]) -> None:
    res = CliRunner().invoke(app, ["worker", "--gpus", "0,1", "--compose"])
    assert res.exit_code == 0, res.output
    printed = yaml.safe_load(res.output)["services"]
    for name, svc in printed.items():
        assert compose["services"][name]["command"] == svc["command"]
        assert compose["services"][name]["deploy"] == svc["deploy"]


def test_prefect_yaml_has_nightly_cron_and_one_deployment_per_stage() -> None:
    from ctxsim.tasks import STAGES

    cfg = yaml.safe_load((REPO / "prefect.yaml").read_text())
    deps = {d["name"]: d for d in cfg["deployments"]}
    nightly = deps["nightly"]
    assert nightly["entrypoint"] == "flows/stage_flows.py:pipeline"
    assert nightly["schedules"][0]["cron"] == "0 2 * * *"
    for stage in STAGES:
        d = deps[stage]
        assert d["entrypoint"] == "flows/stage_flows.py:stage_flow"
        assert d["parameters"]["stage"] == stage and d["work_pool"]["name"] == "ctxsim"
        path, func = d["entrypoint"].split(":")
        assert (REPO / path).exists()
    assert (REPO / nightly["parameters"]["config"]).exists()
