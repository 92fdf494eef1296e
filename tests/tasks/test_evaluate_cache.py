"""The `evaluate` stage's cache of its baselines' encodings (tasks/evaluate/encoding_cache.py):
a second evaluation reads the baseline's vectors instead of encoding them and reports the same
bytes; the surrogate is always encoded; a changed model, batch size, autocast or text list is a
new key; a corrupt file is moved aside and encoded again; an unwritable cache only warns."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.models.evaluation.test_domain_eval import QA_ROWS, _pairs, _qa
from tests.tasks.test_train_evaluate import trained  # noqa: F401 - the fixture

PAIR_ROWS = [("what causes gout ?", "why does gout happen ?", "1")] * 2 + [
    ("what causes gout ?", "how is asthma treated ?", "0")
] * 2


@pytest.fixture()
def models(tmp_path):
    """Two tiny encoders (the trained one and its baseline) and a folder of a pairs and a QA
    set."""
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.train import TrainParams

    texts = [r["question"] for r in QA_ROWS] + [r["answer"] for r in QA_ROWS]
    texts += [t for a, b, _ in PAIR_ROWS for t in (a, b)]
    params = TrainParams(tiny_vocab_size=80, max_seq_length=16)
    surrogate = build_tiny_backbone(texts, tmp_path / "surrogate", params, 0)
    baseline = build_tiny_backbone(texts, tmp_path / "baseline", params, 1)
    data = tmp_path / "eval"
    _pairs(data / "p.pairs.tsv", PAIR_ROWS)
    _qa(data / "d_qa.jsonl", QA_ROWS)
    return Path(surrogate), Path(baseline), data


def _evaluate(models, cache, **kw):
    from ctxsim.tasks.evaluate import evaluate_model

    surrogate, baseline, data = models
    args = {"similarities": ["cosine"], "max_seq_length": 16, "bootstrap_resamples": 30}
    return evaluate_model(
        surrogate,
        data,
        baselines={"baseline": str(baseline), "tfidf": None},
        encoding_cache=cache,
        **(args | kw),
    )


@pytest.fixture()
def encoded(monkeypatch):
    """The texts each encoder pass of the evaluation was given (by the model's path)."""
    import ctxsim.tasks.evaluate.domain as D

    seen: list[tuple[str, int]] = []
    encode = D.encode_sentences

    def spy(model, texts, batch_size=64):
        seen.append((model.tokenizer.name_or_path, len(texts)))
        return encode(model, texts, batch_size)

    monkeypatch.setattr(D, "encode_sentences", spy)
    return seen


def _files(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.npy")) if cache.is_dir() else []


def test_a_second_evaluation_reads_the_baseline_from_the_cache_and_reports_the_same(
    models, tmp_path, encoded
):
    cache = tmp_path / "cache"
    plain = _evaluate(models, None)
    assert not _files(cache)
    first = _evaluate(models, cache)
    # pairs: two sides; QA: questions and answers; the baseline's four text lists, and no
    # file for the surrogate
    assert len(_files(cache)) == 4
    assert all(Path(f"{f}.sha256").is_file() for f in _files(cache))
    encoded.clear()
    second = _evaluate(models, cache)
    by_model = {Path(m).name for m, _ in encoded}
    assert by_model == {"surrogate"}  # the baseline was not encoded again
    dumps = [json.dumps(r, sort_keys=True) for r in (plain, first, second)]
    assert dumps[0] == dumps[1] == dumps[2]
    assert second["domain"]["retrieval"]["d_qa"]["baseline"]["n_queries"] == len(QA_ROWS)


def test_what_the_vectors_depend_on_is_in_the_key(models, tmp_path):
    from ctxsim.models.encoders import bf16_scope, load_capped
    from ctxsim.tasks.evaluate.encoding_cache import CachedEncoderSimilarity, VectorCache

    _, baseline, _ = models
    model = load_capped(baseline, "cpu", 16)
    c = VectorCache(tmp_path / "c")
    sim = CachedEncoderSimilarity(model, 4, c, "digest-a")
    texts = ["what causes gout ?", "asthma"]
    key = sim.key(texts)
    assert key == CachedEncoderSimilarity(model, 4, c, "digest-a").key(texts)
    others = {
        CachedEncoderSimilarity(model, 4, c, "digest-b").key(texts),  # weights
        CachedEncoderSimilarity(model, 8, c, "digest-a").key(texts),  # batches
        sim.key(texts[::-1]),  # order
        sim.key(["what causes gout ? asthma"]),  # the same characters, split otherwise
    }
    with bf16_scope("cpu", True):
        import torch

        if torch.is_autocast_enabled("cpu"):  # a CPU with bf16 units
            others.add(sim.key(texts))
    model.max_seq_length = 8
    others.add(sim.key(texts))
    assert key not in others and len(others) >= 5


def test_the_sts_sets_baseline_scores_are_kept_too(models, tmp_path, monkeypatch):
    """An STS set beside the domain tasks: the baseline's cosine and RCMD of its pairs are kept
    (one array per set) and read back; the result is the uncached one."""
    import ctxsim.tasks.evaluate.encoders as EE

    _, _, data = models
    (data / "STSb.dev.tsv").write_text(
        "sentence1\tsentence2\tscore\n"
        + "".join(f"{r['question']}\t{r['answer']}\t{i}\n" for i, r in enumerate(QA_ROWS))
    )
    computed: list[int] = []
    pair_similarities = EE.pair_similarities

    def spy(model, s1, s2, *args, **kwargs):
        computed.append(len(s1))
        return pair_similarities(model, s1, s2, *args, **kwargs)

    monkeypatch.setattr(EE, "pair_similarities", spy)
    cache = tmp_path / "cache"
    kw = {"similarities": ["cosine", "rcmd"]}
    plain = _evaluate(models, None, **kw)
    assert computed == []  # uncached: the stage's own call, not the cache's
    first = _evaluate(models, cache, **kw)
    assert computed == [len(QA_ROWS)] and len(_files(cache)) == 5  # the STS set's array
    second = _evaluate(models, cache, **kw)
    assert computed == [len(QA_ROWS)]  # read back
    assert plain["datasets"] and "rcmd" in json.dumps(plain["bootstrap"])
    dumps = {json.dumps(r, sort_keys=True) for r in (plain, first, second)}
    assert len(dumps) == 1


def test_a_retrained_model_at_the_same_path_is_encoded_again(models, tmp_path, encoded):
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.train import TrainParams

    cache = tmp_path / "cache"
    first = _evaluate(models, cache)
    _, baseline, _ = models
    texts = [r["question"] for r in QA_ROWS] + [r["answer"] for r in QA_ROWS]
    build_tiny_backbone(texts, baseline, TrainParams(tiny_vocab_size=80, max_seq_length=16), 7)
    encoded.clear()
    second = _evaluate(models, cache)
    assert {Path(m).name for m, _ in encoded} == {"surrogate", "baseline"}
    assert len(_files(cache)) == 8
    got = second["domain"]["retrieval"]["d_qa"]["baseline"]["mrr_at_10"]
    assert got != first["domain"]["retrieval"]["d_qa"]["baseline"]["mrr_at_10"] or (
        second["domain"]["pairs"]["p"]["baseline"] != first["domain"]["pairs"]["p"]["baseline"]
    )


@pytest.mark.parametrize("damage", ["flip", "truncate", "rows"])
def test_a_damaged_cache_file_is_moved_aside_and_encoded_again(
    models, tmp_path, encoded, caplog, damage
):
    from ctxsim.store.artefacts import sha256_file
    from ctxsim.store.atomic import write_text_atomic
    from ctxsim.store.checked import sidecar

    cache = tmp_path / "cache"
    first = _evaluate(models, cache)
    victim = max(_files(cache), key=lambda f: f.stat().st_size)
    data = victim.read_bytes()
    if damage == "flip":  # bytes changed after the checksum was written
        victim.write_bytes(data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:])
    elif damage == "truncate":  # checksummed, yet no array (written by other code)
        victim.write_bytes(data[:40])
        write_text_atomic(sidecar(victim), sha256_file(victim))
    else:  # a checksummed array of the wrong size under the key
        with open(victim, "wb") as f:
            np.save(f, np.zeros((1, 4), np.float32))
        write_text_atomic(sidecar(victim), sha256_file(victim))
    encoded.clear()
    with caplog.at_level(logging.WARNING):
        second = _evaluate(models, cache)
    assert sorted(Path(m).name for m, _ in encoded).count("baseline") == 1
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert list(cache.glob(f"{victim.name}.corrupt-*")) and victim.is_file()
    assert str(victim) in caplog.text


def test_a_cache_that_cannot_be_written_only_warns(models, tmp_path, caplog):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    with caplog.at_level(logging.WARNING):
        res = _evaluate(models, blocked)
    assert "encodings not cached" in caplog.text
    assert json.dumps(res, sort_keys=True) == json.dumps(_evaluate(models, None), sort_keys=True)


def test_the_stage_keeps_the_cache_under_the_root_and_a_later_run_reads_it(
    trained,  # noqa: F811 - the fixture
    encoded,
):
    """Two evaluate artefacts of one trained model (two run seeds: two fingerprints) with the
    backbone as baseline: the first encodes it into ROOT/_cache/evaluate, the second reads it,
    and both report the same figures (the seed moves only the intervals)."""
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.evaluate import EvaluateParams, EvaluateStage

    root, store, run, art, _, _ = trained
    data = root / "domain"
    _pairs(data / "p.pairs.tsv", PAIR_ROWS)
    _qa(data / "d_qa.jsonl", QA_ROWS)
    params = EvaluateParams(
        eval_dir=str(data), baselines=["backbone"], bootstrap_resamples=20, max_seq_length=32
    )
    figures = []
    for seed in (0, 1):
        encoded.clear()
        other = RunParams(device=run.device, seed=seed)
        ev, _ = run_stage_locally(
            resolve_stage(EvaluateStage(), params, other, store, {"train": art})
        )
        res = json.loads((ev.files_dir / "results.json").read_text())["domain"]
        figures.append({k: v for k, v in res.items() if k != "bootstrap"})
        backbone = [m for m, _ in encoded if Path(m).name == "backbone"]
        assert len(backbone) == (4 if seed == 0 else 0)
    assert len(_files(store.cache_dir("evaluate", create=False))) == 4
    assert figures[0] == figures[1]
    # evaluate.cache false: encoded again, nothing written; a knob: the same fingerprint
    off = params.model_copy(update={"cache": False})
    seed2 = RunParams(device=run.device, seed=2)
    on = resolve_stage(EvaluateStage(), params, seed2, store, {"train": art})
    stage = resolve_stage(EvaluateStage(), off, seed2, store, {"train": art})
    assert stage.fingerprint == on.fingerprint
    shutil.rmtree(store.cache_dir("evaluate", create=False))
    encoded.clear()
    run_stage_locally(stage)
    assert len([m for m, _ in encoded if Path(m).name == "backbone"]) == 4
    assert not _files(store.cache_dir("evaluate", create=False))
