"""Tiny end-to-end: label artefact -> train (tiny random BERT) -> evaluate (tiny STS/iSTS)."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.stage import RunParams, Stage, StageParams, resolve_stage, run_stage_locally

WORDS = "man woman dog cat plays runs eats guitar ball park street food red big small".split()


def _sent(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))) + " ."


class _FakeLabel(Stage):
    """Stands in for the `label` stage: a fixed table with its schema's columns."""

    name = "label"
    Params = StageParams

    def __init__(self, table: pa.Table):
        self.table = table

    def run_shard(self, ctx, shard):
        return self.table, {"n": self.table.num_rows}


def _label_table(n: int = 64) -> pa.Table:
    rng = random.Random(0)
    s1, s2, lab, split = [], [], [], []
    for i in range(n):
        a = _sent(rng)
        b = a if i % 3 == 0 else _sent(rng)
        s1.append(a)
        s2.append(b)
        lab.append(1.0 if a == b else round(rng.uniform(0, 0.6), 3))
        split.append("dev" if i % 8 == 0 else "train")
    return pa.table({"s1": s1, "s2": s2, "label": pa.array(lab, pa.float32()), "split": split})


def _sts_dir(root):
    rng = random.Random(1)
    for name in (
        "STS12/STS12.a.tsv",
        "STS12/STS12.b.tsv",
        "STS13/STS13.c.tsv",
        "STSb/STSb.dev.tsv",
        "STSb/STSb.test.tsv",
    ):
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        lines = ["sentence1\tsentence2\tscore"]
        for i in range(24):
            a = _sent(rng)
            b = a.replace("dog", "cat") if i % 2 else _sent(rng)
            lines.append(f"{a}\t{b}\t{5.0 if i % 2 else rng.uniform(0, 2):.2f}")
        p.write_text("\n".join(lines) + "\n")


def _ists_dir(root):
    d = root / "test_goldStandard"
    d.mkdir(parents=True)
    base = d / "STSint.testinput.headlines"
    (d / f"{base.name}.sent1.chunk.txt").write_text(
        "[ a man ] [ plays guitar ] [ . ]\n[ a dog ] [ runs ]\n"
    )
    (d / f"{base.name}.sent2.chunk.txt").write_text(
        "[ a man ] [ plays ball ] [ . ]\n[ the cat ] [ eats ]\n"
    )
    wa = """<sentence id="1" status="">
// a man plays guitar .
// a man plays ball .
<source>
1 a :
2 man :
3 plays :
4 guitar :
5 . :
</source>
<translation>
1 a :
2 man :
3 plays :
4 ball :
5 . :
</translation>
<alignment>
1 2 <==> 1 2 // EQUI // 5 // a man <==> a man
3 4 <==> 3 4 // SIMI // 3 // plays guitar <==> plays ball
5 <==> 5 // EQUI // 5 // . <==> .
</alignment>
</sentence>
<sentence id="2" status="">
// a dog runs
// the cat eats
<source>
1 a :
2 dog :
3 runs :
</source>
<translation>
1 the :
2 cat :
3 eats :
</translation>
<alignment>
1 2 <==> 1 2 // SIMI // 3 // a dog <==> the cat
3 <==> 3 // REL // 2 // runs <==> eats
</alignment>
</sentence>
"""
    (d / f"{base.name}.wa").write_text(wa)


def train_setup(root, eval_steps: int):
    """A store under ``root`` with a published fake label artefact, an STS dir, and the tiny
    train settings these tests train with (6 steps, a checkpoint every ``eval_steps``)."""
    from ctxsim.tasks.train import TrainParams

    store = ArtefactStore(root / "store")
    run = RunParams(device="cpu", seed=0)
    label, _ = run_stage_locally(
        resolve_stage(_FakeLabel(_label_table()), StageParams(), run, store, {})
    )
    sts = root / "sts"
    _sts_dir(sts)
    params = TrainParams(
        max_steps=6,
        eval_steps=eval_steps,
        batch_size=8,
        sts_dir=str(sts),
        tiny_vocab_size=200,
        max_seq_length=32,
    )
    return store, run, label, sts, params


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from ctxsim.tasks.train import TrainStage

    root = tmp_path_factory.mktemp("te")
    store, run, label, sts, params = train_setup(root, eval_steps=3)
    art, _ = run_stage_locally(resolve_stage(TrainStage(), params, run, store, {"label": label}))
    return root, store, run, art, sts, label


