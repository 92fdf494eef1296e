"""The score cache (scores/eq3.py): a later run reads the windows an earlier one scored and
gets the same values, a corrupt cache file is moved aside and scored again, and the cache is
keyed by the scorer, not by the generator artefact's fingerprint."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from ctxsim.models.contextual.generator import tiny_causal
from tests.models.contextual.tiny_scoring import TINY
from tests.scores.score_stage_helpers import score_inputs


def test_score_cache_reuses_earlier_windows_and_gives_the_same_values(
    spine, generator_art, tmp_path
):
    """A second score run on the same root computes only windows no run scored before, and its
    values equal a run without the cache."""

    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.score import ScoreParams, ScoreStage

    qids = spine["queries"].read_table(["query_id"]).column("query_id").to_numpy()[:4]
    ctx_ids = spine["contexts"].read_table(["context_id"]).column("context_id").to_numpy()[:30]
    rng = np.random.default_rng(3)
    big = {int(a): [int(x) for x in rng.choice(ctx_ids, 4, replace=False)] for a in qids}

    def world(k: int, root):
        return score_inputs(spine, generator_art, root, {a: c[:k] for a, c in big.items()}, qids)

    def score(k: int, root, cache: bool):
        params = ScoreParams(lambda_disc=0.0, lambda_right=0.0, cache=cache)
        run = RunParams(root=str(root), torch_threads=1)
        art, _ = run_stage_locally(
            resolve_stage(ScoreStage(), params, run, ArtefactStore(root), world(k, root))
        )
        t = art.read_table().to_pydict()
        key = list(zip(t["query_id"], t["context_id"], strict=True))
        return art.stats, dict(zip(key, zip(t["gen_fwd"], t["gen_left"], strict=True), strict=True))

    warm = tmp_path / "warm"
    st2, small = score(2, warm, True)
    assert st2["cache_hits"] == 0 and (warm / "_cache" / "scores").is_dir()
    st4, grown = score(4, warm, True)
    assert st4["cache_hits"] == 2 * len(small)  # both directions of every earlier window
    assert st4["pairs"] == len(grown) > len(small)
    _, cold = score(4, tmp_path / "cold", False)
    assert not (tmp_path / "cold" / "_cache" / "scores").exists()
    assert grown.keys() == cold.keys()
    for k in cold:
        assert grown[k] == pytest.approx(cold[k], abs=1e-5)


def test_corrupt_score_cache_file_is_moved_aside_and_recomputed(
    spine, generator_art, tmp_path, caplog
):
    """Six flipped bytes inside a cache file's values must not reach a fresh score artefact: the
    file fails its checksum, is moved aside to ``*.corrupt-<id>`` with a warning, and is scored
    again."""
    import logging
    import shutil

    import pyarrow.parquet as pq

    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.score import ScoreParams, ScoreStage

    qids = spine["queries"].read_table(["query_id"]).column("query_id").to_numpy()[:4]
    ctx_ids = spine["contexts"].read_table(["context_id"]).column("context_id").to_numpy()[:30]
    rng = np.random.default_rng(5)
    chosen = {int(a): [int(x) for x in rng.choice(ctx_ids, 3, replace=False)] for a in qids}
    root = tmp_path / "root"
    up = score_inputs(spine, generator_art, root, chosen, qids)

    def score(token_budget: int):  # computed anew each time (the budget is a knob: no new
        # fingerprint), so only the score cache can carry values from one call to the next
        shutil.rmtree(root / "score", ignore_errors=True)
        params = ScoreParams(lambda_disc=0.0, lambda_right=0.0, token_budget=token_budget)
        run = RunParams(root=str(root), torch_threads=1)
        art, _ = run_stage_locally(
            resolve_stage(ScoreStage(), params, run, ArtefactStore(root), up)
        )
        return art.stats, art.read_table(["gen_fwd", "gen_left"]).to_pydict()

    _, clean = score(8192)
    files = sorted((root / "_cache" / "scores").rglob("*.parquet"))
    assert files
    for f in files:  # flip six bytes of the first stored score, as the hostile test did
        raw = bytearray(f.read_bytes())
        value = pq.read_table(f).column("value")[0].as_py()
        at = raw.find(np.float32(value).tobytes())
        assert at > 0
        raw[at : at + 4] = bytes(b ^ 0x5A for b in raw[at : at + 4])
        raw[at + 4 : at + 6] = bytes(b ^ 0x5A for b in raw[at + 4 : at + 6])
        f.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        stats, again = score(4096)
    assert stats["cache_hits"] == 0  # nothing read from the corrupt files
    for col in ("gen_fwd", "gen_left"):
        assert again[col] == pytest.approx(clean[col], abs=1e-5)
    assert all(list(f.parent.glob(f"{f.name}.corrupt-*")) for f in files)
    assert sum("sha256 mismatch" in r.getMessage() for r in caplog.records) == len(files)
    stats, third = score(2048)  # the recomputed scores went back into the cache, intact
    assert stats["cache_hits"] == 2 * len(clean["gen_fwd"]) and third == again


def test_score_cache_follows_the_scorer_not_the_generator_fingerprint(spine, tok, tmp_path):
    """Zero-shot generator artefacts that differ only in their evaluation settings score alike:
    they get one scorer id, so a score run with the second reads every window from the cache;
    other limits make another id."""
    import json

    from ctxsim.scores.loading import META_FILE
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.generator import GeneratorParams, GeneratorStage
    from ctxsim.tasks.score import ScoreParams, ScoreStage

    backbone = tmp_path / "backbone"
    tiny_causal(tok, TINY).save_pretrained(backbone)
    tok.save_pretrained(backbone)
    root = tmp_path / "root"
    store = ArtefactStore(root)
    run = RunParams(root=str(root), torch_threads=1)

    def generator(**changes):
        params = GeneratorParams(
            backend="causal", backbone=str(backbone), train_steps=0, n_eval=8, max_val_windows=20
        ).model_copy(update=changes)
        up = {k: spine[k] for k in ("shard", "contexts")}
        return run_stage_locally(resolve_stage(GeneratorStage(), params, run, store, up))[0]

    def scorer_id(a) -> str:
        return json.loads((a.files_dir / META_FILE).read_text())["scorer_id"]

    first_gen, eval_only = generator(), generator(n_eval=4, token_budget=1024)
    assert eval_only.fingerprint != first_gen.fingerprint
    assert scorer_id(eval_only) == scorer_id(first_gen)
    assert scorer_id(generator(max_context_tokens=16)) != scorer_id(first_gen)

    qids = spine["queries"].read_table(["query_id"]).column("query_id").to_numpy()[:4]
    ctx_ids = spine["contexts"].read_table(["context_id"]).column("context_id").to_numpy()[:30]
    rng = np.random.default_rng(5)
    cs = {int(a): [int(x) for x in rng.choice(ctx_ids, 3, replace=False)] for a in qids}

    def score(gen) -> dict:
        up = score_inputs(spine, (gen, None), root, cs, qids)
        params = ScoreParams(lambda_disc=0.0, lambda_right=0.0)
        return run_stage_locally(resolve_stage(ScoreStage(), params, run, store, up))[0].stats

    first = score(first_gen)
    assert first["cache_hits"] == 0
    assert score(eval_only)["cache_hits"] == 2 * first["pairs"]  # fwd and left of every window


def causal_generator(spine, tok, root):
    """A generator artefact of the causal backend: a tiny random Llama saved as its backbone,
    no training (the score stage's tests of causal-only options)."""
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.generator import GeneratorParams, GeneratorStage

    backbone = root.parent / "backbone"
    tiny_causal(tok, TINY).save_pretrained(backbone)
    tok.save_pretrained(backbone)
    run = RunParams(root=str(root), torch_threads=1)
    gp = GeneratorParams(backend="causal", backbone=str(backbone), train_steps=0, n_eval=0)
    up = {k: spine[k] for k in ("shard", "contexts")}
    return run_stage_locally(resolve_stage(GeneratorStage(), gp, run, ArtefactStore(root), up))[0]


def context_sets(spine, seed: int, n_contexts: int = 30, k: int = 4):
    """The first 4 queries, each with ``k`` of the first ``n_contexts`` contexts (by ``seed``)."""
    qids = spine["queries"].read_table(["query_id"]).column("query_id").to_numpy()[:4]
    ctx = spine["contexts"].read_table(["context_id"]).column("context_id").to_numpy()[:n_contexts]
    rng = np.random.default_rng(seed)
    return qids, {int(a): [int(x) for x in rng.choice(ctx, k, replace=False)] for a in qids}


def score_fwd_left(spine, gen, root, cs, qids, **changes):
    """A score run of the fwd and left terms on ``root`` with ``changes`` to its params: (the
    artefact, its gen_fwd then gen_left values in (query, context) order)."""
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.score import ScoreParams, ScoreStage

    params = ScoreParams(lambda_disc=0.0, lambda_right=0.0, **changes)
    run = RunParams(root=str(root), torch_threads=1)
    up = score_inputs(spine, gen, root, cs, qids)
    art, _ = run_stage_locally(resolve_stage(ScoreStage(), params, run, ArtefactStore(root), up))
    t = art.read_table().sort_by([("query_id", "ascending"), ("context_id", "ascending")])
    return art, np.concatenate([t.column(c).to_numpy() for c in ("gen_fwd", "gen_left")])


def test_bf16_weights_score_in_their_own_cache_close_to_float32(
    spine, generator_art, tok, tmp_path
):
    """score.bf16_weights_on_cpu: the causal scorer's weights in bfloat16 give scores near
    float32's (ranks kept) but not equal, so they neither read nor fill float32's cache entries; a
    second bf16 run reads all of its own; a seq2seq generator and both CPU precisions at once are
    refused."""
    from ctxsim.tasks.score import ScoreParams

    qids, cs = context_sets(spine, seed=4)
    root = tmp_path / "root"
    causal = causal_generator(spine, tok, root)

    def score(gen=(causal, None), **changes):
        return score_fwd_left(spine, gen, root, cs, qids, **changes)

    fp32_art, fp32 = score()
    bf16_art, bf16 = score(bf16_weights_on_cpu=True)
    assert bf16_art.fingerprint != fp32_art.fingerprint
    assert bf16_art.stats["cache_hits"] == 0  # float32's entries are not read
    assert not np.allclose(bf16, fp32, atol=1e-6)  # really another computation
    assert np.max(np.abs(bf16 - fp32)) < 0.2  # nats per token
    assert spearmanr(bf16, fp32).statistic > 0.95
    again_art, again = score(bf16_weights_on_cpu=True, lambda_fwd=0.5)  # another artefact
    assert again_art.stats["cache_hits"] == len(bf16)
    np.testing.assert_array_equal(again, bf16)
    assert "bf16_weights_on_cpu" not in ScoreParams().model_dump()  # old fingerprints kept
    with pytest.raises(ValueError, match="exclusive"):
        ScoreParams(int8_on_cpu=True, bf16_weights_on_cpu=True)
    with pytest.raises(Exception, match="supports the causal backend"):
        score(generator_art, bf16_weights_on_cpu=True)


def test_w8a8_scores_in_its_own_cache_close_to_bf16(spine, tok, tmp_path):
    """score.w8a8_on_cpu: int8 products on top of bf16 weights give scores near bf16's (ranks
    kept) but not equal: another fingerprint and cache namespace; a second run reads its own."""
    from ctxsim.tasks.score import ScoreParams

    qids, cs = context_sets(spine, seed=6)
    root = tmp_path / "root"
    causal = causal_generator(spine, tok, root)

    def score(**changes):
        return score_fwd_left(
            spine, (causal, None), root, cs, qids, bf16_weights_on_cpu=True, **changes
        )

    bf16_art, bf16 = score()
    w8_art, w8 = score(w8a8_on_cpu=True)
    assert w8_art.fingerprint != bf16_art.fingerprint
    assert w8_art.stats["cache_hits"] == 0  # bf16's entries are not read
    assert not np.allclose(w8, bf16, atol=1e-6)
    assert np.max(np.abs(w8 - bf16)) < 0.2  # nats per token
    assert spearmanr(w8, bf16).statistic > 0.95
    again_art, again = score(w8a8_on_cpu=True, lambda_fwd=0.5)
    assert again_art.stats["cache_hits"] == len(w8)
    np.testing.assert_array_equal(again, w8)
    assert "w8a8_on_cpu" not in ScoreParams().model_dump()  # old fingerprints kept
    # the down projections kept bf16: other scores, another namespace
    kept_art, kept = score(w8a8_on_cpu=True, w8a8_bf16_layers=["down_proj"])
    assert kept_art.fingerprint not in {w8_art.fingerprint, bf16_art.fingerprint}
    assert kept_art.stats["cache_hits"] == 0
    assert not np.allclose(kept, w8, atol=1e-6) and not np.allclose(kept, bf16, atol=1e-6)
    assert spearmanr(kept, bf16).statistic > 0.95


def test_compile_blocks_is_a_speed_knob_same_fingerprint_and_scores(
    spine, tok, tmp_path, monkeypatch
):
    """score.compile_blocks: the causal scorer's MLPs and norms under torch.compile (traced here
    with dynamo's eager backend: no kernels to build) leave the fingerprint, the cache key and the
    scores as they were."""
    import torch

    from ctxsim.models.contextual.generator import CausalPrefixScorer

    real, scopes = torch.compile, []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: real(m, **{**kw, "backend": "eager"}))
    real_compile = CausalPrefixScorer.compile

    def spy(self, scope="blocks", backend="inductor"):
        scopes.append(scope)
        return real_compile(self, scope, backend)

    monkeypatch.setattr(CausalPrefixScorer, "compile", spy)
    qids, cs = context_sets(spine, seed=5, n_contexts=20, k=3)
    causal = causal_generator(spine, tok, tmp_path / "root")

    def score(root, **changes):
        return score_fwd_left(spine, (causal, None), root, cs, qids, **changes)

    eager_art, eager = score(tmp_path / "eager")
    assert scopes == []
    comp_art, comp = score(tmp_path / "compiled", compile_blocks=True)
    assert scopes and set(scopes) == {"blocks"}  # each shard loads (and compiles) its scorer
    assert comp_art.fingerprint == eager_art.fingerprint
    np.testing.assert_allclose(comp, eager, atol=1e-4)
