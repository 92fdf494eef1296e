"""`ctxsim adapt`: sizes follow from the corpus and the budget by the recipe's rules, the config
it writes is an ordinary one, bad input is one line before any work, and a run leaves a
sentence-transformers model with its card (a tiny encoder and recipe here)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from ctxsim.flows.adapt import (
    AdaptRules,
    adapt_config,
    dump_config,
    embed_shards,
    embed_words,
    priced_passes,
    read_recipe,
    scorer_dir,
    sizes,
)
from ctxsim.flows.cli import app
from ctxsim.flows.config import load_config
from ctxsim.models.errors import InputError
from tests.conftest import REPO, SAMPLE

RECIPE = REPO / "configs" / "recipes" / "adapt.yaml"


def test_a_bad_recipe_is_one_line_naming_the_file_and_the_rule(tmp_path) -> None:
    path = tmp_path / "recipe.yaml"
    with pytest.raises(InputError, match="does not exist"):
        read_recipe(path)
    path.write_text("train: {lr: 1.0e-5}\n")
    with pytest.raises(InputError, match="needs an `adapt:` section"):
        read_recipe(path)
    path.write_text("adapt: {scorer_step_share: 2, nope: 1}\n")
    with pytest.raises(InputError) as err:
        read_recipe(path)
    message = str(err.value)
    assert message.startswith(f"{path}: adapt.scorer_step_share: Input should be less than")
    assert "adapt.nope: unknown rule" in message and "\n" not in message


def test_sizes_of_a_large_corpus_are_the_recipe_s_caps() -> None:
    rules = read_recipe(RECIPE)[1]
    q, ctx, steps, cpu, notes = sizes(2_600_000, rules, 32, 4, None)
    assert (q, ctx, steps) == (2000, 8000, 250)  # the recipe measured on MedQuAD and economics
    assert rules.scorer == "in-domain" and rules.scorer_step_share == 0.7
    assert rules.scorer_max_seq_length == 64  # the units' length (embed.max_seq_length)
    assert notes == [] and cpu > 0


def test_sizes_scale_with_a_small_corpus_and_say_so() -> None:
    rules = AdaptRules()
    q, ctx, steps, _, notes = sizes(50_000, rules, 32, 4, None)
    assert q == 625 and ctx == 1250 and steps == 79  # a quarter / half of ~2,500 sentences
    assert any("small corpus" in n for n in notes)
    with pytest.raises(InputError, match="corpus too small"):
        sizes(5_000, rules, 32, 4, None)


def test_min_steps_repeats_a_small_corpus_s_pairs_within_the_budget() -> None:
    rules = AdaptRules(min_steps=250)
    assert sizes(50_000, rules, 32, 4, None)[2] == 250  # 79 steps a pass: about three passes
    assert sizes(2_600_000, rules, 32, 4, None)[2] == 250  # a large corpus's pass already is
    assert sizes(2_600_000, AdaptRules(min_steps=400), 32, 4, None)[2] == 400
    fixed = rules.cpu_s_fixed + rules.cpu_s_per_word * 50_000
    budget = (fixed + 100 * rules.cpu_s_per_step) / 3600  # 100 steps' worth
    q, _, steps, cpu, _ = sizes(50_000, rules, 32, 4, budget)
    assert (q, steps) == (625, 100) and cpu <= budget * 3600 + 1e-6


def test_a_sample_of_units_prices_the_embed_pass_by_its_words_not_the_corpus_s() -> None:
    rules = AdaptRules(cpu_s_per_read_word=1e-6)
    assert embed_words(2_600_000, 0, rules) == 2_600_000
    assert embed_words(2_600_000, 8000, rules) == 8000 * rules.words_per_unit
    assert embed_words(300_000, 8000, rules) == 300_000  # fewer units than the sample
    big = [sizes(1_000_000_000, rules, 32, 4, None, max_units=m)[3] for m in (0, 8000)]
    saved = rules.cpu_s_per_word * (1_000_000_000 - 8000 * rules.words_per_unit)
    assert big[0] - big[1] == pytest.approx(saved)
    small = [sizes(300_000, rules, 32, 4, None, max_units=m)[3] for m in (0, 8000)]
    assert small[0] == small[1]


def test_embed_shards_grow_with_a_large_corpus_only() -> None:
    rules = read_recipe(RECIPE)[1]
    assert embed_shards(358_000, rules, 4) == 4  # economics and MedQuAD: the recipe's 4
    assert embed_shards(12_600_000, rules, 4) == 4  # the books corpus
    assert embed_shards(100_000_000, rules, 4) == 25  # one per 4 M words
    assert embed_shards(100_000_000, rules, 64) == 64  # never fewer than asked
    assert embed_shards(100_000_000, rules, 4, max_units=8000) == 4  # a sample: a bounded pass


def test_a_budget_scales_queries_down_or_is_refused_in_one_line() -> None:
    rules = AdaptRules()
    full = sizes(2_600_000, rules, 32, 4, None)
    fixed = rules.cpu_s_fixed + rules.cpu_s_per_word * 2_600_000
    budget = (fixed + 0.5 * (full[3] - fixed)) / 3600  # half the training the caps would cost
    cut = sizes(2_600_000, rules, 32, 4, budget)
    assert cut[0] < full[0] and cut[3] <= budget * 3600 + rules.cpu_s_per_step
    assert any("budget cut" in n for n in cut[4])
    with pytest.raises(InputError, match="--budget-cpu-hours 0.01") as e:
        sizes(2_600_000, rules, 32, 4, 0.01)
    assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sentence encoder folder: adapt checks --model exists before any work, and the
    registered models' weights are not installed where the suite runs."""
    from tests.tasks.tiny_encoder import build_tiny_encoder

    return build_tiny_encoder(_corpus_words()[:120], tmp_path_factory.mktemp("st") / "tiny-st")


