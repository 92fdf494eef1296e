"""bench/bench_student_grid.py: a packed backbone is exact on the packed texts (float32) or
rounded as asked (float16), arm specs parse or fail clearly, and a pack trains every arm x rate,
then seeds for the best arm, and reports each arm at the rate it scored best with on dev."""

from __future__ import annotations

import json
from argparse import Namespace

import numpy as np
import pytest

TEXTS = [
    "a man plays the guitar .",
    "the dog runs in the park .",
    "a woman eats red food .",
    "what is high blood pressure ?",
    "blood pressure is the force of blood on the walls of arteries .",
    "a cat sleeps on the mat .",
] * 3
SIZE = {"vocab_size": 160, "hidden_size": 32, "layers": 1, "heads": 2, "max_seq_length": 32}


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory):
    """A tiny sentence-transformers directory (BERT + mean pooling)."""
    from ctxsim.models.training.sentence_encoder import build_model
    from ctxsim.models.training.tiny_backbone import build_tiny_bert

    root = tmp_path_factory.mktemp("st")
    bert = build_tiny_bert(TEXTS, root / "bert", **SIZE, seed=0)
    model = build_model(str(bert), 32, "cpu")
    model.save(str(root / "st"))
    return root / "st"


def _encode(path, texts):
    from ctxsim.tasks.evaluate import load_st

    return load_st(path, "cpu", 32).encode(texts, convert_to_numpy=True)


def test_arm_specs_parse_and_bad_ones_say_how(tmp_path):
    from bench.bench_student_grid import parse_arm

    assert parse_arm("mine:train.lr=2e-5,embed.model=mpnet") == (
        "mine",
        (None, ["train.lr=2e-5", "embed.model=mpnet"]),
    )
    assert parse_arm("lm@configs/medquad_lm.yaml") == ("lm", ("configs/medquad_lm.yaml", []))
    with pytest.raises(ValueError, match="NAME\\[@CONFIG\\]:KEY=VALUE"):
        parse_arm("mine:train.lr")


def test_a_float32_pack_is_exact_on_its_texts_and_smaller(tiny_st, tmp_path):
    from bench.bench_student_grid import TRIM_FILE, trim_backbone, unpack_backbone

    kept = TEXTS[:3]
    info = trim_backbone(tiny_st, kept, tmp_path / "packed")
    assert info["rows_kept"] < info["vocab"] and info["dtype"] == "float32"
    size = (tmp_path / "packed" / "model.safetensors").stat().st_size
    assert size < (tiny_st / "model.safetensors").stat().st_size
    out = unpack_backbone(tmp_path / "packed", tmp_path / "unpacked")
    assert not (out / TRIM_FILE).exists()
    np.testing.assert_array_equal(_encode(out, kept), _encode(tiny_st, kept))
    # a text with tokens the pack dropped is no longer encoded the same: the trim is real
    assert not np.allclose(_encode(out, TEXTS[3:4]), _encode(tiny_st, TEXTS[3:4]))


def test_a_float16_pack_rounds_the_weights_and_trains_in_float32(tiny_st, tmp_path):
    from safetensors.numpy import load_file

    from bench.bench_student_grid import trim_backbone, unpack_backbone

    trim_backbone(tiny_st, TEXTS, tmp_path / "packed", "float16")
    tensors = load_file(str(tmp_path / "packed" / "model.safetensors"))
    assert {str(v.dtype) for k, v in tensors.items() if k != "trim.ids"} == {"float16"}
    out = unpack_backbone(tmp_path / "packed", tmp_path / "unpacked")
    unpacked = load_file(str(out / "model.safetensors"))
    assert {str(v.dtype) for v in unpacked.values()} == {"float32"}
    a, b = _encode(out, TEXTS), _encode(tiny_st, TEXTS)
    assert not np.array_equal(a, b) and np.allclose(a, b, atol=1e-2)


