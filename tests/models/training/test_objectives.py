"""Train objectives (models/training/objectives/): every loss and peer objective moves a tiny model
the
expected way, bad names are config errors naming the key, and one seed gives one set of weights."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.stage import RunParams, Stage, StageParams, resolve_stage, run_stage_locally

# a handful of pairs: the first is labelled highest (and shares every word), the last lowest
PAIRS = [
    ("a man plays the guitar .", "a man plays the guitar .", 0.999999),
    ("the dog runs in the park .", "a dog runs in a park .", 0.999995),
    ("a woman eats red food .", "the woman eats food .", 0.99999),
    ("a big cat sleeps .", "the small cat sleeps .", 0.999985),
    ("a man plays the ball .", "the woman eats food .", 0.99998),
    ("red street at night .", "a big cat sleeps .", 0.999975),
    ("the dog runs in the park .", "red street at night .", 0.99997),
    ("a woman eats red food .", "a man plays the guitar .", 0.999965),
]


class _FakeLabel(Stage):
    """Stands in for the `label` stage: Eq. 4-like labels crowded into a band of 3.5e-5."""

    name = "label"
    Params = StageParams

    def run_shard(self, ctx, shard):
        s1, s2, lab = zip(*PAIRS, strict=True)
        table = pa.table(
            {"s1": s1, "s2": s2, "label": pa.array(lab, pa.float64()), "split": ["train"] * 8}
        )
        return table, {"n": table.num_rows}


def _train(root, **overrides):
    from ctxsim.tasks.train import TrainParams, TrainStage

    store = ArtefactStore(root)
    run = RunParams(device="cpu", seed=0)
    label, _ = run_stage_locally(resolve_stage(_FakeLabel(), StageParams(), run, store, {}))
    kw = {
        "max_steps": 12,
        "batch_size": 8,
        "lr": 1e-3,
        "tiny_vocab_size": 120,
        "max_seq_length": 16,
        "save_total_limit": 1,
        "eval_steps": 100,
        **overrides,
    }
    art, _ = run_stage_locally(
        resolve_stage(TrainStage(), TrainParams(**kw), run, store, {"label": label})
    )
    return art


def _cosines(path, texts_a, texts_b):
    from ctxsim.tasks.evaluate import encode_sentences, load_st

    model = load_st(path, "cpu", 16)
    a, b = encode_sentences(model, texts_a), encode_sentences(model, texts_b)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def _margin(path) -> float:
    """cos(highest-labelled pair) - cos(lowest-labelled pair)."""
    cos = _cosines(path, [PAIRS[0][0], PAIRS[-1][0]], [PAIRS[0][1], PAIRS[-1][1]])
    return float(cos[0] - cos[1])


@pytest.mark.parametrize(
    ("objective", "loss", "scale"),
    [
        ("ctxsim", "cosine", "rank"),
        ("ctxsim", "cosent", "none"),
        ("ctxsim", "angle", "none"),
        ("tfidf", "cosent", "none"),
    ],
)
def test_labelled_objectives_learn_the_order_of_their_labels(tmp_path, objective, loss, scale):
    """CoSENT and AnglE learn from a 3.5e-5 band of raw labels (only their order counts); L2 from
    their ranks; TF-IDF labels put the identical pair on top and the disjoint ones at 0. The
    cosines of the 8 pairs then follow the labels' order more closely than the backbone's."""
    from scipy.stats import spearmanr

    from ctxsim.models.training.objectives import tfidf_cosine

    art = _train(tmp_path, objective=objective, loss=loss, label_scale=scale)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == objective and info["loss"] == loss and info["steps"] == 12
    assert info["train_cpu_seconds"] > 0
    s1, s2, lab = (list(c) for c in zip(*PAIRS, strict=True))
    if objective == "tfidf":
        lab = tfidf_cosine(s1, s2)
    before = spearmanr(_cosines(art.files_dir / "backbone", s1, s2), lab)[0]
    after = spearmanr(_cosines(art.files_dir / "model", s1, s2), lab)[0]
    assert after > before + 0.1, (before, after)
    if loss == "cosent":  # the top pair's cosine rises against the bottom's
        assert _margin(art.files_dir / "model") > _margin(art.files_dir / "backbone") + 0.01


def test_simcse_spreads_distinct_sentences_apart(tmp_path):
    """Unsupervised SimCSE pushes the other sentences of a batch away: the mean cosine between
    distinct sentences falls. Its data is the distinct sentences of the pairs (9 of 16)."""
    from ctxsim.models.training.objectives import sentence_pool

    art = _train(tmp_path, objective="simcse", max_steps=12)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    pool = sentence_pool([p[0] for p in PAIRS], [p[1] for p in PAIRS])
    assert info["n_train_examples"] == len(pool) == 9 and info["steps"] == 12
    i, j = np.triu_indices(len(pool), k=1)

    def mean_cos(path):
        return float(_cosines(path, [pool[k] for k in i], [pool[k] for k in j]).mean())

    assert mean_cos(art.files_dir / "model") < mean_cos(art.files_dir / "backbone") - 0.01


def test_simcse_defaults_to_the_pair_objectives_step_count(tmp_path):
    """Without max_steps SimCSE takes the steps one epoch over the pairs takes (fair budget),
    not one epoch over its (more numerous) sentences."""
    art = _train(tmp_path, objective="simcse", max_steps=-1, epochs=2.0, batch_size=4)
    assert json.loads((art.files_dir / "metrics.json").read_text())["steps"] == 4


def test_no_training_keeps_the_backbone(tmp_path):
    art = _train(tmp_path, objective="none")
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["steps"] == 0 and info["loss"] == "none"
    texts = [p[0] for p in PAIRS]
    assert np.allclose(
        _cosines(art.files_dir / "model", texts, texts[::-1]),
        _cosines(art.files_dir / "backbone", texts, texts[::-1]),
        atol=1e-6,
    )


def test_one_seed_gives_the_same_weights(tmp_path):
    from safetensors.numpy import load_file

    def weights(root):
        art = _train(root, loss="cosent", max_steps=4)
        files = sorted((art.files_dir / "model").rglob("*.safetensors"))
        assert files
        return [load_file(str(f)) for f in files]

    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    for wa, wb in zip(a, b, strict=True):
        assert wa.keys() == wb.keys()
        assert all(np.array_equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize(
    ("override", "key"),
    [("train.loss=mse", "train.loss"), ("train.objective=bm25", "train.objective")],
)
def test_unknown_loss_or_objective_is_a_config_error_naming_the_key(override, key):
    from ctxsim.flows.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, [override], stages=["train"])
    assert key in str(e.value)


def test_new_keys_at_their_default_keep_the_fingerprint():
    """objective=ctxsim is version 2's behaviour: it is left out of the dump (and fingerprint)."""
    from ctxsim.tasks.train import TrainParams

    assert "objective" not in TrainParams().model_dump()
    assert TrainParams(objective="simcse").model_dump()["objective"] == "simcse"
    assert TrainParams(loss="cosent").model_dump()["loss"] == "cosent"
    assert "dropout" not in TrainParams().model_dump()
    assert TrainParams(dropout=0.1).model_dump()["dropout"] == 0.1


