"""Screening (Sec. 3.3): cached last layer = full model; ranks, is_own, outside queries."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from ctxsim.models.contextual.discriminator import encode_texts, pad_batch
from ctxsim.scores.loading import load_discriminator
from tests.models.contextual.tiny_scoring import TINY_DISCRIMINATOR as TINY
from tests.models.corpus.test_retrieval import run_stages

KEEP = 8


@pytest.fixture(scope="module")
def screened(spine, tmp_path_factory):
    root = tmp_path_factory.mktemp("screen")
    return run_stages(
        spine,
        root,
        {"index": {}, "retrieve": {"top_k": 15}, "discriminator": TINY, "screen": {"keep": KEEP}},
    )


def test_cached_screening_equals_the_full_model_per_triple(screened) -> None:
    model, encode, meta = load_discriminator(screened["discriminator"].files_dir)
    sents = (
        screened["shard"].read_table(["sent_id", "text"]).to_pandas().set_index("sent_id")["text"]
    )
    conts = screened["contexts"].read_table().to_pandas().set_index("context_id")
    queries = screened["queries"].read_table().to_pandas().set_index("query_id")
    hits = screened["retrieve"].read_table().to_pandas()
    out = screened["screen"].read_table().to_pandas()
    assert screened["screen"].read_table().schema.field("disc_logit").type == pa.float32()
    tok = lambda t: encode_texts(encode, [t], meta["max_tokens"])[0]  # noqa: E731
    for qid in queries.index[:6]:
        q = queries.loc[qid]
        chunks = set(hits.loc[hits.query_id == qid, "chunk_id"])
        cand = conts[conts.chunk_id.isin(chunks)]
        # Brute force: the whole model (BiLSTM + head) on every candidate triple.
        lefts = [tok(" ".join(sents[s] for s in ids)) for ids in cand.left_sent_ids]
        rights = [tok(" ".join(sents[s] for s in ids)) for ids in cand.right_sent_ids]
        with torch.no_grad():
            full = model(
                pad_batch(lefts), pad_batch([tok(q.text)] * len(cand)), pad_batch(rights)
            ).numpy()
        order = np.lexsort((cand.index.to_numpy(), -full))[:KEEP]
        got = out[out.query_id == qid].sort_values("rank")
        assert got["rank"].tolist() == list(range(len(got)))
        np.testing.assert_allclose(got.disc_logit.to_numpy(), full[order], rtol=1e-4, atol=1e-5)
        near_ties = np.diff(np.sort(full)).min() if len(full) > 1 else 1.0
        if near_ties > 1e-4:
            assert got.context_id.tolist() == cand.index.to_numpy()[order].tolist()
        own = got.context_id.map(conts.centre_sent_id) == q.sent_id
        assert got.is_own.tolist() == own.tolist()
        assert set(got.chunk_id) <= chunks


def test_screen_stats_and_own_context(screened) -> None:
    s = screened["screen"].stats
    out = screened["screen"].read_table().to_pandas()
    assert out.groupby("query_id").size().max() <= KEEP
    assert s["rows"] == len(out) and s["queries"] == screened["queries"].num_rows
    # Corpus queries find their own chunk by TF-IDF, so their own context is a candidate.
    assert s["own_in_candidates"] >= 0.8 * s["corpus_queries"]
    assert out.is_own.sum() == s["own_kept"]


def test_outside_queries_and_cache_reuse(screened, tmp_path) -> None:
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, Stage, StageParams, resolve_stage, run_stage_locally

    class OutsideQueries(Stage):
        name = "queries"

        def run_shard(self, ctx, shard):
            t = pa.table(
                {
                    "query_id": pa.array([0, 1, 2], pa.int64()),
                    "text": ["The bread rose slowly in the warm kitchen.", "Yes.", "Zzzx qqqy."],
                    "sent_id": pa.array([None, None, None], pa.int64()),
                    "origin": ["STSb.dev"] * 3,
                    "shard": pa.array([0, 0, 0], pa.int32()),
                }
            )
            return t, {"queries": 3, "n_shards": 1}

    store, run = ArtefactStore(tmp_path), RunParams(root=str(tmp_path), device="cpu")
    arts = dict(screened)
    arts["queries"] = run_stage_locally(
        resolve_stage(OutsideQueries(), StageParams(), run, store, {})
    )[0]
    arts = run_stages(arts, tmp_path, {"retrieve": {"top_k": 15}, "screen": {"keep": KEEP}})
    ret = arts["retrieve"].read_table().to_pandas()
    assert set(ret.query_id) == {0, 1} and ret[ret.query_id == 1].fallback.all()
    out = arts["screen"].read_table().to_pandas()
    assert len(out) > 0 and not out.is_own.any() and set(out.query_id) <= {0, 1}
    caches = list(tmp_path.glob("_cache/screen-contexts/*/context_part.npy"))
    assert len(caches) == 1
    n_ctx = screened["contexts"].num_rows
    assert np.load(caches[0], mmap_mode="r").shape[0] == n_ctx


def test_a_corrupt_context_cache_is_moved_aside_and_computed_again(tmp_path, monkeypatch, caplog):
    """Float32 bytes flipped in the cached context part (mtime put back) were trusted: the
    screen artefact was republished under the same fingerprint with a third of its rows
    changed. The cache is checksummed: a mismatch (or a cache without checksums) is moved
    aside with a warning and computed again; an intact one is reused."""
    import logging
    import os
    from types import SimpleNamespace

    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.tasks import screen

    computed: list[int] = []

    def compute(ctx, model, encode, max_tokens, batch_size):
        computed.append(1)
        ids = np.arange(40, dtype=np.int64)
        return (
            ids,
            ids // 4,
            ids + 1000,
            np.linspace(-1, 1, 40 * 3, dtype=np.float32).reshape(40, 3),
        )

    monkeypatch.setattr(screen, "_compute_cache", compute)
    inputs = {
        n: SimpleNamespace(fingerprint=f"{n}-fp") for n in ("contexts", "shard", "discriminator")
    }
    ctx = SimpleNamespace(
        store=ArtefactStore(tmp_path),
        input=inputs.__getitem__,
        logger=logging.getLogger("ctxsim.test.screen"),
    )

    def load():
        return [np.array(a) for a in screen.context_cache(ctx, None, None, 32, 8)]

    first = load()
    assert computed == [1] and load()[3].tobytes() == first[3].tobytes() and computed == [1]
    (cache,) = tmp_path.glob("_cache/screen-contexts/*")
    part = cache / "context_part.npy"
    st = part.stat()
    raw = bytearray(part.read_bytes())
    raw[-40:] = bytes(b ^ 0xFF for b in raw[-40:])  # flip the last ten float32 values
    part.write_bytes(bytes(raw))
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime kept
    with caplog.at_level("WARNING"):
        again = load()
    assert computed == [1, 1]  # computed again, not read
    assert again[3].tobytes() == first[3].tobytes()
    warned = [r.getMessage() for r in caplog.records]
    assert any(f"{cache}: context_part.npy: sha256 mismatch; moved to" in m for m in warned)
    aside = list(cache.parent.glob(f"{cache.name}.corrupt-*"))
    assert len(aside) == 1 and (aside[0] / "context_part.npy").read_bytes() == bytes(raw)
    # a cache written before the checksums cannot be checked: computed again as well
    (cache / screen.CACHE_SUMS).unlink()
    load()
    assert computed == [1, 1, 1] and (cache / screen.CACHE_SUMS).is_file()
    load()
    assert computed == [1, 1, 1]
