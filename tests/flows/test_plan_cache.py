"""`ctxsim plan` calibrates once per machine: unit costs are cached by stage
fingerprint and checked at read; a second plan pilots nothing; a corrupt cache file is moved
aside and that stage piloted again; the pilot's warnings name the user's files, not the sample's
copies; progress is shown unless --no-progress; the plan says what it cost itself."""

from __future__ import annotations

import json
from pathlib import Path

import prefect.main  # noqa: F401  (its logging set-up first: it would drop caplog's handler mid-test)
import pytest

from ctxsim.flows.plan import predict, run_pilot
from tests.conftest import REPO, SAMPLE

QUICKSTART = REPO / "configs" / "quickstart.yaml"
SETS = [f"shard.paths=['{SAMPLE}']", "run.torch_threads=1"]


def _plan(cache: Path, sets: list[str] = SETS, until: str = "retrieve"):
    cfg, pilot = run_pilot(
        QUICKSTART, sets, sample_fraction=0.3, pilot_queries=4, until=until, cache=cache
    )
    return pilot, predict(cfg, pilot)


def _figures(plan: dict) -> list[tuple]:
    return [(r["stage"], r["cpu_s"], r["rows"], r["disk_mb"]) for r in plan["stages"]]


def test_a_second_plan_reuses_the_unit_costs_and_pilots_nothing(tmp_path: Path, caplog):
    cache = tmp_path / "cache"
    first, plan1 = _plan(cache)
    assert first.piloted == [
        *("1:shard", "1:contexts", "1:queries", "1:index", "1:retrieve"),
        *("2:queries", "2:retrieve"),  # the corpus stages keep their fingerprints in pilot 2
    ]
    assert first.from_cache == ["2:shard", "2:contexts", "2:index"]
    units = sorted(p for p in cache.glob("units/*/*.json") if p.name != "base_rss.json")
    assert len(units) == 7 and all(p.with_name(f"{p.name}.sha256").is_file() for p in units)

    second, plan2 = _plan(cache)
    assert second.piloted == []  # every stage known: nothing run
    assert _figures(plan2) == _figures(plan1)

    # a corrupt unit-cost file: detected at read, moved aside, that stage piloted again
    (contexts,) = cache.glob("units/*/contexts-*.json")
    contexts.write_text(contexts.read_text().replace('"rows": ', '"rows": 1'))
    with caplog.at_level("WARNING"):
        third, plan3 = _plan(cache)
    assert "unit-cost cache file" in caplog.text and "sha256 mismatch" in caplog.text
    assert list(contexts.parent.glob(f"{contexts.name}.corrupt-*"))
    assert third.piloted == ["1:contexts"]  # its downstream kept their fingerprints
    assert json.loads(contexts.read_text())["rows"] == first.runs[0]["contexts"].rows
    assert [f[2] for f in _figures(plan3)] == [f[2] for f in _figures(plan1)]


def test_a_changed_setting_pilots_only_what_it_changes(tmp_path: Path):
    cache = tmp_path / "cache"
    _plan(cache)
    again, _ = _plan(cache, SETS + ["index.ngram_max=3"])
    # index and what reads it; shard, contexts and queries come from the cache
    assert again.piloted == ["1:index", "1:retrieve", "2:retrieve"]


def test_pilot_warnings_name_the_users_files_not_the_sample_copies(tmp_path: Path, caplog):
    """Was: `ctxsim-plan-.../corpus/00028.jsonl` (the temporary copy) in every warning."""
    corpus = tmp_path / "my-books"
    corpus.mkdir()
    long = " ".join(["word"] * 120) + "."
    recs = [
        {"book": "b", "section": f"b#{i}", "paragraphs": [f"A short sentence {i} here. {long}"]}
        for i in range(6)
    ]
    mine = corpus / "novel.jsonl"
    mine.write_text("".join(json.dumps(r) + "\n" for r in recs))
    sets = [f"shard.paths=['{mine}']", "shard.min_kept_share=0.0"]
    for cache in (False, tmp_path / "cache"):  # a temporary root, and the kept one
        caplog.clear()
        with caplog.at_level("WARNING"):
            run_pilot(QUICKSTART, sets, sample_fraction=1.0, until="shard", cache=cache)
        dropped = [r.getMessage() for r in caplog.records if "outside min_tokens" in r.getMessage()]
        assert dropped, caplog.text
        assert all(str(mine) in m and "00000.jsonl" not in m for m in dropped), dropped
        assert "ctxsim-plan-" not in caplog.text