def test_dropout_out_of_range_is_a_config_error_naming_the_key():
    from ctxsim.flows.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, ["train.dropout=1.5"], stages=["train"])
    assert "train.dropout" in str(e.value)


def test_tfidf_cosine_and_pool():
    from ctxsim.models.training.objectives import sentence_pool, tfidf_cosine

    cos = tfidf_cosine(["a red cat", "a red cat", "dogs bark"], ["a red cat", "a cat", "red cat"])
    assert cos[0] == pytest.approx(1.0) and 0 < cos[1] < 1 and cos[2] == 0
    assert sentence_pool(["b", "a", "b"], ["a", "c", "b"]) == ["b", "a", "c"]


def test_has_dropout_sees_modules_and_config():
    import torch

    from ctxsim.models.training.objectives import has_dropout

    assert has_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1)))
    assert not has_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.0)))


def test_dropout_config_sets_every_dropout_probability():
    from ctxsim.models.training.objectives import dropout_config

    bert = {
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "hidden_size": 32,
        "use_cache": True,
    }
    assert dropout_config(bert, 0.0) == {
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }
    assert dropout_config({"attention_dropout": 0.0, "resid_pdrop": 0.1}, 0.1) == {
        "attention_dropout": 0.1,
        "resid_pdrop": 0.1,
    }
    with pytest.raises(ValueError, match="train.dropout"):
        dropout_config(bert, 1.0)


