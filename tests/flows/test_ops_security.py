"""Names from the CLI or a deployment's parameters cannot escape the artefact root; servers
bind to loopback unless told otherwise. (Run ids through `ctxsim run` are in test_ops_server.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxsim.flows import ops
from ctxsim.flows.cli import app

BAD = ["../escape", "../../etc/passwd", "/etc/passwd", "a/../../b", "..", ".hidden/../x"]


@pytest.mark.parametrize("bad", BAD)
def test_inspect_rejects_stage_names_outside_the_root(tmp_path: Path, bad: str) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "secret").mkdir()
    res = CliRunner().invoke(app, ["inspect", bad, "--root", str(tmp_path / "root"), "--json"])
    assert res.exit_code != 0
    assert "unsafe stage name" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root", "secret"]


@pytest.mark.parametrize("bad", BAD)
def test_inspect_rejects_run_ids_outside_the_root(tmp_path: Path, bad: str) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('{"stages": {"shard": {"fingerprint": "x"}}}')
    res = CliRunner().invoke(
        app, ["inspect", "shard", "--run", bad, "--root", str(tmp_path / "root"), "--json"]
    )
    assert res.exit_code != 0
    assert "unsafe run id" in res.output


@pytest.mark.parametrize("bad", ["../x", "/abs", "shard/../../x"])
def test_deployment_stage_parameter_must_be_a_stage(bad: str) -> None:
    from ctxsim.flows.stage_flows import stage_flow

    with pytest.raises(ValueError, match="is not a stage"):
        stage_flow.fn(stage=bad, config="tests/ops_config.yaml")


@pytest.mark.parametrize("bad", ["../x", "/abs"])
def test_until_must_be_a_stage(bad: str) -> None:
    from ctxsim.flows.config import load_config
    from ctxsim.flows.pipeline import select_stages

    cfg = load_config(Path(__file__).parents[1] / "ops_config.yaml")
    with pytest.raises(ValueError, match="is not a stage"):
        select_stages(cfg, bad)


def test_servers_default_to_loopback() -> None:
    import inspect

    assert ops.DEFAULT_HOST == "127.0.0.1"
    assert inspect.signature(ops.start_server).parameters["host"].default == "127.0.0.1"
    cmd = ops.server_command(ops.DEFAULT_HOST, 4200)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    res = CliRunner().invoke(app, ["server", "--help"])
    assert "127.0.0.1" in res.output
