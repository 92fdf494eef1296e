"""The `embed` stage: context units encoded once per shard, their scatter reduced, the scorer
named by content in the fingerprint, bad input refused in one line."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from ctxsim.models.contextual.encoder_origin import ScatterStats
from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.chunks import WORD_BATCH, context_unit_index
from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
from ctxsim.tasks.embed import (
    SCATTER_FILE,
    EmbedParams,
    EmbedStage,
    EncoderInputError,
    context_units,
    read_embeddings,
)
from tests.tasks.tiny_encoder import build_tiny_encoder


@pytest.fixture(scope="module")
def encoder(spine, tmp_path_factory):
    texts = spine["shard"].read_table(["text"]).column("text").to_pylist()[:400]
    return build_tiny_encoder(texts, tmp_path_factory.mktemp("enc") / "tiny-st")


def _up(spine):
    return {"shard": spine["shard"], "contexts": spine["contexts"]}


def _run(spine, root, **params):
    store = ArtefactStore(root)
    plan = resolve_stage(
        EmbedStage(), EmbedParams(**params), RunParams(device="cpu"), store, _up(spine)
    )
    return plan, run_stage_locally(plan)[0]


def test_embed_encodes_every_unit_and_its_scatter_is_the_merged_shards(spine, encoder, tmp_path):
    _, art = _run(spine, tmp_path, model=str(encoder), n_shards=3, max_seq_length=16, min_words=8)
    rows = art.read_table()
    ids, texts = context_units(spine["contexts"], spine["shard"], "chunk", 8)
    assert rows.column("context_id").to_numpy().tolist() == ids.tolist()
    assert all(len(t.split()) >= 8 for t in texts)
    emb = read_embeddings(art)
    assert emb.shape[0] == rows.num_rows and emb.dtype == np.float32
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    whole = ScatterStats.load(art.files_dir / SCATTER_FILE)
    direct = ScatterStats.of(emb)
    assert whole.n == direct.n == rows.num_rows
    assert np.allclose(whole.matrix(), direct.matrix(), atol=1e-9)
    ntok = rows.column("n_tokens").to_numpy()
    trunc = rows.column("truncated").to_numpy(zero_copy_only=False)
    assert (trunc == (ntok > 16)).all() and trunc.any()  # 16 tokens cut most paragraphs
    assert art.stats["truncated"] == int(trunc.sum()) and art.stats["contexts"] == len(ids)
    assert art.stats["sentences_per_second"] > 0
    # the adapted encoder's cosine is the closed form over these contexts
    from sentence_transformers import SentenceTransformer

    from ctxsim.models.contextual.encoder_origin import explicit_profile_similarity
    from ctxsim.tasks.embed import ADAPTED_DIR, encode, load_encoder

    adapted = SentenceTransformer(str(art.files_dir / ADAPTED_DIR), device="cpu")
    adapted.max_seq_length = 16
    pair = ["the first of two sentences here", "and another one that differs"]
    a = adapted.encode(pair, convert_to_numpy=True, normalize_embeddings=True)
    e = encode(load_encoder(str(encoder), 16, "cpu"), pair, 2)
    want = explicit_profile_similarity(e[:1], e[1:], emb)[0]
    assert abs(float(a[0] @ a[1]) - want) < 1e-4
    assert "adapted encoder" in (art.files_dir / ADAPTED_DIR / "README.md").read_text()


def test_max_units_encodes_one_seeded_sample_whatever_the_shards(spine, encoder, tmp_path):
    ids, _ = context_units(spine["contexts"], spine["shard"], "chunk", 8)
    k = len(ids) // 3
    kw = {"model": str(encoder), "max_seq_length": 16, "min_words": 8, "max_units": k}
    _, one = _run(spine, tmp_path / "a", n_shards=1, **kw)
    _, three = _run(spine, tmp_path / "b", n_shards=3, **kw)
    got = one.read_table().column("context_id").to_numpy()
    assert len(got) == k == one.stats["contexts"] and set(got) < set(ids.tolist())
    assert got.tolist() == sorted(got.tolist())  # in id order, as without a sample
    assert got.tolist() == three.read_table().column("context_id").to_numpy().tolist()
    a, b = (ScatterStats.load(x.files_dir / SCATTER_FILE) for x in (one, three))
    assert a.n == b.n == k and np.allclose(a.matrix(), b.matrix(), atol=1e-9)
    assert np.allclose(read_embeddings(one), read_embeddings(three), atol=1e-6)
    _, all_units = _run(spine, tmp_path / "c", n_shards=1, **{**kw, "max_units": len(ids)})
    assert all_units.read_table().column("context_id").to_numpy().tolist() == ids.tolist()
    store = ArtefactStore(tmp_path / "fp")
    fp = [
        resolve_stage(EmbedStage(), EmbedParams(**{**kw, "max_units": m}), RunParams(), store,
                      _up(spine)).fingerprint
        for m in (0, k)
    ]  # fmt: skip
    assert fp[0] != fp[1]
    assert "max_units" not in EmbedParams(model=str(encoder)).model_dump()  # old fingerprints


def test_embed_window_units_join_both_sides(spine, encoder, tmp_path):
    ids, texts = context_units(spine["contexts"], spine["shard"], "window", 1)
    ctx = spine["contexts"].read_table(["context_id"]).num_rows
    assert len(ids) == ctx
    sents = spine["shard"].read_table(["sent_id", "text"]).to_pydict()
    text_of = dict(zip(sents["sent_id"], sents["text"], strict=True))
    row = spine["contexts"].read_table().slice(0, 1).to_pylist()[0]
    want = (
        " ".join(text_of[i] for i in row["left_sent_ids"])
        + " "
        + " ".join(text_of[i] for i in row["right_sent_ids"])
    )
    assert texts[0] == want


def _units_the_whole_way(spine, unit: str, min_words: int) -> tuple[list[int], list[str]]:
    """Every unit's text built from Python lists of the whole corpus: what a shard must match."""
    sents = spine["shard"].read_table(["sent_id", "text"]).to_pydict()
    text_of = dict(zip(sents["sent_id"], sents["text"], strict=True))
    if unit == "chunk":
        chunks = (spine["contexts"].files_dir / "chunks.parquet").as_posix()
        rows = pq.read_table(chunks).sort_by("chunk_id").to_pylist()
        order = sorted(text_of)
        at = {sid: i for i, sid in enumerate(order)}
        units = [
            (
                r["chunk_id"],
                " ".join(text_of[s] for s in order[at[r["first_sent_id"]] :][: r["n_sents"]]),
            )
            for r in rows
        ]
    else:
        rows = spine["contexts"].read_table().sort_by("context_id").to_pylist()
        units = [
            (
                r["context_id"],
                " ".join(text_of[i] for i in r["left_sent_ids"])
                + " "
                + " ".join(text_of[i] for i in r["right_sent_ids"]),
            )
            for r in rows
        ]
    kept = [(i, t) for i, t in units if len(t.split()) >= min_words]
    return [i for i, _ in kept], [t for _, t in kept]