def test_train_dropout_makes_simcse_views_differ(tmp_path):
    """With train.dropout 0 a training-mode forward pass is deterministic (SimCSE's two views of
    a sentence are identical); with 0.1 they differ. Both for a bare backbone and for a
    sentence-transformers directory (whose config sits in its Transformer module's folder)."""
    import torch

    from ctxsim.models.training.objectives import has_dropout
    from ctxsim.tasks.train import TrainParams, build_model, build_tiny_backbone

    p = TrainParams(tiny_vocab_size=120, max_seq_length=16)
    texts = [a for a, _, _ in PAIRS] + [b for _, b, _ in PAIRS]
    backbone = str(build_tiny_backbone(texts, tmp_path / "bb", p, seed=0))

    def views_differ(model) -> bool:
        model.train()
        feats = model.tokenize(texts[:4])
        torch.manual_seed(0)
        a = model(dict(feats))["sentence_embedding"]
        b = model(dict(feats))["sentence_embedding"]
        return not torch.allclose(a, b)

    quiet = build_model(backbone, 16, "cpu", dropout=0.0)
    assert not has_dropout(quiet) and not views_differ(quiet)
    noisy = build_model(backbone, 16, "cpu", dropout=0.1)
    assert has_dropout(noisy) and views_differ(noisy)
    quiet.save(str(tmp_path / "st"))  # an ST directory, reloaded with noise switched on
    reloaded = build_model(str(tmp_path / "st"), 16, "cpu", dropout=0.3)
    assert reloaded[0].auto_model.config.hidden_dropout_prob == 0.3 and views_differ(reloaded)


def test_tsdae_deletes_words_and_rebuilds_them_through_a_tied_decoder(tmp_path):
    """TSDAE's data is the distinct sentences with 60% of the words deleted (at least one kept,
    reproducibly); training moves the encoder (its weights differ from the backbone's)."""
    from safetensors.numpy import load_file

    from ctxsim.models.training.objectives import delete_words, sentence_pool, tsdae_columns

    s1, s2 = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    cols = tsdae_columns(s1, s2)
    assert cols["original"] == sentence_pool(s1, s2)
    assert cols == tsdae_columns(s1, s2)  # same noise every time
    n_kept = n_all = 0
    for damaged, original in zip(cols["damaged"], cols["original"], strict=True):
        kept, words = damaged.split(), original.split()
        assert 1 <= len(kept) <= len(words)
        it = iter(words)
        assert all(w in it for w in kept)  # an ordered subsequence of the original words
        n_kept, n_all = n_kept + len(kept), n_all + len(words)
    assert n_kept / n_all < 0.7  # 60% deleted in expectation
    rng = np.random.default_rng(0)
    assert delete_words("one", 0.99, rng) == "one"

    art = _train(tmp_path, objective="tsdae", max_steps=6)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "tsdae" and info["steps"] == 6
    moved = load_file(str(next((art.files_dir / "model").rglob("*.safetensors"))))
    start = load_file(str(next((art.files_dir / "backbone").rglob("*.safetensors"))))
    shared = [k for k in moved if k.split(".", 1)[-1] in {s.split(".", 1)[-1] for s in start}]
    assert shared
    assert any(
        not np.array_equal(moved[k], start[k2])
        for k in moved
        for k2 in start
        if k2.split(".", 1)[-1] == k.split(".", 1)[-1] and moved[k].shape == start[k2].shape
    )


def test_joint_trains_on_both_the_labelled_pairs_and_simcse_positives(tmp_path):
    """`joint`: one training over two datasets (ctxsim CoSENT pairs and SimCSE's sentences);
    its steps cover both (8 pairs + 9 sentences at batch 4: 2 + 3 batches an epoch)."""
    art = _train(
        tmp_path,
        objective="joint",
        loss="cosent",
        label_scale="none",
        max_steps=-1,
        epochs=1.0,
        batch_size=4,
    )
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "joint"
    assert info["steps"] == 2  # the budget of the pair objectives at these settings
    assert _margin(art.files_dir / "model") != _margin(art.files_dir / "backbone")