def test_cli_plan_shows_progress_and_its_own_cost(tmp_path: Path, monkeypatch):
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    monkeypatch.setenv("CTXSIM_PLAN_CACHE", str(tmp_path / "cache"))
    args = ["plan", "--config", str(QUICKSTART), "--until", "contexts"]
    args += ["--set", f"shard.paths=['{SAMPLE}']"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "plan: pilot 1: shard" in res.stderr and "plan: pilot 1: contexts" in res.stderr
    last = res.stdout.splitlines()[-1]
    assert last.startswith("this plan: ") and "of the run it predicts" in last
    assert "peak RSS" in last and "piloted 2 stage runs, 0 from the unit-cost cache" in last

    quiet = CliRunner().invoke(app, [*args, "--no-progress", "--json"])
    assert quiet.exit_code == 0 and "plan: pilot" not in quiet.stderr
    me = json.loads(quiet.stdout)["plan_itself"]
    assert me["peak_rss_mb"] > 0 and me["cpu_s"] > 0 and me["cache"] == str(tmp_path / "cache")
    assert json.loads(quiet.stdout)["pilot"]["piloted"] == []  # the second plan: from the cache

    cold = CliRunner().invoke(app, [*args, "--set", "run.no_progress=true", "--no-cache"])
    assert cold.exit_code == 0 and "piloted 2 stage runs" in cold.stdout
    assert "plan: pilot" not in cold.stderr


@pytest.fixture(autouse=True)
def _no_tqdm_env(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)


def test_a_fixed_step_train_is_piloted_for_a_few_steps_and_scaled_by_steps() -> None:
    """Run in full, a 200-step train made a cold plan cost a third of the run it predicts."""
    from ctxsim.flows.config import load_config
    from ctxsim.flows.plan import StageMeasure, pilot_settings
    from ctxsim.store.cost_model import PilotSettings, PilotView
    from ctxsim.tasks import load_stage

    def sets(cfg, k: int) -> list[str]:
        return pilot_settings(cfg, ["train"], PilotSettings(k, 8, 8, 20, []))

    cfg = load_config(QUICKSTART, ["train.max_steps=200"])
    assert sets(cfg, 0) == ["train.max_steps=20", "train.eval_steps=20"]
    assert sets(cfg, 1) == ["train.max_steps=40", "train.eval_steps=40"]
    short = load_config(QUICKSTART, ["train.max_steps=30"])
    assert sets(short, 1)[0] == "train.max_steps=30"  # never past the budget
    by_epochs = load_config(QUICKSTART, ["train.max_steps=-1"])
    assert sets(by_epochs, 0) == []  # scaled by labelled pairs instead
    assert load_stage("train").cost_model(by_epochs.stages["train"]).basis("train") == (
        "labelled pairs"
    )

    # examples added beside the labels follow the pilot's share of the queries, so its batches
    # mix the two datasets as the full run's do (a context-heavy pilot over-priced steps 1.35x)
    mixed = load_config(
        QUICKSTART,
        [
            "train.max_steps=200",
            "train.objective=ctxsim-context",
            "train.context_corpus_sentences=8000",
        ],
    )
    got = pilot_settings(mixed, ["train"], PilotSettings(1, 16, 8, 20, [], share=16 / 2000))
    assert got == ["train.max_steps=40", "train.eval_steps=40", "train.context_corpus_sentences=64"]
    tiny = PilotSettings(0, 1, 8, 20, [], share=1 / 10**6)
    assert pilot_settings(mixed, ["train"], tiny)[-1] == "train.context_corpus_sentences=1"

    measure = StageMeasure("train", 9.0, 9.0, 1, 0, 0.0, stats={"steps": 20})
    view = PilotView({"train": measure}, cfg.stages, 1.0, 1, 1, 8, 1.0, 0.0)
    model = load_stage("train").cost_model(cfg.stages["train"])
    assert (model.basis("train"), *model.units("train", view)) == ("optimizer steps", 20.0, 200.0)


def test_embed_is_priced_by_the_units_it_encodes_at_most_max_units() -> None:
    from types import SimpleNamespace

    from ctxsim.store.cost_model import PilotView, StageMeasure
    from ctxsim.tasks import load_stage

    model = load_stage("embed").cost
    measure = StageMeasure("embed", 10.0, 10.0, 500, 0, 0.0, stats={"contexts": 500})

    def units(max_units: int, ratio: int = 40) -> tuple[float, float]:
        params = {"embed": SimpleNamespace(max_units=max_units)}
        return model.units("embed", PilotView({"embed": measure}, params, ratio, 1, ratio, 8, 1, 0))

    assert model.kind == "corpus" and model.basis("embed") == "units encoded"
    assert units(0) == (500.0, 20_000.0)  # every unit: the corpus's share
    assert units(8000) == (500.0, 8000.0)  # a sample: the sample
    assert units(8000, ratio=4) == (500.0, 2000.0)  # fewer units than the sample
    bare = StageMeasure("embed", 10.0, 10.0, 500, 0, 0.0)  # no count: by bytes, as before
    params = {"embed": SimpleNamespace(max_units=8000)}
    assert model.units("embed", PilotView({"embed": bare}, params, 40, 1, 40, 8, 1, 0)) == (1, 40)


def test_embeds_model_and_scatter_keep_their_size_only_the_embeddings_scale(tmp_path: Path):
    """The adapted encoder (~87 MB) written beside the embeddings was scaled with the units:
    493 MB predicted for a run that wrote 106 MB."""
    from ctxsim.flows.plan_measure import _dir_bytes
    from ctxsim.flows.plan_predict import _disk_bytes
    from ctxsim.store.cost_model import StageMeasure
    from ctxsim.tasks import load_stage

    sizes = {
        "files/adapted-encoder/model.safetensors": 9000,
        "files/adapted-encoder/1_Dense/config.json": 100,
        "files/scatter.npz": 400,
        "files/scatter-00000.npz": 400,
        "files/emb-00000.npy": 80,
        "part-00000.parquet": 20,
    }
    for name, size in sizes.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * size)
    fixed = _dir_bytes(tmp_path, load_stage("embed").fixed_size_files)
    assert (_dir_bytes(tmp_path), fixed) == (10_000, 9_900)

    measure = StageMeasure("embed", 1.0, 1.0, 5, 10_000, 0.0, fixed_disk_bytes=fixed)
    assert _disk_bytes(measure, 16.0) == 9_900 + 100 * 16
    assert _disk_bytes(StageMeasure("shard", 1.0, 1.0, 5, 10_000, 0.0), 16.0) == 160_000


def test_warm_imports_load_every_library_a_stage_would_charge_to_its_pilot() -> None:
    """A library imported first inside a pilot stage is charged to it (memory and CPU) and then
    scaled with the corpus: the plan imports them before measuring anything."""
    import subprocess
    import sys

    from ctxsim.flows.plan_measure import WARM_MODULES

    code = (
        "import sys; from ctxsim.flows.plan_measure import warm_imports, WARM_MODULES; "
        "assert not any(m in sys.modules for m in ('sentence_transformers',)); warm_imports(); "
        "print(','.join(m for m in WARM_MODULES if m not in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""  # every module imported
    assert "sentence_transformers" in WARM_MODULES  # embed's encoder library
