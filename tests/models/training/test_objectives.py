"""Train objectives (models/training/objectives/): every loss and peer objective moves a tiny
model the expected way (labelled pairs, SimCSE, TSDAE, joint, teacher), no training keeps the
backbone, and one seed gives one set of weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.models.training.tiny_training import PAIRS, cosines, label_margin, train_on_pairs


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

    art = train_on_pairs(tmp_path, objective=objective, loss=loss, label_scale=scale)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == objective and info["loss"] == loss and info["steps"] == 12
    assert info["train_cpu_seconds"] > 0
    s1, s2, lab = (list(c) for c in zip(*PAIRS, strict=True))
    if objective == "tfidf":
        lab = tfidf_cosine(s1, s2)
    before = spearmanr(cosines(art.files_dir / "backbone", s1, s2), lab)[0]
    after = spearmanr(cosines(art.files_dir / "model", s1, s2), lab)[0]
    assert after > before + 0.1, (before, after)
    if loss == "cosent":  # the top pair's cosine rises against the bottom's
        assert (
            label_margin(art.files_dir / "model") > label_margin(art.files_dir / "backbone") + 0.01
        )


def test_simcse_spreads_distinct_sentences_apart(tmp_path):
    """Unsupervised SimCSE pushes the other sentences of a batch away: the mean cosine between
    distinct sentences falls. Its data is the distinct sentences of the pairs (9 of 16)."""
    from ctxsim.models.training.objectives import sentence_pool

    art = train_on_pairs(tmp_path, objective="simcse", max_steps=12)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    pool = sentence_pool([p[0] for p in PAIRS], [p[1] for p in PAIRS])
    assert info["n_train_examples"] == len(pool) == 9 and info["steps"] == 12
    i, j = np.triu_indices(len(pool), k=1)

    def mean_cos(path):
        return float(cosines(path, [pool[k] for k in i], [pool[k] for k in j]).mean())

    assert mean_cos(art.files_dir / "model") < mean_cos(art.files_dir / "backbone") - 0.01


def test_simcse_defaults_to_the_pair_objectives_step_count(tmp_path):
    """Without max_steps SimCSE takes the steps one epoch over the pairs takes (fair budget),
    not one epoch over its (more numerous) sentences."""
    art = train_on_pairs(tmp_path, objective="simcse", max_steps=-1, epochs=2.0, batch_size=4)
    assert json.loads((art.files_dir / "metrics.json").read_text())["steps"] == 4


def test_no_training_keeps_the_backbone(tmp_path):
    art = train_on_pairs(tmp_path, objective="none")
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["steps"] == 0 and info["loss"] == "none"
    texts = [p[0] for p in PAIRS]
    assert np.allclose(
        cosines(art.files_dir / "model", texts, texts[::-1]),
        cosines(art.files_dir / "backbone", texts, texts[::-1]),
        atol=1e-6,
    )


def test_init_from_starts_from_that_model_and_keeps_the_backbone_as_reference(tmp_path):
    """train.init_from: the run starts from that model's weights (with no training, the saved
    model is it), the backbone stays the reference its metrics and card name, and the start's
    content is in the fingerprint (new weights at the same path: a new run)."""
    import shutil

    from safetensors.numpy import load_file

    from ctxsim.tasks.train import TrainParams, TrainStage

    trained = train_on_pairs(tmp_path / "a", loss="cosent", max_steps=4).files_dir / "model"
    start = tmp_path / "start"
    shutil.copytree(trained, start)
    art = train_on_pairs(tmp_path / "b", objective="none", init_from=str(start))
    saved, want = (
        load_file(next(d.rglob("*.safetensors"))) for d in (art.files_dir / "model", start)
    )
    backbone = load_file(next((art.files_dir / "backbone").rglob("*.safetensors")))
    assert saved.keys() == want.keys()
    assert all(np.array_equal(saved[k], want[k]) for k in want)
    assert any(not np.array_equal(saved[k], backbone[k]) for k in want if k in backbone)
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["init_from"] == str(start) and info["backbone_path"] == "files/backbone"
    assert f"| init_from | {start} |" in (art.files_dir / "model" / "README.md").read_text()
    stage = TrainStage()
    assert stage.fingerprint_extra(TrainParams()) == {}
    before = stage.fingerprint_extra(TrainParams(init_from=str(start)))
    (start / "config.json").write_text((start / "config.json").read_text() + "\n")
    assert stage.fingerprint_extra(TrainParams(init_from=str(start))) != before
    with pytest.raises(ValueError, match="init_from"):
        TrainParams(init_from=str(tmp_path / "nowhere"))


def test_one_seed_gives_the_same_weights(tmp_path):
    from safetensors.numpy import load_file

    def weights(root):
        art = train_on_pairs(root, loss="cosent", max_steps=4)
        files = sorted((art.files_dir / "model").rglob("*.safetensors"))
        assert files
        return [load_file(str(f)) for f in files]

    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    for wa, wb in zip(a, b, strict=True):
        assert wa.keys() == wb.keys()
        assert all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_tfidf_cosine_and_pool():
    from ctxsim.models.training.objectives import sentence_pool, tfidf_cosine

    cos = tfidf_cosine(["a red cat", "a red cat", "dogs bark"], ["a red cat", "a cat", "red cat"])
    assert cos[0] == pytest.approx(1.0) and 0 < cos[1] < 1 and cos[2] == 0
    assert sentence_pool(["b", "a", "b"], ["a", "c", "b"]) == ["b", "a", "c"]


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

    art = train_on_pairs(tmp_path, objective="tsdae", max_steps=6)
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
    art = train_on_pairs(
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
    assert label_margin(art.files_dir / "model") != label_margin(art.files_dir / "backbone")


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

    first = train_on_pairs(tmp_path / "t", loss="cosent", label_scale="none")
    teacher_dir = str(first.files_dir / "model")
    art = train_on_pairs(
        tmp_path / "s", objective="teacher", teacher=teacher_dir, loss="cosent", label_scale="none"
    )
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "teacher" and info["label_cpu_seconds"] > 0
    s1, s2 = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    lab = teacher_cosine(s1, s2, build_model(teacher_dir, 16, "cpu"))
    before = spearmanr(cosines(art.files_dir / "backbone", s1, s2), lab)[0]
    after = spearmanr(cosines(art.files_dir / "model", s1, s2), lab)[0]
    assert after > before + 0.1, (before, after)