@pytest.mark.parametrize(("unit", "min_words"), [("chunk", 8), ("chunk", 30), ("window", 12)])
def test_a_shard_builds_only_its_own_units_and_they_match_the_whole_corpus_way(
    spine, unit, min_words, monkeypatch
):
    """Each shard's (ids, texts) equal the slice of the units built from the whole corpus's
    texts; the word filter reads the text in batches (a small batch here) without changing it."""
    import ctxsim.store.chunks as chunks

    monkeypatch.setattr(chunks, "WORD_BATCH", 7)
    assert chunks.WORD_BATCH != WORD_BATCH
    want_ids, want_texts = _units_the_whole_way(spine, unit, min_words)
    units = context_unit_index(spine["contexts"], spine["shard"], unit, min_words)
    assert units.ids.tolist() == want_ids and 0 < len(want_ids)
    for take in np.array_split(np.arange(len(want_ids)), 5):
        assert units.texts(take) == [want_texts[i] for i in take]
    assert units.texts(np.array([], dtype=np.int64)) == []


def test_word_counts_are_counted_once_per_shard_artefact(spine, tmp_path, monkeypatch):
    """Every embed shard needs the corpus's sentence word counts: with a cache folder the
    first counts and saves them under the shard artefact's fingerprint, the next read them
    back without reading the text; a file of the wrong shape is counted again."""
    from ctxsim.store.chunks import SentenceTexts

    cache = tmp_path / "word-counts"
    first = SentenceTexts(spine["shard"])
    want = first.word_counts()
    assert (first.word_counts(cache) == want).all()
    saved = cache / f"{spine['shard'].fingerprint}.npy"
    names = sorted(f.name for f in cache.iterdir())  # the file and its checksum (store/checked.py)
    assert saved.exists() and names == [saved.name, f"{saved.name}.sha256"]

    again = SentenceTexts(spine["shard"])
    monkeypatch.setattr(again, "_batches", lambda: iter(()))  # the text is not read
    assert (again.word_counts(cache) == want).all()
    np.save(saved, want[:-1])  # a file of another shape is not trusted
    monkeypatch.undo()
    assert (SentenceTexts(spine["shard"]).word_counts(cache) == want).all()
    assert np.load(saved).shape == want.shape
    units = context_unit_index(spine["contexts"], spine["shard"], "chunk", 8, word_cache=cache)
    assert (
        units.ids.tolist()
        == context_unit_index(spine["contexts"], spine["shard"], "chunk", 8).ids.tolist()
    )