def test_right_contexts_stay_inside_the_section():
    from ctxsim.models.training.objectives import context_pairs, right_contexts

    sent_ids = np.array([4, 0, 1, 2, 3, 5])  # any order: the shard's sent_id order counts
    sections = np.array([1, 0, 0, 0, 1, 1])
    texts = ["e", "a", "b", "c", "d", "f"]
    got = right_contexts(sent_ids, sections, texts, [0, 1, 2, 3, 5, 9, None], width=2)
    # 2 ends section 0; 3 and 4 open section 1; 9 is not in the corpus
    assert got == ["b c", "c", None, "e f", None, None, None]
    assert right_contexts(sent_ids, sections, texts, [3], width=1) == ["e"]
    with pytest.raises(ValueError, match="width"):
        right_contexts(sent_ids, sections, texts, [0], width=0)
    # distinct sentences with a context, first seen first; a repeated context is kept once
    a, p = context_pairs(["x", "y", "x"], ["z", "x", "w"], ["cx", "cy", "cx"], [None, "cx", "cx"])
    assert (a, p) == (["x", "y"], ["cx", "cy"])


def test_teacher_cosine_encodes_each_sentence_once():
    from ctxsim.models.training.objectives import teacher_cosine

    class Teacher:
        calls: list[list[str]] = []

        def encode(self, texts, batch_size, normalize_embeddings):
            self.calls.append(list(texts))
            vec = {"a": [1.0, 0.0], "b": [0.6, 0.8], "c": [0.0, 1.0]}
            return np.array([vec[t] for t in texts])

    t = Teacher()
    cos = teacher_cosine(["a", "a", "b"], ["b", "c", "c"], t)
    assert np.allclose(cos, [0.6, 0.0, 0.8]) and t.calls == [["a", "b", "c"]]


def test_teacher_labels_are_learnt_by_the_student(tmp_path):
    """The student learns the order of a teacher's cosines (here a tiny encoder trained on the
    Eq. 4 labels: the student's backbone, the same random start, does not follow it yet)."""
    from scipy.stats import spearmanr

    from ctxsim.models.training.objectives import teacher_cosine
    from ctxsim.models.training.sentence_encoder import build_model

    first = _train(tmp_path / "t", loss="cosent", label_scale="none")
    teacher_dir = str(first.files_dir / "model")
    art = _train(
        tmp_path / "s", objective="teacher", teacher=teacher_dir, loss="cosent", label_scale="none"
    )
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "teacher" and info["label_cpu_seconds"] > 0
    s1, s2 = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    lab = teacher_cosine(s1, s2, build_model(teacher_dir, 16, "cpu"))
    before = spearmanr(_cosines(art.files_dir / "backbone", s1, s2), lab)[0]
    after = spearmanr(_cosines(art.files_dir / "model", s1, s2), lab)[0]
    assert after > before + 0.1, (before, after)


# a corpus of two sections; queries 0 and 1 open them, query 2 ends one, query 3 is no corpus
# sentence (an STS pair's): only the first two have a right context
CORPUS = [
    (0, 0, "what is a cat ?"),
    (1, 0, "a cat is a small animal that purrs ."),
    (2, 0, "cats sleep a lot ."),
    (3, 1, "what is a dog ?"),
    (4, 1, "a dog is a loyal animal that barks ."),
    (5, 1, "dogs bark at night ."),
    (6, 2, "what is a bird ?"),
    (7, 2, "a bird is an animal that flies ."),
]
QUERY_SENT = {0: 0, 1: 3, 2: 2, 3: None}
QUERY_TEXT = {0: "what is a cat ?", 1: "what is a dog ?", 2: "cats sleep a lot .", 3: "hi ."}


def _train_context(root, query_sent=QUERY_SENT, **overrides):
    from ctxsim.tasks.train import TrainParams, TrainStage

    class Shard(Stage):
        name = "shard"
        Params = StageParams

        def run_shard(self, ctx, shard):
            sid, sec, text = zip(*CORPUS, strict=True)
            return pa.table({"sent_id": sid, "section_id": sec, "text": text}), {}

    class Queries(Stage):
        name = "queries"
        Params = StageParams

        def run_shard(self, ctx, shard):
            qid = list(query_sent)
            sent = pa.array([query_sent[q] for q in qid], pa.int64())
            return pa.table({"query_id": qid, "sent_id": sent}), {}

    class Label(Stage):
        name = "label"
        Params = StageParams

        def run_shard(self, ctx, shard):
            pairs = [(0, 1), (0, 2), (1, 3), (2, 3)]
            return pa.table(
                {
                    "s1_id": [a for a, _ in pairs],
                    "s2_id": [b for _, b in pairs],
                    "s1": [QUERY_TEXT[a] for a, _ in pairs],
                    "s2": [QUERY_TEXT[b] for _, b in pairs],
                    "label": pa.array([0.5] * 4, pa.float64()),
                    "split": ["train"] * 4,
                }
            ), {}

    store = ArtefactStore(root)
    run = RunParams(device="cpu", seed=0)
    up = {
        st.name: run_stage_locally(resolve_stage(st, StageParams(), run, store, {}))[0]
        for st in (Shard(), Queries(), Label())
    }
    kw = {
        "objective": "context",
        "max_steps": 12,
        "batch_size": 2,
        "lr": 1e-3,
        "tiny_vocab_size": 120,
        "max_seq_length": 16,
        "save_total_limit": 1,
        "eval_steps": 100,
        **overrides,
    }
    params = TrainParams(**kw)
    stage = TrainStage()
    deps = {"label": up["label"]} | {k: up[k] for k in stage.optional_inputs_for(params)}
    return run_stage_locally(resolve_stage(stage, params, run, store, deps))[0]