def test_train_outputs_reloadable_model(trained):
    from sentence_transformers import SentenceTransformer

    from ctxsim.tasks.evaluate import load_st

    root, store, run, art, sts, _ = trained
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["steps"] == 6 and info["dev_set"] == "STSb.dev" and info["n_train_pairs"] == 56
    assert -100 <= info["backbone_dev_spearman"] <= 100  # the bar before training, recorded
    assert info["beats_backbone"] == (info["best_dev_spearman"] > info["backbone_dev_spearman"])
    hist = art.read_table().to_pylist()
    assert any(r["dev_spearman"] is not None for r in hist)
    assert "ctxsim surrogate" in (art.files_dir / "model" / "README.md").read_text()
    m1 = SentenceTransformer(str(art.files_dir / "model"), device="cpu")
    m2 = load_st(art.files_dir / "model", "cpu", 32)
    texts = ["a man plays guitar .", "the dog runs in the park ."]
    e1 = m1.encode(texts, convert_to_numpy=True)
    from ctxsim.tasks.evaluate import encode_sentences

    e2 = encode_sentences(m2, texts, batch_size=1)
    assert np.allclose(e1, e2, atol=1e-5)
    # trained weights differ from the random backbone's
    base = load_st(art.files_dir / "backbone", "cpu", 32)
    assert not np.allclose(encode_sentences(base, texts), e2, atol=1e-4)


def test_evaluate_stage_end_to_end(trained):
    from ctxsim.tasks.evaluate import EvaluateParams, EvaluateStage

    root, store, run, art, sts, _ = trained
    _ists_dir(root / "ists")
    params = EvaluateParams(
        sts_dir=str(sts),
        ists_dir=str(root / "ists"),
        baselines=["backbone", "dynamax", "tfidf"],
        extra_models={"same-as-backbone": str(art.files_dir / "backbone")},
        dynamax_vectors="backbone",
        bootstrap_resamples=50,
        max_seq_length=32,
    )
    ev, _ = run_stage_locally(resolve_stage(EvaluateStage(), params, run, store, {"train": art}))
    rows = ev.read_table().to_pylist()
    systems = {(r["system"], r["similarity"]) for r in rows}
    assert {
        ("surrogate", "cosine"),
        ("surrogate", "rcmd"),
        ("backbone", "cosine"),
        ("dynamax", "dynamax"),
        ("tfidf", "tfidf"),
        ("same-as-backbone", "cosine"),
    } <= systems
    # an extra model is scored like a baseline: the backbone under another name reads the same
    by = {(r["system"], r["similarity"], r["dataset"], r["subset"]): r for r in rows}
    for (system, sim, d, sub), r in by.items():
        if system == "backbone" and sim == "cosine":
            twin = by[("same-as-backbone", "cosine", d, sub)]
            assert twin["spearman_all"] == pytest.approx(r["spearman_all"], abs=1e-9)
    sts12 = [
        r
        for r in rows
        if r["dataset"] == "STS12"
        and r["subset"] == "all"
        and r["system"] == "surrogate"
        and r["similarity"] == "cosine"
    ]
    assert len(sts12) == 1 and sts12[0]["n_pairs"] == 48
    res = json.loads((ev.files_dir / "results.json").read_text())
    assert set(res["datasets"]) == {"STS12", "STS13", "STSb.dev", "STSb.test"}
    assert res["datasets"]["STS12"]["similarity"] == "cosine"
    assert (
        "headlines" in res["ists"] and 0 <= res["ists"]["headlines"]["rcmd"]["f1_ali_equi"] <= 100
    )
    assert set(res["hard"]) == {"hard_high_gold", "hard_low_gold", "negation"}
    assert any(k.startswith("surrogate.cosine-vs-backbone") for k in res["bootstrap"])
    assert "surrogate.cosine-vs-tfidf.tfidf" in res["bootstrap"]
    for f in ("report.md", "scatter.png", "heatmaps.png"):
        assert (ev.files_dir / f).exists()
    assert "| STS12 |" in (ev.files_dir / "report.md").read_text()
    assert ev.stats["n_sets"] == 5
    # the adapted model comes out as a model directory whose card lists this evaluation; its
    # weights are links to the train artefact's, whose own card is untouched
    card = (ev.files_dir / "model" / "README.md").read_text()
    assert "# Evaluation (ctxsim `evaluate` stage)" in card and "| STS12 |" in card
    assert "# Evaluation" not in (art.files_dir / "model" / "README.md").read_text()
    from ctxsim.tasks.evaluate import load_st

    assert load_st(ev.files_dir / "model", "cpu", 32) is not None


