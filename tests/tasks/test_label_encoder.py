"""The encoder route: pairs mined without `select`, labelled from the `embed` artefact (closed
form, softmax fit score, top-K unions), and its bad input refused in one line."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ctxsim.models.contextual.encoder_origin import explicit_profile_similarity
from ctxsim.models.encoders import EncoderInputError, encode, load_encoder
from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.errors import InputError
from ctxsim.store.stage import RunParams, fingerprint_params, resolve_stage, run_stage_locally
from ctxsim.tasks.embed import EmbedParams, EmbedStage, read_embeddings
from ctxsim.tasks.label import LabelParams, LabelStage
from ctxsim.tasks.pairs import PairsParams, PairsStage
from tests.tasks.tiny_encoder import build_tiny_encoder

RUN = RunParams(device="cpu")


def _run(stage, params, store, up):
    return run_stage_locally(resolve_stage(stage, params, RUN, store, up))[0]


@pytest.fixture(scope="module")
def route(spine, tmp_path_factory):
    """embed and pairs (neighbours by the tiny encoder + random, no select) on the sample."""
    root = tmp_path_factory.mktemp("enc-route")
    texts = spine["shard"].read_table(["text"]).column("text").to_pylist()[:400]
    enc = build_tiny_encoder(texts, root / "tiny-st")
    store = ArtefactStore(root / "store")
    embed = _run(
        EmbedStage(),
        EmbedParams(model=str(enc), n_shards=2, max_seq_length=32),
        store,
        {"shard": spine["shard"], "contexts": spine["contexts"]},
    )
    pp = PairsParams(
        pairs_per_query=2, ratio_knn=3, ratio_shared=0, ratio_random=1, encoder=str(enc)
    )
    pairs = _run(PairsStage(), pp, store, {"queries": spine["queries"], "shard": spine["shard"]})
    return store, enc, embed, pairs


def _label(spine, route, **encoder):
    store, _, embed, pairs = route
    up = {"queries": spine["queries"], "pairs": pairs, "embed": embed}
    return _run(LabelStage(), LabelParams(contextual="encoder", encoder=encoder), store, up)


def test_pairs_mine_neighbours_and_random_without_select(route):
    *_, pairs = route
    t = pairs.read_table()
    src = t.column("source").to_pylist()
    assert set(src) == {"knn", "random"} and src.count("knn") > src.count("random")
    assert "select" not in pairs.manifest["upstream"]


def test_closed_form_labels_are_the_explicit_profiles(spine, route):
    store, enc, embed, pairs = route
    art = _label(spine, route)
    t = art.read_table()
    q = spine["queries"].read_table(["query_id", "text"]).to_pydict()
    text_of = dict(zip(q["query_id"], q["text"], strict=True))
    model = load_encoder(str(enc), 32, "cpu")
    e1 = encode(model, [text_of[i] for i in t.column("s1_id").to_pylist()], 16)
    e2 = encode(model, [text_of[i] for i in t.column("s2_id").to_pylist()], 16)
    want = explicit_profile_similarity(e1, e2, read_embeddings(embed))
    got = t.column("label").to_numpy()
    assert np.allclose(got, want, atol=1e-4)
    assert np.isnan(t.column("label_fwd").to_numpy(zero_copy_only=False)).all()
    assert (t.column("n_ctx1").to_numpy() == embed.stats["contexts"]).all()
    assert art.stats["encoder_form"] == "closed" and set(t.column("split").to_pylist()) <= {
        "train",
        "dev",
        "test",
    }
    assert {"embed"} == set(art.manifest["upstream"]) - {"queries", "pairs"}


def test_softmax_and_topk_forms_label_every_pair(spine, route):
    closed = _label(spine, route).read_table().column("label").to_numpy()
    soft = _label(spine, route, form="softmax", tau=0.1)
    top = _label(spine, route, form="topk", k=4)
    for art in (soft, top):
        lab = art.read_table().column("label").to_numpy()
        assert np.isfinite(lab).all() and (np.abs(lab) <= 1 + 1e-6).all()
        assert not np.allclose(lab, closed)
    assert (top.read_table().column("n_ctx1").to_numpy() == 4).all()
    # a large temperature makes the softmax profile linear: the closed form again
    flat = _label(spine, route, form="softmax", tau=1e4).read_table()
    assert np.allclose(flat.column("label").to_numpy(), closed, atol=1e-3)


def test_lm_route_keeps_its_fingerprint_and_needs_select_and_score(spine, route):
    dump = fingerprint_params(LabelParams())
    assert not {"contextual", "encoder_form", "tau", "k", "centred", "encoder"} & set(dump)
    store, _, embed, pairs = route
    with pytest.raises(InputError, match="needs the select and score stage"):
        _run(LabelStage(), LabelParams(), store, {"queries": spine["queries"], "pairs": pairs})
    with pytest.raises(InputError, match="'encoder' needs the embed stage"):
        up = {"queries": spine["queries"], "pairs": pairs}
        _run(LabelStage(), LabelParams(contextual="encoder"), store, up)


def test_a_scorer_changed_since_embed_is_refused(spine, route, tmp_path):
    store, enc, _, pairs = route
    copy = tmp_path / "scorer"
    shutil.copytree(enc, copy)
    embed = _run(
        EmbedStage(),
        EmbedParams(model=str(copy), n_shards=1, max_seq_length=32),
        store,
        {"shard": spine["shard"], "contexts": spine["contexts"]},
    )
    weights = next(copy.rglob("model.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    up = {"queries": spine["queries"], "pairs": pairs, "embed": embed}
    with pytest.raises(EncoderInputError, match="rerun embed"):
        _run(LabelStage(), LabelParams(contextual="encoder"), store, up)


def test_pairs_bad_input_is_one_line(spine, tmp_path):
    store = ArtefactStore(tmp_path)
    up = {"queries": spine["queries"], "shard": spine["shard"]}
    with pytest.raises(InputError, match="gave 0 pairs"):
        _run(PairsStage(), PairsParams(pairs_per_query=0.001, idf_sample=100), store, up)
    with pytest.raises(InputError, match="needs the select stage"):
        _run(PairsStage(), PairsParams(pairs_per_query=1, idf_sample=100), store, up)


def test_given_pairs_get_an_origin_report_with_the_scorers_cosine(spine, route, tmp_path):
    """Origin on STS-style given pairs through the encoder route: Spearman per set, and the
    scorer's own cosine beside it."""
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    store, _, embed, _ = route
    texts = spine["shard"].read_table(["text"]).column("text").to_pylist()[:40]
    queries = pa.table(
        {
            "query_id": np.arange(40),
            "text": texts,
            "sent_id": pa.nulls(40, pa.int64()),
            "origin": ["STSb.dev"] * 40,
            "shard": np.zeros(40, np.int32),
        }
    )
    given = pa.table(
        {
            "pair_id": np.arange(20),
            "s1_query_id": np.arange(0, 40, 2),
            "s2_query_id": np.arange(1, 40, 2),
            "dataset": ["STSb"] * 20,
            "subset": ["dev"] * 20,
            "gold": np.linspace(0, 5, 20),
        }
    )
    fp = uuid.uuid4().hex[:16]
    store.write_shard("queries", fp, 0, queries, {}, 0.0)
    pq.write_table(given, store.open_partial("queries", fp) / "files" / "given_pairs.parquet")
    q = store.publish("queries", fp, 1, {"stats": {"n_shards": 1}})
    pairs = _run(PairsStage(), PairsParams(), store, {"queries": q, "shard": spine["shard"]})
    up = {"queries": q, "pairs": pairs, "embed": embed}
    art = _run(LabelStage(), LabelParams(contextual="encoder"), store, up)
    assert set(art.read_table().column("split").to_pylist()) == {"eval"}
    assert art.stats["n_pairs.STSb.dev"] == 20
    assert "spearman_all.STSb.dev.scorer_cosine" in art.stats


def test_embed_settings_are_read_typed_and_unreadable_ones_refused(route, tmp_path) -> None:
    """The encoder route reads embed's settings through EmbedParams (they were an untyped dict,
    ``ep["max_seq_length"]``); settings it cannot read name the key and say rerun embed."""
    from types import SimpleNamespace

    from ctxsim.tasks.label.contextual.encoder import embed_params

    _, enc, embed, _ = route
    ep = embed_params(embed)
    assert isinstance(ep, EmbedParams) and ep.max_seq_length == 32 and ep.model == str(enc)
    for params, key in (
        ({**embed.manifest["params"], "max_seq_len": 32}, "embed.max_seq_len"),  # older key
        ({**embed.manifest["params"], "model": str(tmp_path / "gone")}, "embed.model"),
    ):
        art = SimpleNamespace(manifest={"params": params}, path=tmp_path / "embed-art")
        with pytest.raises(EncoderInputError, match="rerun embed") as e:
            embed_params(art)
        assert key in str(e.value) and "\n" not in str(e.value)