def _write_pack(root, backbone):
    """A pack by hand: the download, and one labelled arm (CoSENT) trained for 2 steps."""
    import datasets

    from bench.bench_student_grid import PACK_MANIFEST, trim_backbone
    from ctxsim.tasks.train import TrainParams

    (root / "data").mkdir(parents=True)
    pairs = {
        "sentence1": TEXTS[:6],
        "sentence2": TEXTS[1:7],
        "score": [0.1, 0.9, 0.2, 0.8, 0.3, 0.7],
    }
    datasets.Dataset.from_dict(pairs).to_parquet(str(root / "data" / "p.parquet"))
    dom = root / "eval" / "domain" / "med"
    dom.mkdir(parents=True)
    (dom / "rqe.pairs.tsv").write_text(
        "sentence1\tsentence2\tlabel\n"
        + "".join(
            f"{a}\t{b}\t{i % 2}\n"
            for i, (a, b) in enumerate(zip(TEXTS[:6], TEXTS[1:7], strict=True))
        )
    )
    (dom / "dev_qa.jsonl").write_text(
        "".join(
            json.dumps({"qid": f"q{i}", "question": TEXTS[i], "answer": TEXTS[i + 1]}) + "\n"
            for i in range(4)
        )
    )
    sts = root / "eval" / "sts" / "STSb"
    sts.mkdir(parents=True)
    (sts / "STSb.dev.tsv").write_text(
        "sentence1\tsentence2\tscore\n"
        + "".join(
            f"{a}\t{b}\t{i % 5}.0\n"
            for i, (a, b) in enumerate(zip(TEXTS[:6], TEXTS[2:8], strict=True))
        )
    )
    params = TrainParams(backbone="minilm", max_steps=2, batch_size=2, max_seq_length=32)
    common = {"seed": 0, "max_steps": 2, "examples": 6, "pairs": 6, "label": "x"}
    arms = {
        "none": common | {"objective": "none", "multi": False, "files": {}},
        "labels": common
        | {"objective": "ctxsim", "multi": False, "files": {"train": "data/p.parquet"}},
    }
    for a in arms.values():
        a["params"] = params.model_dump(mode="json") | {"objective": a["objective"]}
        a["label_cpu_seconds"] = 0.0
    manifest = {"arms": arms, "steps": 2, "batch_size": 2, "sts_sets": ["STSb.dev"]}
    manifest["backbone"] = trim_backbone(backbone, TEXTS, root / "backbone")
    (root / PACK_MANIFEST).write_text(json.dumps(manifest))


def _run_args(tmp_path, backbone, budget_s: float) -> Namespace:
    """A hand pack under ``tmp_path`` and `run`'s arguments over it: two rates, two seeds for
    the best arm, on the CPU."""
    _write_pack(tmp_path / "pack", backbone)
    return Namespace(
        pack=str(tmp_path / "pack"),
        out=str(tmp_path / "runs"),
        work=str(tmp_path / "work"),
        arms=None,
        lrs=["1e-3", "1e-2"],
        seeds=2,
        seed_arms=1,
        budget_s=budget_s,
        device="cpu",
        max_seq_length=32,
        eval_batch=4,
    )


def test_a_pack_runs_every_arm_and_rate_then_seeds_and_reports_the_chosen_rate(tiny_st, tmp_path):
    from bench.bench_student_grid import RESULTS_FILE, report, run

    run(_run_args(tmp_path, tiny_st, budget_s=0.0))
    rows = [json.loads(x) for x in (tmp_path / "runs" / RESULTS_FILE).read_text().splitlines()]
    # the download once; the labelled arm at both rates, then its second seed at its best rate
    assert [(r["arm"], r["lr"], r["seed"]) for r in rows][:3] == [
        ("none", 1e-3, 0),
        ("labels", 1e-3, 0),
        ("labels", 1e-2, 0),
    ]
    best = max(rows[1:3], key=lambda r: (r["criterion"], -r["lr"]))
    assert (rows[3]["arm"], rows[3]["lr"], rows[3]["seed"]) == ("labels", best["lr"], 1)
    assert rows[0]["steps"] == 0 and rows[1]["steps"] == 2
    report(
        Namespace(
            pack=str(tmp_path / "pack"),
            runs=str(tmp_path / "runs"),
            reference=[],
            vs=["none", "teacher"],
            cache=str(tmp_path / "cache"),
            max_seq_length=32,
            resamples=50,
            out_dir=str(tmp_path / "res"),
            name="grid",
        )
    )
    res = json.loads((tmp_path / "res" / "grid.json").read_text())
    chosen = {r["arm"]: r for r in res["rows"]}
    assert chosen["labels"]["lr (best on dev)"] == best["lr"]
    assert chosen["labels"]["rates tried"] == 2
    assert chosen["none"]["lr (best on dev)"] == "-" and chosen["none"]["rates tried"] == 0
    md = (tmp_path / "res" / "grid.md").read_text()
    assert "every model trained" in md and "seeds (best lr)" in md


def test_a_budget_cut_keeps_the_models_it_finished(tiny_st, tmp_path):
    from bench.bench_student_grid import RESULTS_FILE, run

    # spent after the first model: no second one starts
    run(_run_args(tmp_path, tiny_st, budget_s=1e-9))
    rows = (tmp_path / "runs" / RESULTS_FILE).read_text().splitlines()
    assert [json.loads(r)["arm"] for r in rows] == ["none"]
    assert (tmp_path / "runs" / json.loads(rows[0])["scores"]).exists()


def test_the_grid_gets_the_train_stage_arguments_from_a_device_and_a_seed(tmp_path) -> None:
    """The trainer's arguments take the run's device and seed, so the grid (which has no stage
    context) calls the stage's own ``training_args`` without a stand-in context."""
    from ctxsim.tasks.train import TrainParams
    from ctxsim.tasks.train.trainer import training_args

    p = TrainParams(lr=3e-5, batch_size=8)
    args = training_args(p, tmp_path / "ckpt", 25, "cpu", 7, False, None)
    assert (args.seed, args.data_seed, args.max_steps, args.use_cpu) == (7, 7, 25, True)
    assert (args.learning_rate, args.per_device_train_batch_size) == (3e-5, 8)