def test_context_objective_pulls_each_sentence_towards_its_own_next_sentence(tmp_path):
    art = _train_context(tmp_path)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "context" and info["n_train_examples"] == 2
    q = ["what is a cat ?", "what is a dog ?"]
    own = [CORPUS[1][2], CORPUS[4][2]]

    def margin(path):  # cos(question, its own answer) - cos(question, the other answer)
        return float((_cosines(path, q, own) - _cosines(path, q, own[::-1])).mean())

    assert margin(art.files_dir / "model") > margin(art.files_dir / "backbone") + 0.02


def test_context_objective_adds_sampled_corpus_sentences(tmp_path):
    """Corpus sentences cost no labels: a sample of them joins the pairs' sentences. Of the five
    with a right context, two are the queries' own and two are already a positive (kept once):
    the bird's question is the one new example."""
    from ctxsim.models.training.objectives import sample_with_context

    sid = np.array([c[0] for c in CORPUS])
    sec = np.array([c[1] for c in CORPUS])
    assert sample_with_context(sid, sec, 10, 0).tolist() == [0, 1, 3, 4, 6]
    two = sample_with_context(sid, sec, 2, 0)
    assert len(two) == 2 and set(two) <= {0, 1, 3, 4, 6}
    assert two.tolist() == sample_with_context(sid, sec, 2, 0).tolist()
    art = _train_context(tmp_path, context_corpus_sentences=10, max_steps=2)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["n_train_examples"] == 3


def test_context_objective_without_any_corpus_sentence_names_the_label_artefact(tmp_path):
    with pytest.raises(ValueError, match="right context in the corpus") as e:
        _train_context(tmp_path, query_sent={0: None, 1: None, 2: None, 3: None})
    assert "label" in str(e.value)


def test_only_the_context_objective_reads_the_corpus():
    """The other objectives keep their fingerprints: no new inputs, no new keys in the dump."""
    from ctxsim.tasks.train import TrainParams, TrainStage

    stage = TrainStage()
    assert stage.optional_inputs_for(TrainParams()) == ()
    assert stage.optional_inputs_for(TrainParams(objective="teacher")) == ()
    assert stage.optional_inputs_for(TrainParams(objective="context")) == ("queries", "shard")
    dump = TrainParams().model_dump()
    assert "teacher" not in dump and "context_width" not in dump
    assert "context_corpus_sentences" not in dump
    assert TrainParams(context_width=2).model_dump()["context_width"] == 2


def test_ctxsim_context_trains_on_the_labels_and_the_right_contexts_together(tmp_path):
    """One file added the objective: both datasets reach the trainer, the corpus inputs enter
    only its fingerprint, and the context half still pulls questions towards their answers."""
    from ctxsim.tasks.train import TrainParams, TrainStage

    assert TrainStage().optional_inputs_for(TrainParams(objective="ctxsim-context")) == (
        "queries",
        "shard",
    )
    art = _train_context(tmp_path, objective="ctxsim-context", loss="cosent", max_steps=20)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "ctxsim-context"
    assert info["n_train_examples"] == 4 + 2  # the 4 labelled pairs and the 2 right contexts
    q = ["what is a cat ?", "what is a dog ?"]
    own = [CORPUS[1][2], CORPUS[4][2]]

    def margin(path):
        return float((_cosines(path, q, own) - _cosines(path, q, own[::-1])).mean())

    assert margin(art.files_dir / "model") > margin(art.files_dir / "backbone")
