"""`ctxsim plan`: the corpus sample, the cost model, and the plan against a measured run."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ctxsim.flows.config import load_config
from ctxsim.flows.plan import (
    Pilot,
    StageMeasure,
    pilot_from_json,
    pilot_to_json,
    predict,
    run_measured,
    run_pilot,
    sample_corpus,
)
from ctxsim.store.cost_model import fit_line
from tests.conftest import REPO, SAMPLE


def _records(n: int) -> list[bytes]:
    return [
        json.dumps({"book": "b", "section": str(i), "paragraphs": [f"Sentence {i}."]}).encode()
        + b"\n"
        for i in range(n)
    ]


def test_sample_corpus_keeps_whole_records_seeded(tmp_path: Path):
    recs = _records(200)
    src = tmp_path / "c.jsonl.gz"
    with gzip.open(src, "wb") as fh:
        fh.writelines(recs)
    a, sb, fb = sample_corpus([str(src)], 0.25, 7, tmp_path / "a")
    b, sb2, _ = sample_corpus([str(src)], 0.25, 7, tmp_path / "b")
    kept = Path(a[0]).read_bytes().splitlines(keepends=True)
    assert Path(b[0]).read_bytes() == Path(a[0]).read_bytes() and sb == sb2  # seeded
    assert set(kept) <= set(recs) and 20 < len(kept) < 80  # whole records, about a quarter
    assert fb == sum(map(len, recs)) and sb == sum(map(len, kept))


def test_sample_corpus_keeps_at_least_one_record(tmp_path: Path):
    src = tmp_path / "one.jsonl"
    src.write_bytes(b"".join(_records(1)))
    paths, sb, fb = sample_corpus([str(src)], 0.01, 0, tmp_path / "s")
    assert sb == fb > 0 and len(paths) == 1


def test_sample_fraction_out_of_range(tmp_path: Path):
    with pytest.raises(ValueError, match="sample-fraction"):
        sample_corpus([str(SAMPLE)], 1.5, 0, tmp_path)


def test_fit_recovers_fixed_and_per_unit_cost():
    assert fit_line(10, 3 + 2 * 10, 30, 3 + 2 * 30) == pytest.approx((3.0, 2.0))
    # a cheaper bigger pilot (noise): no measurable cost per unit, the mean as a fixed cost
    assert fit_line(10, 30, 20, 20) == pytest.approx((25.0, 0.0))


def _m(stage: str, cpu: float, rows: int, **stats) -> StageMeasure:
    return StageMeasure(stage, cpu, cpu, rows, rows * 10, 100.0, 100.0, stats)


def test_predict_scales_each_stage_by_its_own_quantity():
    cfg = load_config(
        REPO / "configs" / "quickstart.yaml",
        ["queries.n_corpus=100", "queries.n_shards=4", "retrieve.top_k=50"],
        stages=["shard", "contexts", "queries", "retrieve", "score"],
    )
    # query stages: 2 s fixed per shard + 0.5 s per score row; 6 score rows per query
    runs = []
    for q in (5, 10):
        runs.append(
            {
                "shard": _m("shard", 1.0, 300),
                "contexts": _m("contexts", 0.5, 30),
                "queries": _m("queries", 0.01 * q, q),
                "retrieve": _m("retrieve", 1.0 + 0.01 * 30 * q, 30 * q),
                "score": _m("score", 2.0 + 0.5 * 6 * q, 6 * q, padded_tokens=60 * q),
            }
        )
    pilot = Pilot(4.0, 1000, 4000, (5, 10), 100.0, 8, (runs[0], runs[1]))
    plan = predict(cfg, pilot, gpus=2, tokens_per_second=100.0)
    st = {r["stage"]: r for r in plan["stages"]}
    assert st["shard"]["cpu_s"] == pytest.approx(4.0) and st["shard"]["rows"] == 1200
    # retrieve is capped by top_k, not by the pilot's 30 chunks per query
    assert st["retrieve"]["units"] == pytest.approx(50 * 100)
    assert st["retrieve"]["cpu_s"] == pytest.approx(1.0 * 4 + 0.01 * 5000)
    assert st["score"]["units"] == pytest.approx(600)
    assert st["score"]["cpu_s"] == pytest.approx(2.0 * 4 + 0.5 * 600)
    assert st["score"]["gpu_s"] == pytest.approx(60 * 100 / 100.0)
    assert plan["total"]["gpu_wall_hours"] == pytest.approx(60.0 / 2 / 3600, abs=1e-3)
    # the raw pilot round-trips through JSON (`ctxsim plan --save-pilot`) to the same plan
    again = pilot_from_json(json.loads(json.dumps(pilot_to_json(pilot))))
    assert predict(cfg, again, gpus=2, tokens_per_second=100.0) == plan


@pytest.mark.integration
def test_plan_matches_a_measured_quickstart_run(tmp_path: Path):
    """The plan of a shrunk quickstart (through `label`) against the same config run in full.

    Work units are deterministic (seeded sample, seeded run): queries exactly, the rest within
    the factors below. CPU seconds are not asserted (they follow the machine's load): the
    predicted-to-measured CPU ratio is bench/bench_plan.py's to report.
    """
    sets = [
        f"shard.paths=['{SAMPLE}']",
        "queries.n_corpus=48",
        "generator.train_steps=10",
        "generator.n_eval=16",
        "run.torch_threads=1",
    ]
    cfg_path = REPO / "configs" / "quickstart.yaml"
    cfg, pilot = run_pilot(
        cfg_path, sets, sample_fraction=0.4, pilot_queries=6, root=tmp_path / "p", until="label"
    )
    plan = predict(cfg, pilot)
    full = load_config(cfg_path, sets, str(tmp_path / "full"))
    from ctxsim.flows.pipeline import select_stages

    measured = run_measured(full, select_stages(full, "label"))
    pred = {r["stage"]: r for r in plan["stages"]}
    assert set(pred) == set(measured)
    assert pred["queries"]["rows"] == measured["queries"].rows == 48
    for stage, factor in {"shard": 1.5, "contexts": 1.5, "pairs": 1.5, "label": 1.5}.items():
        ratio = pred[stage]["rows"] / measured[stage].rows
        assert 1 / factor <= ratio <= factor, (stage, pred[stage]["rows"], measured[stage].rows)
    ratio = pred["score"]["rows"] / measured["score"].rows
    assert 1 / 2 <= ratio <= 2, (pred["score"]["rows"], measured["score"].rows)


def test_cli_plan_rejects_gpus_without_throughput():
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    res = CliRunner().invoke(app, ["plan", "--gpus", "2"])
    assert res.exit_code == 2 and "--tokens-per-second" in res.output


def test_cli_plan_needs_corpus_queries(tmp_path: Path):
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text("shard:\n  paths: ['x']\nqueries:\n  source: sts\n")
    res = CliRunner().invoke(app, ["plan", "--config", str(cfg)])
    assert res.exit_code == 2 and "queries.source=corpus" in res.output


def test_cli_plan_until_a_corpus_stage_takes_root_and_an_empty_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`--until shard` has no query stage (was KeyError 'queries'); an empty config file runs
    every stage by default, and its pilot keeps them all (was a KeyError on a missing section);
    `--root` is taken like every other command's, and the pilot writes nothing there."""
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    root = tmp_path / "root"
    sets = ["--set", f"shard.paths=['{SAMPLE}']"]
    res = CliRunner().invoke(
        app,
        ["plan", "--config", str(REPO / "configs" / "quickstart.yaml"), "--until", "shard"]
        + sets
        + ["--root", str(root)],
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()  # the progress bar is on stderr
    assert "no query stage" in lines[0]
    assert lines[-2].startswith("total: ") and lines[-1].startswith("this plan: ")
    assert [ln.split()[0] for ln in lines[2:-2]] == ["shard"]
    assert not root.exists()
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    monkeypatch.chdir(REPO)  # the default shard.paths: the bundled sample
    res = CliRunner().invoke(app, ["plan", "--config", str(empty), "--until", "queries"])
    assert res.exit_code == 0, res.output
    assert [ln.split()[0] for ln in res.stdout.splitlines()[2:-2]] == [
        "shard",
        "contexts",
        "queries",
    ]


def test_load_config_keeps_sections_the_file_has_only_by_default(tmp_path: Path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(empty).stage_names == list(load_config(None).stage_names)
    # an override names one section: alone, it would be the only stage of the config
    assert load_config(empty, ["shard.n_shards=1"]).stage_names == ["shard"]
    kept = load_config(empty, ["shard.n_shards=1"], with_sections=["shard", "contexts"])
    assert kept.stage_names == ["shard", "contexts"]


def test_a_stage_is_measured_from_what_is_live_not_from_what_earlier_stages_freed():
    """Freed heap pages stay in the process until trimmed: a stage measured after a big one
    would grow into them and look small (train's pilot read 0.9 GB for a 3 GB stage)."""
    import sys

    import numpy as np

    from ctxsim.flows.plan_measure import RssSampler, release_freed_memory

    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's malloc_trim and /proc are Linux's")
    before = RssSampler.rss_mb()
    held = [np.ones(8000) for _ in range(6000)]  # 64 KB blocks: heap, not mmap
    assert RssSampler.rss_mb() > before + 300
    del held
    release_freed_memory()
    assert RssSampler.rss_mb() < before + 100