def test_evaluate_extra_model_that_is_not_a_model_names_the_key(trained, tmp_path):
    from ctxsim.store.errors import InputError
    from ctxsim.tasks.evaluate import EvaluateParams, EvaluateStage

    root, store, run, art, sts, _ = trained
    params = EvaluateParams(sts_dir=str(sts), extra_models={"simcse": str(tmp_path)})
    with pytest.raises(
        InputError, match=r"evaluate\.extra_models\.simcse: .*not a model directory"
    ):
        run_stage_locally(resolve_stage(EvaluateStage(), params, run, store, {"train": art}))
    with pytest.raises(ValueError, match="built-in"):
        EvaluateParams(extra_models={"tfidf": str(tmp_path)})


def test_evaluate_cli_compares_with_named_baselines(trained, tmp_path):
    """`ctxsim evaluate MODEL --baseline NAME=MODEL`: the baseline is scored on the same pairs
    and compared with paired intervals; a malformed spec is one error line, exit 2."""
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    _, _, _, art, sts, _ = trained
    out = tmp_path / "eval.json"
    model = str(art.files_dir / "model")
    backbone = f"backbone={art.files_dir / 'backbone'}"
    args = ["evaluate", model, "--sts-dir", str(sts), "--max-pairs", "12", "--json-out", str(out)]
    res = CliRunner().invoke(app, [*args, "--baseline", backbone])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    assert "backbone" in result["baselines"]
    assert any(k.startswith("surrogate.cosine-vs-backbone") for k in result["bootstrap"])
    bad = CliRunner().invoke(app, [*args, "--baseline", "backbone"])
    assert bad.exit_code == 2 and "NAME=MODEL" in bad.output
    # --cache-dir: the baseline's STS scores kept and read back, the same figures
    cached = [*args, "--baseline", backbone, "--cache-dir", str(tmp_path / "cache")]
    for _ in range(2):
        res = CliRunner().invoke(app, cached)
        assert res.exit_code == 0, res.output
        assert json.loads(out.read_text())["datasets"] == result["datasets"]
        assert len(list((tmp_path / "cache").glob("*.npy"))) == 5  # one per STS file


def test_evaluate_without_data_completes(trained, tmp_path):
    from ctxsim.tasks.evaluate import evaluate_model

    _, _, _, art, _, _ = trained
    res = evaluate_model(art.files_dir / "model", tmp_path / "missing", None, max_seq_length=32)
    assert res["n_sets"] == 0 and "ctxsim data download sts" in res["warnings"][0]