def test_the_written_config_is_an_ordinary_config(tmp_path: Path, tiny_st: Path) -> None:
    plan = adapt_config([str(SAMPLE)], str(tiny_st), None, None, str(tmp_path / "root"))
    shard = plan.config["shard"]
    assert shard["doc_field"] == "book" and shard["section_field"] == "section"
    assert shard["paths"] == [str(SAMPLE)] and "evaluate" not in plan.config
    assert plan.config["train"]["max_steps"] == plan.steps
    # the recipe's scorer is in-domain: the encoder trained first, by the scorer's run
    assert plan.scorer is not None and plan.scorer["train"]["backbone"] == str(tiny_st)
    assert plan.config["train"]["backbone"] == plan.config["pairs"]["encoder"] == str(tiny_st)
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(yaml.safe_dump(plan.scorer))  # the recipe's loads once the scorer ran
    cfg = load_config(cfg_file)
    assert cfg.stages["queries"].n_corpus == plan.queries
    # the scorer reads the pairs' sentences, not labels: it embeds and labels nothing
    assert cfg.stage_names == ["shard", "contexts", "queries", "pairs", "train"]
    assert cfg.stages["train"].split_ratios == plan.config["label"]["split_ratios"]
    plan.check()


def _corpus_words() -> list[str]:
    return [
        p
        for line in SAMPLE.read_text().splitlines()
        if line.strip()
        for p in json.loads(line)["paragraphs"]
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nothing/*.jsonl"], "matches no file"),
        ([str(SAMPLE), "--model", "smollm2-135m"], "not a sentence encoder"),
        ([str(SAMPLE), "--model", "no/such/dir"], "neither a registered model"),
        ([str(SAMPLE), "--eval-dir", "{tmp}/empty"], "no task file under it"),
        ([str(SAMPLE), "--out", "{tmp}/full"], "is not empty"),
        ([str(SAMPLE), "--budget-cpu-hours", "0.01"], "--budget-cpu-hours 0.01"),
        ([str(SAMPLE), "--set", "train.lr=-1"], "train.lr"),
        ([str(SAMPLE), "--set", "adapt.nope=1"], "no rule adapt.nope"),
        ([str(SAMPLE), "--set", "adapt.scorer=mine"], "--set adapt.scorer=mine: adapt.scorer: "),
        (
            [str(SAMPLE), "--set", "adapt.scorer_step_share=2"],
            "adapt.scorer_step_share: Input should be less than or equal to 1",
        ),
    ],
)
def test_bad_input_is_one_line_before_any_work(tmp_path, tiny_st, args, message) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("mine")
    root = tmp_path / "root"
    argv = ["adapt", *[a.format(tmp=tmp_path) for a in args], "--root", str(root)]
    if "--out" not in args:
        argv += ["--out", str(tmp_path / "model")]
    if "--model" not in args:
        argv += ["--model", str(tiny_st)]
    out = CliRunner().invoke(app, argv)
    assert out.exit_code == 2, out.output
    assert message in out.output and len(out.output.strip().splitlines()) == 1, out.output
    assert not root.exists() and not (tmp_path / "model").exists()
    assert (tmp_path / "full" / "x.txt").read_text() == "mine"


def test_dump_config_prints_the_config_and_does_nothing(tmp_path, tiny_st) -> None:
    root = tmp_path / "root"
    argv = ["adapt", str(SAMPLE), "--root", str(root), "--dump-config", "--model", str(tiny_st)]
    argv += ["--set", "train.lr=0.00002"]
    out = CliRunner().invoke(app, [*argv, "--set", "adapt.scorer=download"])
    assert out.exit_code == 0, out.output
    cfg = yaml.safe_load(out.output)
    assert cfg["shard"]["paths"] == [str(SAMPLE)] and cfg["embed"]["model"] == str(tiny_st)
    assert cfg["train"]["lr"] == 2e-5
    assert out.output.startswith("# Written by: ctxsim adapt")
    assert not root.exists()
    # the recipe's in-domain scorer: two documents, the scorer's run first
    two = CliRunner().invoke(app, argv)
    assert two.exit_code == 0, two.output
    docs = list(yaml.safe_load_all(two.output))
    assert [d["train"]["objective"] for d in docs] == ["context", "ctxsim-context"]
    assert docs[1]["embed"]["model"].startswith(str(root / "adapt" / "scorer-"))
    assert docs[0]["train"]["lr"] == docs[1]["train"]["lr"] == 2e-5
    assert not root.exists()


def _tiny_recipe(tmp_path: Path, encoder: Path) -> Path:
    """The recipe with a tiny encoder's lengths, one shard per stage and tiny sizes."""
    raw = yaml.safe_load(RECIPE.read_text())
    raw["adapt"].update(max_queries=24, min_queries=5, max_context_sentences=24)
    raw["adapt"]["scorer"] = "download"  # one training (the in-domain tests set it)
    raw["adapt"]["scorer_max_seq_length"] = None  # the tiny lengths below, for both trainings
    raw["run"].update(torch_threads=1, device="cpu", no_progress=True)
    for section in ("shard", "queries", "embed"):
        raw[section]["n_shards"] = 1
    raw["embed"].update(max_seq_length=32)
    raw["train"].update(max_seq_length=32, batch_size=8, context_width=2)
    raw["evaluate"].update(max_seq_length=32, bootstrap_resamples=50, baselines=["backbone"])
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_adapt_leaves_a_model_with_its_card_and_reruns_from_its_config(tmp_path, tiny_st) -> None:
    from sentence_transformers import SentenceTransformer

    paras = _corpus_words()
    enc = tiny_st
    recipe = _tiny_recipe(tmp_path, enc)
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "sample_qa.jsonl").write_text(
        "".join(
            json.dumps({"qid": f"q{i}", "question": p.split(". ")[0], "answer": p}) + "\n"
            for i, p in enumerate(paras[:20])
        )
    )
    root, out_dir = tmp_path / "root", tmp_path / "adapted"
    argv = [
        "adapt",
        str(SAMPLE),
        "--model",
        str(enc),
        "--recipe",
        str(recipe),
        "--root",
        str(root),
        "--out",
        str(out_dir),
        "--eval-dir",
        str(dev),
        "--run-id",
        "a1",
        "--no-progress",
    ]
    out = CliRunner().invoke(app, argv)
    assert out.exit_code == 0, out.output
    assert "corpus: records (jsonl)" in out.output
    assert "note: field 'title' reads as a heading" in out.output
    card = (out_dir / "README.md").read_text()
    assert "| sample_qa | nDCG@10 |" in card and "adapted - downloaded [95% CI]" in card
    row = next(line for line in card.splitlines() if line.startswith("| sample_qa |"))
    assert row.count("[") == 1 and row.count(", ") == 1, row  # the paired interval is shown
    assert "sample_qa nDCG@10:" in out.output and " [" in out.output.split("sample_qa nDCG@10:")[1]
    assert "labelled pairs" in card and "a1" in card
    meta = json.loads((out_dir / "ctxsim_adapt.json").read_text())
    assert meta["run_id"] == "a1" and set(meta["fingerprints"]) >= {"embed", "label", "train"}
    model = SentenceTransformer(str(out_dir), device="cpu")
    assert model.encode(["a loaf of bread"]).shape == (1, 32)
    # the written config is an ordinary one: `ctxsim run` on it reuses every stage
    again = CliRunner().invoke(
        app, ["run", "--config", str(root / "adapt" / "a1.yaml"), "--run-id", "a2"]
    )
    assert again.exit_code == 0, again.output
    rec = json.loads((root / "runs" / "a2.json").read_text())
    assert all(st["shards_computed"] == 0 for st in rec["stages"].values())
    # a second adapt onto the same --out needs --overwrite, which replaces only a model it wrote
    refused = CliRunner().invoke(app, argv[:-3] + ["--run-id", "a3"])
    assert refused.exit_code == 2 and "is not empty" in refused.output
    replaced = CliRunner().invoke(app, argv[:-3] + ["--run-id", "a3", "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((out_dir / "ctxsim_adapt.json").read_text())["run_id"] == "a3"


def _in_domain_recipe(tmp_path: Path, encoder: Path) -> Path:
    path = _tiny_recipe(tmp_path, encoder)
    raw = yaml.safe_load(path.read_text())
    raw["adapt"]["scorer"] = "in-domain"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_an_in_domain_scorer_plan_is_two_configs_the_second_scored_by_the_first(
    tmp_path, tiny_st
) -> None:
    recipe = _in_domain_recipe(tmp_path, tiny_st)
    root = str(tmp_path / "root")
    plan = adapt_config([str(SAMPLE)], str(tiny_st), None, None, root, recipe=recipe)
    assert plan.scorer is not None and plan.scorer["train"]["objective"] == "context"
    assert plan.scorer["train"]["backbone"] == str(tiny_st)
    assert not {"embed", "label", "evaluate"} & set(plan.scorer)
    assert plan.config["embed"]["model"].startswith(str(Path(root) / "adapt" / "scorer-"))
    assert plan.config["train"]["objective"] == "ctxsim-context"
    assert plan.config["train"]["backbone"] == str(tiny_st)  # the reference: the download
    assert any(line.startswith("scorer: ") for line in plan.lines())
    plan.check()  # both load, the recipe's as it will once the scorer ran
    # both runs take --set, but train.objective only the recipe's; the path follows the scorer
    before = plan.config["embed"]["model"]
    plan.override(["train.lr=0.00002", "train.objective=labels"])
    assert plan.scorer["train"]["lr"] == plan.config["train"]["lr"] == 2e-5
    assert plan.scorer["train"]["objective"] == "context"
    assert plan.config["embed"]["model"] != before
    # a section the scorer does not run stays out of it; the label split reaches its pairs
    plan.override(["embed.unit=window", "label.split_ratios=[90, 5, 5]"])
    assert plan.config["embed"]["unit"] == "window" and "embed" not in plan.scorer
    assert plan.scorer["train"]["split_ratios"] == plan.config["label"]["split_ratios"]
    assert plan.scorer["train"]["split_ratios"] == [90, 5, 5]
    docs = list(yaml.safe_load_all(dump_config(plan, "ctxsim adapt x")))
    assert [d["train"]["objective"] for d in docs] == ["context", "labels"]
    # scorer.SECTION.KEY sets the scorer's run alone; a section it does not run is refused
    plan.override(["scorer.train.dropout=0"])
    assert plan.scorer["train"]["dropout"] == 0 and plan.config["train"].get("dropout") != 0
    assert plan.config["embed"]["model"] == str(scorer_dir(plan.scorer))
    with pytest.raises(InputError, match="scorer's run has no embed section"):
        plan.override(["scorer.embed.unit=chunk"])
    plan.override([f"embed.model={tiny_st}"])  # naming the scorer: no scorer run
    assert plan.scorer is None and plan.config["embed"]["model"] == str(tiny_st)
    # the cost model prices the second training
    rules = read_recipe(RECIPE)[1]
    one, two = (
        sizes(2_600_000, rules, 32, 4, None)[3],
        sizes(2_600_000, rules, 32, 4, None, 1.0, 0, False, 2)[3],
    )
    assert two - one == pytest.approx(rules.cpu_s_per_step * 250)


def test_a_student_from_the_scorer_starts_from_its_folder(tmp_path, tiny_st) -> None:
    """adapt.student: scorer: the recipe's training starts from the scorer's folder (init_from)
    while its backbone, the card's reference, stays the download; naming the start or the
    scorer, or no scorer run, undoes it."""
    recipe = _in_domain_recipe(tmp_path, tiny_st)
    root = str(tmp_path / "root")

    def plan_with(*rules: str):
        return adapt_config(
            [str(SAMPLE)], str(tiny_st), None, None, root, recipe=recipe, rule_overrides=list(rules)
        )

    assert "init_from" not in plan_with("adapt.student=download").config["train"]
    plan = plan_with("adapt.student=scorer", "adapt.student_step_share=1")
    assert plan.config["train"]["init_from"] == plan.config["embed"]["model"]
    assert plan.config["train"]["backbone"] == str(tiny_st)
    assert "init_from" not in plan.scorer["train"]
    assert any("starts from it" in line for line in plan.lines())
    plan.check()
    plan.override(["train.lr=0.00002"])  # a new scorer folder: the start follows it
    assert plan.config["train"]["init_from"] == plan.config["embed"]["model"]
    plan.override([f"train.init_from={tiny_st}"])  # the user names the start
    assert plan.config["train"]["init_from"] == str(tiny_st) != plan.config["embed"]["model"]
    assert "init_from" not in plan.scorer["train"]
    named = plan_with("adapt.student=scorer", "adapt.student_step_share=0.5")
    named.override([f"embed.model={tiny_st}"])  # no scorer run: nothing to start from
    assert named.scorer is None and "init_from" not in named.config["train"]
    assert named.config["train"]["max_steps"] == named.steps == named.pass_steps  # a whole pass
    # it continues from the scorer: its share of one pass, the scorer's steps and folder kept
    half = plan_with("adapt.student=scorer", "adapt.student_step_share=0.5")
    full = plan_with("adapt.student=scorer", "adapt.student_step_share=1")
    assert half.config["train"]["max_steps"] == half.steps == max(1, round(full.steps * 0.5))
    assert half.config["train"]["eval_steps"] == max(1, half.steps // 2)
    assert (
        half.scorer == full.scorer
        and half.config["embed"]["model"] == full.config["embed"]["model"]
    )
    assert half.cpu_s < full.cpu_s
    # no scorer run: the download is the start, for one whole pass
    alone = plan_with("adapt.student=scorer", "adapt.scorer=download")
    assert "init_from" not in alone.config["train"] and alone.steps == full.steps


def test_adapt_with_an_in_domain_scorer_trains_it_first_and_labels_with_it(
    tmp_path, tiny_st
) -> None:
    recipe = _in_domain_recipe(tmp_path, tiny_st)
    root, out_dir = tmp_path / "root", tmp_path / "adapted"
    argv = ["adapt", str(SAMPLE), "--model", str(tiny_st), "--recipe", str(recipe)]
    argv += ["--root", str(root), "--out", str(out_dir), "--run-id", "d1", "--no-progress"]
    out = CliRunner().invoke(app, argv)
    assert out.exit_code == 0, out.output
    cfg = yaml.safe_load((root / "adapt" / "d1.yaml").read_text())
    scorer = Path(cfg["embed"]["model"])
    assert scorer.is_dir() and (root / "adapt" / "d1-scorer.yaml").exists()
    first = json.loads((root / "runs" / "d1-scorer.json").read_text())["stages"]
    second = json.loads((root / "runs" / "d1.json").read_text())["stages"]
    # the scorer's run trains on the pairs' sentences: it embeds and labels nothing
    assert set(first) == {"shard", "contexts", "queries", "pairs", "train"}
    # the recipe's run shares its pairs, and embeds and labels with the scorer
    for stage in ("shard", "queries", "pairs"):
        assert first[stage]["fingerprint"] == second[stage]["fingerprint"]
    # ... and trains on exactly the pairs of the label stage's train split
    parts = sorted(Path(second["label"]["path"]).glob("part-*.parquet"))
    labels = pa.concat_tables(pq.read_table(f) for f in parts)
    in_train = [sp == "train" for sp in labels.column("split").to_pylist()]
    metrics = json.loads((Path(first["train"]["path"]) / "files" / "metrics.json").read_text())
    assert metrics["n_train_pairs"] == sum(in_train) < labels.num_rows
    assert first["train"]["fingerprint"] != second["train"]["fingerprint"]
    # ... starting from the scorer's weights (the recipe's adapt.student), half a pass
    student = json.loads((Path(second["train"]["path"]) / "files" / "metrics.json").read_text())
    assert student["init_from"] == str(scorer) and student["backbone"] == str(tiny_st)
    assert student["steps"] == cfg["train"]["max_steps"] < metrics["steps"]
    trained = Path(first["train"]["path"]) / "files" / "model" / "model.safetensors"
    assert (scorer / "model.safetensors").read_bytes() == trained.read_bytes()
    assert (out_dir / "README.md").exists() and "scorer: " in out.output
    # a rerun reuses both runs and the copied scorer
    again = CliRunner().invoke(app, argv[:-3] + ["--run-id", "d1", "--overwrite"])
    assert again.exit_code == 0, again.output
    rec = json.loads((root / "runs" / "d1.json").read_text())
    assert all(st["shards_computed"] == 0 for st in rec["stages"].values())
    # a scorer folder holding other weights is replaced by the scorer run's, whole
    (scorer / "model.safetensors").write_bytes(b"not these weights")
    third = CliRunner().invoke(app, argv[:-3] + ["--run-id", "d1", "--overwrite"])
    assert third.exit_code == 0, third.output
    assert (scorer / "model.safetensors").read_bytes() == trained.read_bytes()
    assert not [p for p in scorer.parent.iterdir() if p.name.startswith(".")]


def test_the_cost_model_scales_with_the_encoder_and_the_dev_tasks() -> None:
    from ctxsim.flows.adapt import model_cost_factor

    rules = AdaptRules()
    base = sizes(400_000, rules, 32, 4, None)[3]
    assert sizes(400_000, rules, 32, 4, None, 8.0)[3] > 7 * base  # mpnet's 12 x 768^2
    with_dev = sizes(400_000, rules, 32, 4, None, 1.0, 1000)[3]
    assert with_dev == pytest.approx(base + 1000 * rules.cpu_s_per_dev_item)
    assert model_cost_factor("no/such/model") == 1.0
    half = AdaptRules(cpu_bf16_factor=0.5, cpu_bf16_step_factor=0.5)
    fp32, bf16 = (
        sizes(400_000, half, 32, 4, None)[3],
        sizes(400_000, half, 32, 4, None, bf16=True)[3],
    )
    assert bf16 == pytest.approx(half.cpu_s_fixed + 0.5 * (fp32 - half.cpu_s_fixed))
    dev_fp32, dev_bf16 = (
        sizes(400_000, half, 32, 4, None, 1.0, 1000, bf16=True, eval_bf16=e)[3] for e in (0, 1)
    )
    assert dev_fp32 - dev_bf16 == pytest.approx(0.5 * 1000 * half.cpu_s_per_dev_item)


@pytest.mark.parametrize("bf16_units", [False, True], ids=["float32 CPU", "bf16 CPU"])
def test_the_printed_cost_follows_the_trainings_the_configs_hold(
    tmp_path, tiny_st, monkeypatch, bf16_units
) -> None:
    """--set on a training (steps, fixed layers, dropout, its masks, unpadding, its context cap)
    reprices the plan: the scorer's steps at the dearer context step, a fixed layer at its
    FLOPs, no dropout, masks from bytes and a BERT's unpadded layers at their measured factors,
    a token cap by its measured power, bf16 steps at their factor on a CPU with the units
    (either CPU, whatever this one has); the written configs are headed by it."""
    from ctxsim.flows.adapt import (
        batch_step_factor,
        frozen_step_share,
        model_layers,
        seq_length_step_factor,
    )
    from ctxsim.models import encoders

    monkeypatch.setattr(encoders, "bf16_available", lambda device: bf16_units)
    recipe = _in_domain_recipe(tmp_path, tiny_st)
    plan = adapt_config([str(SAMPLE)], str(tiny_st), None, None, str(tmp_path / "r"), recipe=recipe)
    assert plan.scorer is not None and plan.prices is not None
    rules, layers = plan.prices.rules, model_layers(str(tiny_st))
    assert layers == 2  # the tiny encoder's
    scorer, student = plan.scorer["train"], plan.config["train"]
    step = rules.cpu_s_per_step * plan.prices.model_factor
    context_step = rules.cpu_s_per_context_step * plan.prices.model_factor
    assert scorer["bf16_cpu"] and student["bf16_cpu"]  # the recipe's: bf16 where the CPU has it
    if bf16_units:
        step, context_step = (c * rules.cpu_bf16_step_factor for c in (step, context_step))
    assert rules.cpu_step_seq_length == 128  # the recipe's rules: measured at a 128 cap
    assert scorer["max_seq_length"] == student["max_seq_length"] == 32  # the tiny recipe's
    context_step *= seq_length_step_factor(32, 128, rules.cpu_context_step_seq_exponent)
    step *= seq_length_step_factor(32, 128, rules.cpu_step_seq_exponent)
    assert rules.cpu_step_batch_size == 32 and student["batch_size"] == 8  # a quarter's work
    context_step, step = context_step / 4, step / 4
    trainings = scorer["max_steps"] * context_step + student["max_steps"] * step
    assert scorer["dropout_masks"] == student["dropout_masks"] == "auto"  # bytes on a CPU
    assert scorer["unpad"] == student["unpad"] == "auto"  # real tokens only for a BERT on a CPU
    assert plan.prices.model_type == "bert" and rules.cpu_unpad_factor < 1
    plan.override(["train.unpad=false"])  # both trainings padded: the masks' factor alone
    masks = rules.cpu_byte_masks_factor
    assert plan.cpu_s == pytest.approx(plan.fixed_cpu_s + trainings * masks)
    plan.override(["train.unpad=auto"])
    assert plan.cpu_s == pytest.approx(
        plan.fixed_cpu_s + trainings * masks * rules.cpu_unpad_factor
    )
    plan.prices = replace(plan.prices, model_type="mpnet")  # auto unpads a BERT only
    plan.override(["train.unpad=auto"])
    assert plan.cpu_s == pytest.approx(plan.fixed_cpu_s + trainings * masks)
    plan.prices = replace(plan.prices, model_type="bert")
    plan.override(["train.unpad=false"])

    before = plan.cpu_s
    plan.override(["train.freeze_layers=1"])  # both trainings: 1 of the tiny encoder's 2 fixed
    assert frozen_step_share(1, 2) == pytest.approx(4 / 6)
    assert plan.cpu_s == pytest.approx(plan.fixed_cpu_s + trainings * 4 / 6 * masks)
    plan.override(["train.dropout=0"])
    assert plan.cpu_s == pytest.approx(
        plan.fixed_cpu_s + trainings * 4 / 6 * rules.cpu_no_dropout_factor
    )
    priced = plan.prices
    plan.prices = replace(priced, rules=rules.model_copy(update={"cpu_byte_masks_factor": 0.75}))
    plan.override(["train.dropout=0.1", "train.dropout_masks=auto"])  # bytes on the CPU
    assert plan.cpu_s == pytest.approx(plan.fixed_cpu_s + trainings * 4 / 6 * 0.75)
    plan.override(["train.dropout_masks=torch"])
    assert plan.cpu_s == pytest.approx(plan.fixed_cpu_s + trainings * 4 / 6)
    plan.override(["train.context_gradient=sentence"])  # both trainings' steps
    gradient = rules.cpu_sentence_gradient_factor
    assert gradient < 1 and plan.cpu_s == pytest.approx(
        plan.fixed_cpu_s + trainings * 4 / 6 * gradient
    )
    plan.override(["train.context_gradient=both"])
    plan.prices = priced
    plan.override(["train.freeze_layers=0", "train.dropout=0.1", "train.max_steps=1"])
    assert plan.cpu_s < before and plan.cpu_s == pytest.approx(
        plan.fixed_cpu_s + context_step + step
    )
    plan.override(["train.max_seq_length=256"])  # twice the cap the rules were measured at
    step_256, context_256 = (
        c / seq_length_step_factor(32, 128, sh) * 2**sh
        for c, sh in (
            (step, rules.cpu_step_seq_exponent),
            (context_step, rules.cpu_context_step_seq_exponent),
        )
    )
    assert rules.cpu_context_step_seq_exponent > rules.cpu_step_seq_exponent > 0
    assert plan.cpu_s == pytest.approx(plan.fixed_cpu_s + context_256 + step_256)
    plan.override(["train.batch_size=16"])  # twice the batch: twice a step's tokens
    assert plan.cpu_s == pytest.approx(plan.fixed_cpu_s + 2 * (context_256 + step_256))
    assert batch_step_factor(16, 32) == 0.5 and batch_step_factor(16, 0) == 1.0
    assert seq_length_step_factor(192, 0, 1.2) == seq_length_step_factor(None, 128, 1.2) == 1.0
    assert seq_length_step_factor(256, 128, 1.2) == pytest.approx(2**1.2)
    assert frozen_step_share(2, None) == 1.0 and frozen_step_share(9, 6) == pytest.approx(1 / 3)
    # the written configs carry the plan as it stands
    assert f"#   predicted cost: {plan.cpu_s / 3600:.2f} CPU-hours" in dump_config(plan, "x")


def test_the_in_domain_scorer_trains_its_share_of_the_recipes_steps_and_is_priced_so(
    tmp_path, tiny_st
) -> None:
    recipe = _in_domain_recipe(tmp_path, tiny_st)
    root = str(tmp_path / "root")
    full, part = (
        adapt_config(
            [str(SAMPLE)],
            str(tiny_st),
            None,
            None,
            root,
            recipe=recipe,
            rule_overrides=[f"adapt.scorer_step_share={share}", "adapt.student_step_share=1"],
        )
        for share in (1, 0.5)
    )
    assert full.scorer is not None
    assert full.scorer["train"]["max_steps"] == full.config["train"]["max_steps"]
    assert part.scorer is not None
    steps = part.config["train"]["max_steps"]
    assert steps == full.config["train"]["max_steps"]  # the recipe's own training is unchanged
    assert part.scorer["train"]["max_steps"] == max(1, round(steps * 0.5))
    assert part.scorer["train"]["eval_steps"] == max(1, part.scorer["train"]["max_steps"] // 2)
    # a different scorer config: a different scorer folder, named in the recipe's embed.model
    assert part.config["embed"]["model"] != full.config["embed"]["model"]
    # the cost model prices half a second training
    rules = read_recipe(RECIPE)[1]
    one = sizes(2_600_000, rules, 32, 4, None)[3]
    half = sizes(2_600_000, rules, 32, 4, None, 1.0, 0, False, 1.5)[3]
    assert half - one == pytest.approx(rules.cpu_s_per_step * 250 * 0.5)
    # the recipe's: the scorer's share and the student's (continuing from it), the scorer's
    # steps priced at the dearer context step
    dearer = rules.cpu_s_per_context_step / rules.cpu_s_per_step
    dearer *= (rules.scorer_max_seq_length / rules.cpu_step_seq_length) ** (
        rules.cpu_context_step_seq_exponent
    )
    assert priced_passes(rules) == pytest.approx(
        rules.scorer_step_share * dearer + rules.student_step_share
    )
    assert priced_passes(AdaptRules(scorer="in-domain", scorer_step_share=0.5)) == 1.5
    assert priced_passes(AdaptRules(scorer="download", student="scorer")) == 1.0


def test_the_in_domain_scorer_trains_at_its_own_token_cap_and_is_priced_at_it(
    tmp_path, tiny_st
) -> None:
    """adapt.scorer_max_seq_length cuts the scorer's right contexts, not the student's; a
    --set on train reaches both trainings, one on scorer.train the scorer's alone."""
    recipe = _in_domain_recipe(tmp_path, tiny_st)
    root = str(tmp_path / "root")
    same, short = (
        adapt_config(
            [str(SAMPLE)], str(tiny_st), None, None, root, recipe=recipe, rule_overrides=rules
        )
        for rules in ([], ["adapt.scorer_max_seq_length=16"])
    )
    assert same.scorer is not None and short.scorer is not None
    cap = same.config["train"]["max_seq_length"]
    assert same.scorer["train"]["max_seq_length"] == cap != 16
    assert short.scorer["train"]["max_seq_length"] == 16
    assert short.config["train"]["max_seq_length"] == cap  # the student keeps the recipe's
    assert short.config["embed"]["model"] != same.config["embed"]["model"]  # another scorer
    assert short.prices is not None
    assert short.cpu_s < same.cpu_s  # the scorer's steps priced at the shorter cap
    short.override(["scorer.train.max_seq_length=96"])
    assert (short.scorer["train"]["max_seq_length"], short.config["train"]["max_seq_length"]) == (
        96,
        cap,
    )
    short.override(["train.max_seq_length=192"])
    assert short.scorer["train"]["max_seq_length"] == short.config["train"]["max_seq_length"] == 192
    # the budget's sizing prices the scorer's pass at its cap too
    rules = AdaptRules(scorer="in-domain", scorer_step_share=1.0, cpu_step_seq_length=128)
    capped = rules.model_copy(update={"scorer_max_seq_length": 64})
    ratio = (64 / 128) ** rules.cpu_context_step_seq_exponent
    assert priced_passes(capped) - 1 == pytest.approx((priced_passes(rules) - 1) * ratio)
    with pytest.raises(InputError, match="max_seq_length=2: adapt.scorer_max_seq_length: "):
        adapt_config(
            [str(SAMPLE)], str(tiny_st), None, None, root, recipe=recipe,
            rule_overrides=["adapt.scorer_max_seq_length=2"],
        )  # fmt: skip


def test_a_later_run_on_a_root_prices_the_evaluation_its_cache_spares(tmp_path, tiny_st) -> None:
    """An earlier run on the root evaluated the same dev tasks against the same download, with
    the evaluation cache on: the download's encodings are read back, so evaluate is priced at
    ``cpu_eval_cached_share`` and the plan says why; any other earlier run changes nothing."""
    from ctxsim.flows.adapt import evaluated_before

    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "x.pairs.tsv").write_text(
        "sentence1\tsentence2\tlabel\n" + "".join(f"a {i}\tb {i}\t{i % 2}\n" for i in range(40))
    )
    root = tmp_path / "root"
    first = adapt_config([str(SAMPLE)], str(tiny_st), str(dev), None, str(root))

    def earlier_run(eval_dir: Path, backbone: str, cache: bool = True) -> None:
        (root / "runs").mkdir(parents=True, exist_ok=True)
        config = {"evaluate": {"eval_dir": str(eval_dir), "cache": cache}, "train": {}}
        config["train"]["backbone"] = backbone
        record = {"config": config, "stages": {"evaluate": {"path": "x"}}}
        (root / "runs" / "r.json").write_text(json.dumps(record))

    earlier_run(dev, str(tiny_st))
    assert not evaluated_before(str(root), str(dev), str(tiny_st))  # no cache written
    from ctxsim.store.artefacts import ArtefactStore

    (ArtefactStore(root).cache_dir("evaluate") / "k.npy").write_bytes(b"x")
    assert evaluated_before(str(root), str(dev), str(tiny_st))
    later = adapt_config([str(SAMPLE)], str(tiny_st), str(dev), None, str(root))
    rules = later.prices.rules
    assert rules.cpu_eval_cached_share < 1
    no_dev = adapt_config([str(SAMPLE)], str(tiny_st), None, None, str(tmp_path / "r2"))
    per_item = (first.fixed_cpu_s - no_dev.fixed_cpu_s) / 40
    assert per_item > 0
    spared = 40 - round(40 * rules.cpu_eval_cached_share)
    assert first.fixed_cpu_s - later.fixed_cpu_s == pytest.approx(spared * per_item)
    assert any("evaluation cache" in n for n in later.notes)
    assert not any("evaluation cache" in n for n in first.notes)
    for other in (
        (tmp_path, str(tiny_st), True),
        (dev, "minilm", True),
        (dev, str(tiny_st), False),
    ):
        earlier_run(*other)  # another dev folder, another download, the cache off
        assert not evaluated_before(str(root), str(dev), str(tiny_st))


def test_question_records_hear_of_the_swaps_which_stay_the_recipe_trainings(
    tmp_path, tiny_st
) -> None:
    """A corpus whose records lead with a question gets the plan's note on
    train.context_swap_share (one without, the note on the `context` objective); that key, the
    hard negatives' and the labels' share reach the recipe's training alone (the scorer trains
    right contexts without labels, where all three are refused)."""
    qa = tmp_path / "qa.jsonl"
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    qa.write_text(
        "".join(json.dumps(r | {"question": f"What is {r['title']}?"}) + "\n" for r in records)
    )
    recipe = _in_domain_recipe(tmp_path, tiny_st)
    root = str(tmp_path / "root")
    plan = adapt_config([str(qa)], str(tiny_st), None, None, root, recipe=recipe)
    assert plan.config["shard"]["lead_fields"] == ["question"]
    assert any("context_swap_share=0.25" in line for line in plan.lines())
    plain = adapt_config([str(SAMPLE)], str(tiny_st), None, None, root, recipe=recipe)
    assert not any("context_swap_share" in line for line in plain.lines())
    # no question records: the note on dropping the labels for retrieval instead, once
    assert sum("train.objective=context" in line for line in plain.lines()) == 1
    assert not any("train.objective=context" in line for line in plan.lines())
    plain.override(["train.objective=context"])
    assert not any("train.objective=context" in line for line in plain.lines())
    plan.override(
        [
            "train.context_swap_share=0.25",
            "train.label_share=0.5",
            "train.context_hard_negative_share=0.25",
        ]
    )
    assert plan.config["train"]["context_swap_share"] == 0.25
    assert plan.config["train"]["label_share"] == 0.5
    assert plan.config["train"]["context_hard_negative_share"] == 0.25
    scorer = plan.scorer["train"]
    assert scorer.get("label_share") is None and not scorer.get("context_swap_share")
    assert not scorer.get("context_hard_negative_share")
    assert not any("context_swap_share" in line for line in plan.lines())  # set: no note
    plan.check()  # both configs load


def test_a_larger_encoder_is_priced_by_a_power_of_its_work(tmp_path, tiny_st, monkeypatch) -> None:
    """adapt.cpu_model_work_exponent: 8x MiniLM's work per token (mpnet's) prices its steps,
    embed and evaluation at 8 ** 0.75 = 4.76x (mpnet took 4.6-4.8x), not 8x."""
    import ctxsim.flows.adapt as adapt

    monkeypatch.setattr(adapt, "model_cost_factor", lambda model: 8.0)
    recipe = _in_domain_recipe(tmp_path, tiny_st)

    def plan_with(exponent: float):
        return adapt_config(
            [str(SAMPLE)], str(tiny_st), None, None, str(tmp_path / "root"), recipe=recipe,
            rule_overrides=[f"adapt.cpu_model_work_exponent={exponent}"],
        )  # fmt: skip

    linear, power = plan_with(1.0), plan_with(0.75)
    assert linear.prices.model_factor == 8.0
    assert power.prices.model_factor == pytest.approx(8.0**0.75)
    assert power.cpu_s < linear.cpu_s
    assert read_recipe(RECIPE)[1].cpu_model_work_exponent == 0.75
