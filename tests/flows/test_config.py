"""Config loading: validation errors name the file and key; overrides apply."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxsim.flows.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


def test_bundled_configs_validate():
    paths = sorted((REPO / "configs").glob("*.yaml"))
    assert {"quickstart.yaml", "books.yaml", "paper.yaml"} <= {p.name for p in paths}
    for path in paths:
        cfg = load_config(path)
        assert cfg.stage_names[0] == "shard", path.name


def test_generated_books_config_labels_without_retrieval():
    """books_generated.yaml: contexts sampled per query, so no index/retrieve/screen stage."""
    from ctxsim.flows.pipeline import select_stages

    cfg = load_config(REPO / "configs" / "books_generated.yaml")
    stages = select_stages(cfg, "label")
    assert "gencontexts" in stages and "score" in stages
    assert not {"index", "retrieve", "discriminator", "screen"} & set(stages)


def test_unknown_key_names_file_and_key(tmp_path: Path):
    p = tmp_path / "bad.yaml"
    p.write_text("shard:\n  pathz: [x]\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: shard\.pathz: unknown key"):
        load_config(p)


def test_unknown_section(tmp_path: Path):
    p = tmp_path / "bad.yaml"
    p.write_text("retreive:\n  top_k: 3\n")
    with pytest.raises(ConfigError, match="unknown section 'retreive'"):
        load_config(p)


def test_out_of_range_value(tmp_path: Path):
    p = tmp_path / "bad.yaml"
    p.write_text("contexts:\n  width: 0\n")
    with pytest.raises(ConfigError, match=r"contexts\.width"):
        load_config(p)


def test_override_parses_yaml_values(tmp_path: Path):
    p = tmp_path / "ok.yaml"
    p.write_text("shard:\n  n_shards: 2\n")
    cfg = load_config(p, ["shard.n_shards=5", "shard.paths=['a', 'b']"], root=str(tmp_path))
    assert cfg.stages["shard"].n_shards == 5
    assert cfg.stages["shard"].paths == ["a", "b"]
    assert cfg.run.root == str(tmp_path)


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(None, ["shard.n_shards"], stages=["shard"])
    # a value YAML cannot read: an error naming the --set, not a parser traceback
    with pytest.raises(ConfigError, match=r"--set 'generator.templates.right=\{sentence\} "):
        load_config(None, ["generator.templates.right={sentence} {target}"], stages=["shard"])


def test_missing_config_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_until_runs_only_what_that_stage_is_built_from() -> None:
    from ctxsim.flows.pipeline import select_stages

    cfg = load_config(REPO / "configs" / "books.yaml")
    assert select_stages(cfg, "generator") == ["shard", "contexts", "generator"]
    assert select_stages(cfg, "queries") == ["shard", "contexts", "queries"]
    # select takes the screen as an optional input, so the whole retrieval path runs first
    assert select_stages(cfg, "select") == [
        "shard",
        "contexts",
        "queries",
        "index",
        "retrieve",
        "discriminator",
        "screen",
        "select",
    ]
    assert select_stages(cfg, None) == cfg.stage_names


def test_select_ordered_by_s_links_the_score_section_and_the_generator():
    from ctxsim.flows.pipeline import select_stages

    qs = REPO / "configs" / "quickstart.yaml"
    by_s = load_config(qs, ["select.order_by=score", "score.lambda_fwd=0.25"])
    assert by_s.stages["select"].scoring.lambda_fwd == 0.25
    assert by_s.to_dict()["select"]["scoring"]["lambda_fwd"] == 0.25  # in the fingerprint
    plain = load_config(qs)
    assert plain.stages["select"].scoring is None
    # `--until select` trains the generator only when select needs it
    assert "generator" in select_stages(by_s, "select")
    assert "generator" not in select_stages(plain, "select")


def test_select_from_generated_contexts_needs_the_gencontexts_section(tmp_path: Path):
    """A check between sections, made when the config is validated: before any stage runs
    (it was a traceback from `select`, after every stage before it), one line naming the
    origin of the setting."""
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    quick = REPO / "configs" / "quickstart.yaml"
    for source in ("generate", "both"):
        with pytest.raises(ConfigError) as e:
            load_config(quick, [f"select.source={source}"])
        msg = str(e.value)
        assert msg.startswith(f"--set select.source={source}: select.source: '{source}' takes")
        assert "no `gencontexts:` section" in msg and "\n" not in msg
    p = tmp_path / "c.yaml"
    p.write_text("shard: {}\nselect:\n  source: generate\n")
    with pytest.raises(ConfigError, match=rf"^{p}: select\.source: 'generate'"):
        load_config(p)
    p.write_text("shard: {}\nselect:\n  source: generate\ngencontexts: {k_right: 2}\n")
    load_config(p)  # with the section: fine
    load_config(quick, ["select.source=retrieve"])
    root = tmp_path / "root"
    res = CliRunner().invoke(
        app, ["run", "--config", str(quick), "--set", "select.source=generate", "--root", str(root)]
    )
    assert res.exit_code == 2 and "no `gencontexts:` section" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not root.exists()  # no work done


def test_a_config_that_can_select_no_context_is_an_error():
    """Generated contexts only, and none sampled on either side: every label would be NaN (it
    ran to "completed" with 600 NaN labels)."""
    quick = REPO / "configs" / "quickstart.yaml"
    sets = ["gencontexts.k_right=0", "gencontexts.k_left=0"]
    with pytest.raises(ConfigError, match="section 'select': .*can select no context"):
        load_config(quick, [*sets, "select.source=generate"])
    load_config(quick, [*sets, "select.source=both"])  # the screened contexts remain
    load_config(quick, ["gencontexts.k_right=0", "gencontexts.k_left=1", "select.source=generate"])


def test_no_progress_is_the_run_setting_and_quiet_its_old_name():
    """`run.no_progress` / `--no-progress` hide the progress bars; `quiet` (the old name, which
    also named the default terminal output) still reads, in configs, --set and run records."""
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app
    from ctxsim.store.stage import RunParams

    assert RunParams(quiet=True).no_progress and not RunParams(quiet=False).no_progress
    assert RunParams(**{"no_progress": False, "quiet": "true"}).no_progress  # explain's override
    assert "quiet" not in RunParams(quiet=True).model_dump()
    cfg = load_config(REPO / "configs/quickstart.yaml", ["run.quiet=true"])
    assert cfg.run.no_progress
    shown = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert "--no-progress" in shown and "--quiet" not in shown