def test_clrcmd_loss_trains(trained):
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    from ctxsim.models.training.losses.clrcmd_loss import CLRCMDLoss
    from ctxsim.tasks.evaluate import load_st

    root, _, _, art, _, _ = trained
    model = load_st(art.files_dir / "backbone", "cpu", 32)
    ds = Dataset.from_dict(
        {
            "sentence1": ["a man plays", "a dog runs", "red ball", "big cat eats"],
            "sentence2": ["a man plays guitar", "the dog runs", "small food", "cat eats"],
            "score": [1.0, 0.9, 0.1, 0.8],
        }
    )
    loss = CLRCMDLoss(model, positive_threshold=0.5)
    feats = [model.preprocess(list(ds["sentence1"])), model.preprocess(list(ds["sentence2"]))]
    import torch

    v = loss(feats, torch.tensor(ds["score"]))
    assert v.item() > 0 and v.requires_grad
    dense = CLRCMDLoss(model, positive_threshold=0.5, sparse=False)
    assert dense(feats, torch.tensor(ds["score"])).item() == pytest.approx(v.item(), rel=1e-5)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(root / "cl"),
        max_steps=2,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    before = [p.detach().clone() for p in model.parameters()]
    SentenceTransformerTrainer(model=model, args=args, train_dataset=ds, loss=loss).train()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def _train_crashing_at_step_4(trained, monkeypatch, lr: float):
    """Run the train stage until a simulated crash after step 4 (checkpoints every 2 steps);
    returns a function that runs it again without the crash and gives its metrics."""
    from transformers import TrainerCallback

    import ctxsim.tasks.train as T
    import ctxsim.tasks.train.trainer as trainer

    root, store, run, _, sts, label = trained

    class Boom(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 4:
                raise RuntimeError("simulated crash")

    params = T.TrainParams(
        max_steps=6,
        eval_steps=2,
        batch_size=8,
        sts_dir=str(sts),
        tiny_vocab_size=200,
        max_seq_length=32,
        lr=lr,  # one lr per test: its own artefact in the shared store
    )
    monkeypatch.setattr(trainer, "extra_callbacks", lambda: [Boom()])
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_stage_locally(resolve_stage(T.TrainStage(), params, run, store, {"label": label}))

    def resume() -> dict:
        monkeypatch.setattr(trainer, "extra_callbacks", lambda: [])
        art, _ = run_stage_locally(
            resolve_stage(T.TrainStage(), params, run, store, {"label": label})
        )
        return json.loads((art.files_dir / "metrics.json").read_text())

    return resume


def test_train_resumes_after_a_crash(trained, monkeypatch):
    info = _train_crashing_at_step_4(trained, monkeypatch, lr=2e-4)()
    assert info["resumed"] is True and info["steps"] == 6


def test_train_skips_a_cut_short_checkpoint_and_cleans_up(trained, monkeypatch):
    """A save cut short (full disk) leaves a checkpoint without trainer_state.json: the resume
    takes the last complete one instead of failing on it; a finished stage keeps no checkpoints."""
    root = trained[0]
    resume = _train_crashing_at_step_4(trained, monkeypatch, lr=3e-4)
    ckpts = sorted(root.rglob("checkpoint-*"))
    assert ckpts, "the crash left no checkpoint to resume from"
    broken = ckpts[0].parent / "checkpoint-5"  # later than the good ones, weights only
    broken.mkdir()
    (broken / "model.safetensors").write_bytes(b"truncated")
    info = resume()
    assert info["resumed"] is True and info["steps"] == 6
    assert not broken.exists()
    assert not list(root.rglob("checkpoint-*"))  # deleted once the model was saved


def test_capped_sets_are_a_seeded_sample_in_file_order():
    """--max-pairs samples pairs across the file (STSb's first rows are all one genre)."""
    from ctxsim.readers.sts import StsSet, sample_pairs

    n = 200
    full = StsSet(
        "STSb", "test", [f"a{i}" for i in range(n)], [f"b{i}" for i in range(n)], list(range(n))
    )
    cap = sample_pairs(full, 20, seed=0)
    rows = [int(x[1:]) for x in cap.s1]
    assert len(rows) == 20 and rows == sorted(rows) and rows != list(range(20))
    assert cap.s2 == [f"b{i}" for i in rows] and cap.gold == rows
    assert (
        sample_pairs(full, 20, seed=0).s1 == cap.s1 and sample_pairs(full, 20, seed=1).s1 != cap.s1
    )
    assert max(rows) >= n // 2  # reaches the second half of the file
    assert sample_pairs(full, None, seed=0) is full
