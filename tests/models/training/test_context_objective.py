"""The `context` objective (and `ctxsim-context`): each sentence is pulled towards its right
context in the corpus, inside its section; corpus sentences join as extra examples, and only
these objectives read the corpus."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.stage import RunParams, Stage, StageParams, resolve_stage, run_stage_locally
from tests.models.training.tiny_training import cosines


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

PAIRS = [(0, 1), (0, 2), (1, 3), (2, 3)]


def train_on_context(root, query_sent=QUERY_SENT, **overrides):
    from ctxsim.tasks.train import TrainParams, TrainStage

    class Shard(Stage):
        name = "shard"
        Params = StageParams

        def run_shard(self, ctx, shard):
            sid, sec, text = zip(*CORPUS, strict=True)
            doc = [min(c, 1) for c in sec]  # the cat and the dog share a document
            return pa.table({"sent_id": sid, "section_id": sec, "doc_id": doc, "text": text}), {}

    class Queries(Stage):
        name = "queries"
        Params = StageParams

        def run_shard(self, ctx, shard):
            qid = list(query_sent)
            sent = pa.array([query_sent[q] for q in qid], pa.int64())
            return pa.table(
                {"query_id": qid, "sent_id": sent, "text": list(QUERY_TEXT.values())}
            ), {}

    class Pairs(Stage):  # the mined pairs, which an objective without labels trains from
        name = "pairs"
        Params = StageParams

        def run_shard(self, ctx, shard):
            s1, s2 = zip(*PAIRS, strict=True)
            table = {"pair_id": list(range(len(PAIRS))), "s1_query_id": s1, "s2_query_id": s2}
            return pa.table(table | {"source": ["knn"] * len(PAIRS)}), {}

    class Label(Stage):
        name = "label"
        Params = StageParams

        def run_shard(self, ctx, shard):
            pairs = PAIRS
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
        for st in (Shard(), Queries(), Pairs(), Label())
    }
    kw = {
        "objective": "context",
        "split_ratios": [1.0, 0.0, 0.0],  # the four pairs all train, as the labels' split says
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
    needed = (*stage.inputs_for(params), *stage.optional_inputs_for(params))
    deps = {k: up[k] for k in needed}
    return run_stage_locally(resolve_stage(stage, params, run, store, deps))[0]


def own_answer_margin(model_dir) -> float:
    """cos(question, its own answer) - cos(question, the other answer), over the two questions."""
    q = ["what is a cat ?", "what is a dog ?"]
    own = [CORPUS[1][2], CORPUS[4][2]]
    return float((cosines(model_dir, q, own) - cosines(model_dir, q, own[::-1])).mean())


def test_context_objective_pulls_each_sentence_towards_its_own_next_sentence(tmp_path):
    art = train_on_context(tmp_path)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "context" and info["n_train_examples"] == 2
    trained, start = (own_answer_margin(art.files_dir / d) for d in ("model", "backbone"))
    assert trained > start + 0.02


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
    art = train_on_context(tmp_path, context_corpus_sentences=10, max_steps=2)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["n_train_examples"] == 3


def test_context_objective_without_any_corpus_sentence_names_the_pairs_artefact(tmp_path):
    with pytest.raises(ValueError, match="right context in the corpus") as e:
        train_on_context(tmp_path, query_sent={0: None, 1: None, 2: None, 3: None})
    assert "/pairs/" in str(e.value)


def test_the_context_objective_reads_the_pairs_not_the_labels(tmp_path):
    """It needs no embed or label stage: `pairs` is its input, cut into the label stage's
    splits (here a 0/1/0 split leaves it no pair to train on, and says so)."""
    from ctxsim.tasks.train import TrainParams, TrainStage

    stage = TrainStage()
    assert stage.inputs_for(TrainParams(objective="context")) == ("pairs",)
    assert stage.inputs_for(TrainParams()) == stage.inputs_for(TrainParams(objective="teacher"))
    assert stage.inputs_for(TrainParams(objective="ctxsim-context")) == ("label",)
    art = train_on_context(tmp_path / "a")
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["n_train_pairs"] == len(PAIRS) and info["n_dev_pairs"] == 0
    with pytest.raises(ValueError, match="no labelled pairs with split"):
        train_on_context(tmp_path / "b", split_ratios=[0.0, 1.0, 0.0])


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
    art = train_on_context(tmp_path, objective="ctxsim-context", loss="cosent", max_steps=20)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "ctxsim-context"
    assert info["n_train_examples"] == 4 + 2  # the 4 labelled pairs and the 2 right contexts
    trained, start = (own_answer_margin(art.files_dir / d) for d in ("model", "backbone"))
    assert trained > start


def test_document_batches_reach_the_trainer_as_blocks(tmp_path):
    """``context_batches: document``: the context examples keep the order that makes their
    batches (both objectives that read contexts), the labels' pairs stay shuffled, and the
    setting enters the fingerprint only when set."""
    from ctxsim.tasks.train import TrainParams

    assert "context_batches" not in TrainParams().model_dump()
    for objective in ("context", "ctxsim-context"):
        art = train_on_context(
            tmp_path / objective,
            objective=objective,
            context_batches="document",
            context_corpus_sentences=10,
            max_steps=4,
            loss="cosent",
        )
        info = json.loads((art.files_dir / "metrics.json").read_text())
        assert info["objective"] == objective and info["n_train_examples"] >= 3