def test_fingerprint_names_the_scorer_by_content(spine, encoder, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(encoder, copy)
    store = ArtefactStore(tmp_path / "store")

    def fp(path, **kw) -> str:
        p = EmbedParams(model=str(path), **kw)
        return resolve_stage(EmbedStage(), p, RunParams(), store, _up(spine)).fingerprint

    before = fp(copy)
    assert fp(copy, batch_size=7) == before  # a knob: speed only
    assert fp(copy, max_seq_length=32) != before
    weights = next(copy.rglob("model.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # new weights at the same path
    weights.write_bytes(bytes(data))
    assert fp(copy) != before


def test_bad_input_is_one_line(spine, encoder, tmp_path):
    with pytest.raises(ValueError, match="neither a registered model"):
        EmbedParams(model=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="neither a registered model"):
        EmbedParams(model="no-such-model")
    with pytest.raises(EncoderInputError, match="no context unit.*embed.min_words=100000"):
        _run(spine, tmp_path, model=str(encoder), min_words=100000)


def test_nonfinite_shard_scatter_is_refused(spine, encoder, tmp_path, monkeypatch):
    import ctxsim.tasks.embed as embed

    real = embed.encode

    def poisoned(*a, **kw):
        out = real(*a, **kw)
        out[0, 0] = np.nan
        return out

    monkeypatch.setattr(embed, "encode", poisoned)
    with pytest.raises(EncoderInputError, match="not finite"):
        _run(spine, tmp_path, model=str(encoder), n_shards=2)
    assert ArtefactStore(tmp_path).latest("embed") is None


def test_tokenizer_threads_are_on_only_inside_and_restored(monkeypatch) -> None:
    """On a GPU the corpus pass turns the Rust tokenizer's threads on for its duration and puts
    back what the user (or flows/prefect_env.py) had set; off, nothing changes."""
    import os

    from ctxsim.models.tokenizer_threads import tokenizer_threads

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    with tokenizer_threads(True):
        assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    with tokenizer_threads(False):
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    with tokenizer_threads(True):
        assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
    assert "TOKENIZERS_PARALLELISM" not in os.environ


def test_max_seq_length_beyond_the_model_is_refused_at_config_load(encoder):
    """embed.max_seq_length=4096 on MiniLM was a 779-line RuntimeError at embed: now the config
    is refused at load, one line naming the key (the tiny encoder has 64 positions)."""
    EmbedParams(model=str(encoder), max_seq_length=64)
    with pytest.raises(ValueError, match=r"embed\.max_seq_length=4096 is more than the 64 token"):
        EmbedParams(model=str(encoder), max_seq_length=4096)


def test_bf16_embeds_close_to_float32_under_its_own_fingerprint(
    spine, encoder, tmp_path, monkeypatch
):
    """embed.bf16: bfloat16 autocast where the device has bf16 units, float32 elsewhere; off by
    default and out of the fingerprint there (existing embed artefacts keep theirs)."""
    import ctxsim.tasks.embed as E

    assert "bf16" not in EmbedParams().model_dump()
    common = {"model": str(encoder), "n_shards": 1, "max_seq_length": 16}
    p32, a32 = _run(spine, tmp_path / "fp32", **common)
    monkeypatch.setattr(E, "bf16_available", lambda device: True)
    p16, a16 = _run(spine, tmp_path / "bf16", **common, bf16=True)
    assert p16.fingerprint != p32.fingerprint
    e32, e16 = read_embeddings(a32), read_embeddings(a16)
    assert e16.dtype == np.float32 and not np.array_equal(e16, e32)
    assert float((e32 * e16).sum(axis=1).min()) > 0.999  # the same unit vectors, nearly
    monkeypatch.setattr(E, "bf16_available", lambda device: False)  # a CPU without the units
    _, plain = _run(spine, tmp_path / "no-units", **common, bf16=True)
    assert np.array_equal(read_embeddings(plain), e32)
