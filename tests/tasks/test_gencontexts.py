"""Generated contexts: seeded sampling, the sample cache, and generated slots through select,
score and label."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest
import torch

from ctxsim.models.contextual.context_sampling import (
    SamplingSettings,
    first_sentence,
    render,
    sample_texts,
)
from ctxsim.models.contextual.generator import TinyConfig, tiny_causal, train_wordpiece_tokenizer
from tests.conftest import run_spine

TINY = TinyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
WORDS = "the cat sat on a mat while dog ran far away from home it was dark and stormy night".split()


@pytest.fixture(scope="module")
def lm():
    tok = train_wordpiece_tokenizer([], vocab=WORDS)
    torch.manual_seed(0)
    return tiny_causal(tok, TINY), tok


def test_samples_depend_on_their_seed_only(lm) -> None:
    model, tok = lm
    prompts = ["the cat sat on a mat", "a dog ran far away from home", "it was dark"] * 2
    seeds = [1, 2, 3, 4, 5, 6]
    s = SamplingSettings(max_new_tokens=6, top_k=50)
    a = sample_texts(model, tok, prompts, seeds, s, batch_size=6)
    b = sample_texts(model, tok, prompts, seeds, s, batch_size=6)
    assert a == b and all(a)
    # one at a time, in reverse order: each sample is the same text (the cache relies on it)
    c = [
        sample_texts(model, tok, [p], [x], s, batch_size=1)[0]
        for p, x in zip(prompts, seeds, strict=True)
    ]
    assert c == a
    d = sample_texts(model, tok, prompts, [x + 100 for x in seeds], s, batch_size=6)
    assert d != a
    with pytest.raises(ValueError, match="one seed per prompt"):
        sample_texts(model, tok, prompts, seeds[:2], s)


def test_first_sentence_and_templates() -> None:
    assert first_sentence(" The dog ran home. Then it slept.\nMore") == "The dog ran home."
    assert first_sentence('A cat sat there" he said', quote=True) == "A cat sat there"
    assert render("right", " A man sings. ") == "A man sings."
    assert "A man sings." in render("left_instruct", "A man sings.")
    with pytest.raises(ValueError, match="unknown prompt template"):
        render("nope", "x")


@pytest.fixture(scope="module")
def backbone(lm, tmp_path_factory):
    model, tok = lm
    path = tmp_path_factory.mktemp("lm") / "tiny-causal"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _gen_stage(spine, root, backbone, **changes):
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.gencontexts import GenContextsParams, GenContextsStage

    params = GenContextsParams(
        model=str(backbone), k_right=2, k_left=1, max_new_tokens=5, batch_size=8
    ).model_copy(update=changes)
    run = RunParams(root=str(root), torch_threads=1, quiet=True)
    plan = resolve_stage(
        GenContextsStage(), params, run, ArtefactStore(root), {"queries": spine["queries"]}
    )
    return run_stage_locally(plan)[0]


def test_gencontexts_provenance_ids_and_cache(spine, backbone, tmp_path) -> None:
    from ctxsim.tasks.gencontexts import GEN_CONTEXT_BASE, GEN_SENT_BASE

    art = _gen_stage(spine, tmp_path, backbone)
    t = art.read_table()
    nq = spine["queries"].num_rows
    assert t.num_rows == 3 * nq and art.stats["sampled"] == 3 * nq
    assert (t.column("context_id").to_numpy() >= GEN_CONTEXT_BASE).all()
    assert (t.column("sent_id").to_numpy() >= GEN_SENT_BASE).all()
    assert len(set(t.column("context_id").to_pylist())) == t.num_rows
    right = t.filter(pc.equal(t["side"], "right"))
    assert all(len(x) == 1 for x in right.column("right_sent_ids").to_pylist())
    assert all(len(x) == 0 for x in right.column("left_sent_ids").to_pylist())
    assert set(t.column("template").to_pylist()) == {"right", "left_instruct"}
    assert set(t.column("model").to_pylist()) == {str(backbone)}
    # more samples: only the new ones are drawn, the old ones are the same texts
    more = _gen_stage(spine, tmp_path, backbone, k_right=3)
    assert more.stats["sampled"] == nq and more.stats["from_cache"] == 3 * nq
    m = more.read_table()
    key = ["context_id", "text", "seed"]
    old = {tuple(r.values()) for r in t.select(key).to_pylist()}
    assert old <= {tuple(r.values()) for r in m.select(key).to_pylist()}


def test_generated_slots_through_select_score_label(backbone, tmp_path) -> None:
    from ctxsim.tasks.gencontexts import GEN_CONTEXT_BASE

    arts = run_spine(
        tmp_path,
        {
            "gencontexts.model": f"'{backbone}'",
            "gencontexts.k_right": 3,
            "gencontexts.k_left": 2,
            "gencontexts.max_new_tokens": 5,
            "select.source": "both",
            "select.max_size": 6,
            "generator.train_steps": 5,
            "discriminator.max_windows_per_epoch": 500,
            "pairs.pairs_per_query": 2,
            "score.lambda_right": 1.0,  # a sampled right slot is scored by its right term
            "score.pmi": "[]",  # plain log-probs (the asserts below expect them negative)
        },
        until="label",
    )
    sel = arts["select"].read_table()
    cid = sel.column("context_id").to_numpy()
    gen = cid >= GEN_CONTEXT_BASE
    assert gen.any() and (~gen).any()  # both sources made it into the sets
    # a query's generated slots are its own
    g = arts["gencontexts"].read_table(["context_id", "query_id"]).to_pandas()
    owner = dict(zip(g["context_id"], g["query_id"], strict=True))
    assert all(
        owner[c] == q for c, q in zip(cid[gen], sel.column("query_id").to_numpy()[gen], strict=True)
    )
    sc = arts["score"].read_table().to_pandas()
    side = dict(
        zip(
            *[
                arts["gencontexts"].read_table([c]).column(0).to_pylist()
                for c in ("context_id", "side")
            ],
            strict=True,
        )
    )
    rows = sc[sc["context_id"] >= GEN_CONTEXT_BASE]
    assert len(rows)
    is_right = rows["context_id"].map(side) == "right"
    # the absent side's term is 0 and never computed; the present side's is a log-probability
    assert (rows.loc[is_right, "gen_left"] == 0).all()
    assert (rows.loc[is_right, "gen_right"] < 0).all()
    assert (rows.loc[~is_right, "gen_right"] == 0).all()
    assert (rows.loc[~is_right, "gen_left"] < 0).all()
    assert np.isfinite(rows["S"]).all()
    lab = arts["label"].read_table()
    assert lab.num_rows > 0
    assert np.isfinite(lab.column("label").to_numpy()).all()


def test_generated_ranks_have_no_gaps() -> None:
    """`both` puts sample r beside screen rank r: ranks run 0, 1, 2 ... per query whatever
    sides were sampled (right-only samples once got 0, 2, 4 ...: 5 retrieved to 3 generated in
    a |Cs| of 8)."""
    from ctxsim.tasks.select_contexts.stage import generated_ranks

    q = np.array([5, 5, 5, 5, 2, 2, 2])  # query 5: right only; query 2: both sides, no left 1
    sample = np.array([3, 0, 2, 1, 0, 0, 1])
    left = np.array([0, 0, 0, 0, 1, 0, 0])
    assert generated_ranks(q, sample, left).tolist() == [3, 0, 2, 1, 1, 0, 2]


def test_generate_source_needs_the_stage(spine, tmp_path) -> None:
    with pytest.raises(ValueError, match="gencontexts"):
        run_spine(tmp_path, {"select.source": "generate"}, until="select")


def test_generated_side_needs_its_lambda() -> None:
    from ctxsim.flows.config import ConfigError, load_config
    from tests.conftest import REPO

    sets = ["gencontexts.k_right=2", "score.lambda_right=0"]
    with pytest.raises(ConfigError, match="gencontexts.k_right > 0 needs score.lambda_right"):
        load_config(REPO / "configs" / "quickstart.yaml", sets)
    load_config(REPO / "configs" / "generated.yaml")  # the shipped config is consistent


def test_a_corrupt_sample_cache_file_is_moved_aside_not_trusted(tmp_path, caplog) -> None:
    """The gencontexts sample cache is checksummed like the score cache: a file whose bytes no
    longer match the sha256 in its name (or one written before the checksums) is moved aside
    with a warning, and its samples count as missing (drawn again), never read."""
    import hashlib
    import os

    from ctxsim.tasks.gencontexts import SampleCache

    cache = SampleCache(tmp_path, "some-model")
    keys = [SampleCache.key("right", "{}", f"sentence {i}", i) for i in range(20)]
    texts = [f"a sampled continuation number {i}." for i in range(20)]
    cache.put(keys, texts)
    assert cache.get(keys) == dict(zip(keys, texts, strict=True))
    (f,) = cache.dir.glob("*.parquet")
    assert f.name == f"{hashlib.sha256(f.read_bytes()).hexdigest()}.parquet"  # named by content
    st = f.stat()
    raw = bytearray(f.read_bytes())
    mid = len(raw) // 2
    raw[mid : mid + 8] = bytes(b ^ 0xFF for b in raw[mid : mid + 8])  # bytes flipped in place
    f.write_bytes(bytes(raw))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with caplog.at_level("WARNING"):
        assert cache.get(keys) == {}
    assert any(
        f"gencontexts sample cache file {f}: sha256 mismatch; moved to" in r.getMessage()
        for r in caplog.records
    )
    (aside,) = cache.dir.glob(f"{f.name}.corrupt-*")
    assert aside.is_file() and not f.exists()
    # a file from before the checksums (any other name) is not trusted either
    legacy = cache.dir / "0123abcd.parquet"
    os.replace(aside, legacy)
    assert cache.get(keys) == {} and list(cache.dir.glob(f"{legacy.name}.corrupt-*"))


def test_bf16_weights_samples_depend_on_the_batch_and_skip_the_cache(spine, backbone, tmp_path):
    """gencontexts.bf16_weights_on_cpu: bf16 logits move with the batch, so the batch size joins
    the fingerprint and the sample cache is neither read nor written (float32's entries would not
    be what a bf16 batch draws); the same settings draw the same samples again; the default
    leaves the fingerprint of earlier runs as it was."""
    from ctxsim.tasks.gencontexts import GenContextsParams, GenContextsStage

    fp32 = _gen_stage(spine, tmp_path, backbone)
    bf16 = _gen_stage(spine, tmp_path / "b", backbone, bf16_weights_on_cpu=True)
    assert bf16.fingerprint != fp32.fingerprint
    assert bf16.stats["from_cache"] == 0 and bf16.stats["sampled"] == fp32.stats["sampled"]
    a, b = fp32.read_table(), bf16.read_table()
    assert a.column("context_id").to_pylist() == b.column("context_id").to_pylist()
    assert a.column("seed").to_pylist() == b.column("seed").to_pylist()
    assert not (tmp_path / "b" / "_cache" / "gencontexts").exists()  # nothing cached
    again = _gen_stage(spine, tmp_path / "c", backbone, bf16_weights_on_cpu=True)
    assert again.fingerprint == bf16.fingerprint
    assert again.read_table().column("text").to_pylist() == b.column("text").to_pylist()
    other = _gen_stage(spine, tmp_path / "c", backbone, bf16_weights_on_cpu=True, batch_size=3)
    assert other.fingerprint != bf16.fingerprint and other.stats["from_cache"] == 0
    stage = GenContextsStage()
    assert stage.fingerprint_extra(GenContextsParams(batch_size=3)) == {}  # a knob in float32
    assert "bf16_weights_on_cpu" not in GenContextsParams().model_dump()


def test_bf16_weights_warn_on_a_cpu_without_bf16_units(spine, backbone, tmp_path, monkeypatch):
    import logging

    from ctxsim.models.contextual import quantize

    monkeypatch.setattr(quantize, "cpu_has_bf16", lambda: False)
    seen: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    log = logging.getLogger("ctxsim.gencontexts")
    handler = Catch(level=logging.WARNING)
    log.addHandler(handler)
    try:
        _gen_stage(spine, tmp_path, backbone, bf16_weights_on_cpu=True, batch_size=5)
    finally:
        log.removeHandler(handler)
    assert any("no bf16 units" in m and "gencontexts.bf16_weights_on_cpu=false" in m for m in seen)
