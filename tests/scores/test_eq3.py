"""S(s, c) of Eq. 3 over window rows (scores/eq3.py and its scorers, scores/scorers/): the
`score` stage on the sample corpus scores exactly the needed pairs, takes the disc term from
screen, the discriminator or a registered scorer, computes PMI terms, and select orders by S."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctxsim.models.contextual.score_engine import naive_score
from tests.models.contextual.tiny_scoring import WORDS
from tests.scores.score_stage_helpers import publish_table, score_inputs


def test_score_stage_scores_exactly_the_needed_pairs_once(spine, generator_art, tmp_path):
    import pyarrow as pa

    from ctxsim.scores.loading import load_scorer
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.score import ScoreParams, ScoreStage

    q = spine["queries"].read_table(["query_id", "shard"])
    qids = q.column("query_id").to_numpy()[:6]
    ctx_ids = spine["contexts"].read_table(["context_id"]).column("context_id").to_numpy()
    rng = np.random.default_rng(0)
    cs = {int(a): [int(x) for x in rng.choice(ctx_ids[:40], 3, replace=False)] for a in qids}
    select = pa.table(
        {
            "query_id": pa.array([a for a in cs for _ in cs[a]], pa.int64()),
            "context_id": pa.array([c for a in cs for c in cs[a]], pa.int64()),
            "position": pa.array([i for a in cs for i in range(len(cs[a]))], pa.int32()),
        }
    )
    plist = [(qids[0], qids[1]), (qids[1], qids[2]), (qids[3], qids[4]), (qids[0], qids[1])]
    pairs = pa.table(
        {
            "pair_id": pa.array(range(len(plist)), pa.int64()),
            "s1_query_id": pa.array([int(a) for a, _ in plist], pa.int64()),
            "s2_query_id": pa.array([int(b) for _, b in plist], pa.int64()),
        }
    )
    expected = {
        (int(x), c) for a, b in plist for x in (a, b) for c in set(cs[int(a)]) | set(cs[int(b)])
    }
    a0 = int(qids[0])
    screen = pa.table(
        {
            "query_id": pa.array([a0, a0], pa.int64()),
            "context_id": pa.array(cs[a0][:2], pa.int64()),
            "disc_logit": pa.array([2.0, -1.0], pa.float32()),
        }
    )
    up = {k: spine[k] for k in ("queries", "contexts", "shard")}
    up["generator"] = generator_art[0]
    up["select"] = publish_table(tmp_path, "select", select)
    up["pairs"] = publish_table(tmp_path, "pairs", pairs)
    up["screen"] = publish_table(tmp_path, "screen", screen)
    params = ScoreParams(lambda_disc=1.0, lambda_fwd=1.0, lambda_left=0.5, lambda_right=2.0)
    plan = resolve_stage(
        ScoreStage(), params, RunParams(root=str(tmp_path)), ArtefactStore(tmp_path), up
    )
    art, _ = run_stage_locally(plan)
    t = art.read_table()
    got = list(
        zip(t.column("query_id").to_pylist(), t.column("context_id").to_pylist(), strict=True)
    )
    assert len(got) == len(set(got)) and set(got) == expected
    assert art.stats["pairs"] == len(expected)
    d = t.to_pydict()
    for i, (qq, cc) in enumerate(got):
        if qq == a0 and cc in cs[a0][:2]:
            logit = 2.0 if cc == cs[a0][0] else -1.0
            assert d["disc_source"][i] == "screen"
            assert d["disc_logprob"][i] == pytest.approx(-np.log1p(np.exp(-logit)), abs=1e-6)
        else:
            assert d["disc_source"][i] == "missing" and d["disc_logprob"][i] == 0.0
        s = (
            d["disc_logprob"][i]
            + d["gen_fwd"][i]
            + 0.5 * d["gen_left"][i]
            + 2.0 * d["gen_right"][i]
        )
        assert d["S"][i] == pytest.approx(s, rel=1e-5, abs=1e-5)
    # the terms are those of the generator's scorer, one pair at a time
    scorer, _ = load_scorer(generator_art[0].files_dir)
    qtext = dict(
        zip(*spine["queries"].read_table(["query_id", "text"]).to_pydict().values(), strict=True)
    )
    co = spine["contexts"].read_table().to_pydict()
    sh = dict(
        zip(*spine["shard"].read_table(["sent_id", "text"]).to_pydict().values(), strict=True)
    )
    k = co["context_id"].index(got[0][1])
    left = " ".join(sh[x] for x in co["left_sent_ids"][k])
    right = " ".join(sh[x] for x in co["right_sent_ids"][k])
    ref = naive_score(scorer, [left], [qtext[got[0][0]]], [right])
    assert d["gen_fwd"][0] == pytest.approx(float(ref["fwd"][0]), abs=1e-4)
    assert d["gen_right"][0] == pytest.approx(float(ref["right"][0]), abs=1e-4)

    # a direction whose lambda is 0 is not computed (NaN), and S leaves it out
    zero = ScoreParams(lambda_disc=1.0, lambda_fwd=1.0, lambda_left=0.5, lambda_right=0.0)
    plan = resolve_stage(
        ScoreStage(), zero, RunParams(root=str(tmp_path)), ArtefactStore(tmp_path), up
    )
    art0, _ = run_stage_locally(plan)
    z = art0.read_table().to_pydict()
    assert art0.stats["directions"] == "fwd,left"
    assert all(np.isnan(x) for x in z["gen_right"])
    assert z["gen_fwd"] == pytest.approx(d["gen_fwd"], abs=1e-5)
    want = (
        np.asarray(d["disc_logprob"]) + np.asarray(d["gen_fwd"]) + 0.5 * np.asarray(d["gen_left"])
    )
    assert np.allclose(z["S"], want, atol=1e-5)


def _tiny_discriminator(files):
    import json

    from safetensors.torch import save_file

    from ctxsim.models.contextual.discriminator import (
        CoherenceDiscriminator,
        DiscriminatorConfig,
        ScratchTokenizer,
    )

    tok = ScratchTokenizer(["<pad>", "<unk>", *WORDS])
    cfg = DiscriminatorConfig(vocab_size=len(tok), emb_dim=8, hidden=8, head_hidden=8)
    torch.manual_seed(0)
    model = CoherenceDiscriminator(cfg)
    save_file(model.state_dict(), str(files / "model.safetensors"))
    (files / "vocab.json").write_text(json.dumps(tok.itos))
    meta = {"tokenizer": "scratch", "model": cfg.to_dict(), "max_tokens": 16}
    (files / "config.json").write_text(json.dumps(meta))


def test_score_stage_computes_missing_disc_terms_with_the_discriminator(
    spine, generator_art, tmp_path
):
    import pyarrow as pa

    from ctxsim.models.contextual.discriminator import encode_texts, pad_batch
    from ctxsim.scores.loading import load_discriminator
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.score import ScoreParams, ScoreStage

    q = spine["queries"].read_table(["query_id", "text"]).to_pydict()
    co = spine["contexts"].read_table().to_pydict()
    a, b = q["query_id"][:2]
    cids = co["context_id"][:2]
    select = pa.table(
        {
            "query_id": pa.array([a, b], pa.int64()),
            "context_id": pa.array(cids, pa.int64()),
            "position": pa.array([0, 0], pa.int32()),
        }
    )
    pairs = pa.table(
        {"s1_query_id": pa.array([a], pa.int64()), "s2_query_id": pa.array([b], pa.int64())}
    )
    up = {k: spine[k] for k in ("queries", "contexts", "shard")}
    up["generator"] = generator_art[0]
    up["select"] = publish_table(tmp_path, "select", select)
    up["pairs"] = publish_table(tmp_path, "pairs", pairs)
    up["discriminator"] = publish_table(
        tmp_path, "discriminator", pa.table({"x": [1]}), files=_tiny_discriminator
    )
    run = RunParams(root=str(tmp_path))
    art, _ = run_stage_locally(
        resolve_stage(ScoreStage(), ScoreParams(), run, ArtefactStore(tmp_path), up)
    )
    t = art.read_table().to_pydict()
    assert len(t["query_id"]) == 4 and set(t["disc_source"]) == {"model"}
    model, encode, meta = load_discriminator(up["discriminator"].files_dir)
    sh = dict(
        zip(*spine["shard"].read_table(["sent_id", "text"]).to_pydict().values(), strict=True)
    )
    qtext = dict(zip(q["query_id"], q["text"], strict=True))
    for i in range(4):
        k = co["context_id"].index(t["context_id"][i])

        def side(ids):
            return np.concatenate(encode_texts(encode, [sh[x] for x in ids], 16))

        with torch.no_grad():
            logit = model(
                pad_batch([side(co["left_sent_ids"][k])]),
                pad_batch(encode_texts(encode, [qtext[t["query_id"][i]]], 16)),
                pad_batch([side(co["right_sent_ids"][k])]),
            ).item()
        assert t["disc_logprob"][i] == pytest.approx(-np.log1p(np.exp(-logit)), abs=1e-5)


def test_select_ordered_by_full_s(spine, generator_art, tmp_path):
    """select.order_by=score: each query's top candidates are taken in descending Eq. 3 S, the
    S recorded equals what the score stage computes for that (query, context), and the
    diversity rules still hold."""
    import pyarrow as pa

    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.score import ScoreParams, ScoreStage
    from ctxsim.tasks.select_contexts import SelectParams, SelectStage

    rng = np.random.default_rng(1)
    co = spine["contexts"].read_table(["context_id", "chunk_id", "centre_sent_id"]).to_pydict()
    q = spine["queries"].read_table(["query_id", "sent_id"]).to_pydict()
    rows: dict[str, list] = {
        k: [] for k in ("query_id", "context_id", "chunk_id", "disc_logit", "rank", "is_own")
    }
    for qid in q["query_id"][:5]:
        pick = rng.choice(len(co["context_id"]), size=12, replace=False)
        rows["query_id"] += [qid] * len(pick)
        rows["context_id"] += [co["context_id"][i] for i in pick]
        rows["chunk_id"] += [co["chunk_id"][i] for i in pick]
        rows["disc_logit"] += rng.normal(size=len(pick)).tolist()
        rows["rank"] += list(range(len(pick)))
        rows["is_own"] += [False] * len(pick)
    store = ArtefactStore(tmp_path)
    up = {k: spine[k] for k in ("queries", "contexts", "shard")}
    up["screen"] = publish_table(tmp_path, "screen", pa.table(rows))
    up["generator"] = generator_art[0]
    scoring = ScoreParams(lambda_disc=1.0, lambda_fwd=1.0, lambda_left=1.0, lambda_right=0.0)
    params = SelectParams(max_size=4, order_by="score", rerank_top=8, scoring=scoring)
    assert SelectStage().optional_inputs_for(params) == ("screen", "generator", "discriminator")
    assert SelectStage().optional_inputs_for(SelectParams()) == ("screen",)
    run = RunParams(root=str(tmp_path), torch_threads=1)
    art, _ = run_stage_locally(resolve_stage(SelectStage(), params, run, store, up))
    sel = art.read_table().to_pydict()
    assert art.stats["reranked"] == 5 * 8 and art.stats["order_by"] == "score"
    by_q: dict[int, list[int]] = {}
    for i, qid in enumerate(sel["query_id"]):
        by_q.setdefault(qid, []).append(i)
    assert len(by_q) == 5
    for idx in by_q.values():
        s = [sel["order_score"][i] for i in idx]
        assert all(np.isfinite(s)) and s == sorted(s, reverse=True)
        assert len({sel["chunk_id"][i] for i in idx}) == len(idx)
    # the best-scoring candidate of each query is always its first context
    up_score = {k: up[k] for k in ("queries", "contexts", "shard", "generator", "screen")}
    sel_fixed = pa.table(
        {
            "query_id": pa.array(rows["query_id"], pa.int64()),
            "context_id": pa.array(rows["context_id"], pa.int64()),
            "position": pa.array(rows["rank"], pa.int32()),
        }
    )
    pairs = pa.table(
        {
            "pair_id": pa.array(range(5), pa.int64()),
            "s1_query_id": pa.array(q["query_id"][:5], pa.int64()),
            "s2_query_id": pa.array(q["query_id"][:5], pa.int64()),
        }
    )
    up_score["select"] = publish_table(tmp_path, "select", sel_fixed)
    up_score["pairs"] = publish_table(tmp_path, "pairs", pairs)
    scored, _ = run_stage_locally(resolve_stage(ScoreStage(), scoring, run, store, up_score))
    t = scored.read_table().to_pydict()
    S = {(a, c): v for a, c, v in zip(t["query_id"], t["context_id"], t["S"], strict=True)}
    for qid, idx in by_q.items():
        top8 = [
            c
            for a, c, r in zip(*(rows[k] for k in ("query_id", "context_id", "rank")), strict=True)
            if a == qid and r < 8
        ]
        best = max(top8, key=lambda c: S[(qid, c)])
        assert sel["context_id"][idx[0]] == best
        for i in idx:
            assert sel["order_score"][i] == pytest.approx(S[(qid, sel["context_id"][i])], abs=1e-4)


def test_pmi_terms_subtract_the_score_without_the_other_side(spine, generator_art, tmp_path):
    """`pmi: [fwd, left]`: gen_<d> = the plain term - null_<d>, where null_left is log p(c<|c>)
    (the sentence left out; one value per context) and null_fwd is log p(s) (both contexts left
    out; one value per sentence), each equal to the scorer's own log-prob of that window."""

    from ctxsim.scores.loading import load_scorer
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.score import ScoreParams, ScoreStage

    qids = spine["queries"].read_table(["query_id"]).column("query_id").to_numpy()[:4]
    ctx_ids = spine["contexts"].read_table(["context_id"]).column("context_id").to_numpy()[:12]
    rng = np.random.default_rng(5)
    cs = {int(a): [int(x) for x in rng.choice(ctx_ids, 3, replace=False)] for a in qids}
    up = score_inputs(spine, generator_art, tmp_path, cs, qids)

    def score(pmi: list[str]) -> dict:
        params = ScoreParams(lambda_disc=0.0, lambda_right=0.0, pmi=pmi, cache=False)
        run = RunParams(root=str(tmp_path), torch_threads=1)
        art, _ = run_stage_locally(
            resolve_stage(ScoreStage(), params, run, ArtefactStore(tmp_path), up)
        )
        return art.read_table().to_pydict()

    plain, pmi = score([]), score(["fwd", "left"])
    assert plain["query_id"] == pmi["query_id"] and plain["context_id"] == pmi["context_id"]
    assert np.isnan(plain["null_left"]).all() and np.isnan(pmi["null_right"]).all()
    for d in ("fwd", "left"):
        want = np.asarray(plain[f"gen_{d}"]) - np.asarray(pmi[f"null_{d}"])
        assert np.allclose(pmi[f"gen_{d}"], want, atol=1e-5)
        assert np.allclose(pmi["S"], np.asarray(pmi["gen_fwd"]) + pmi["gen_left"], atol=1e-5)
    by_ctx: dict[int, set] = {}
    by_query: dict[int, set] = {}
    for q, c, nl, nf in zip(
        pmi["query_id"], pmi["context_id"], pmi["null_left"], pmi["null_fwd"], strict=True
    ):
        by_ctx.setdefault(c, set()).add(round(nl, 5))
        by_query.setdefault(q, set()).add(round(nf, 5))
    assert all(len(v) == 1 for v in by_ctx.values()) and len(by_ctx) > 3
    assert all(len(v) == 1 for v in by_query.values()) and len(by_query) == 4

    # the null values are the scorer's log-probs of the window with the other side left out
    scorer, _ = load_scorer(generator_art[0].files_dir)
    co = spine["contexts"].read_table(["context_id", "left_sent_ids", "right_sent_ids"])
    sh = spine["shard"].read_table(["sent_id", "text"]).to_pydict()
    text = dict(zip(sh["sent_id"], sh["text"], strict=True))
    sides = {
        c: (" ".join(text[i] for i in lft), " ".join(text[i] for i in rgt))
        for c, lft, rgt in zip(*co.to_pydict().values(), strict=True)
    }
    q = spine["queries"].read_table(["query_id", "text"]).to_pydict()
    qtext = dict(zip(q["query_id"], q["text"], strict=True))
    c0, q0 = pmi["context_id"][0], pmi["query_id"][0]
    lft, rgt = sides[c0]
    assert scorer.log_prob("left", [(None, "", rgt)], [lft])[0] == pytest.approx(
        pmi["null_left"][0], abs=1e-4
    )
    assert scorer.log_prob("fwd", [("", None, "")], [qtext[q0]])[0] == pytest.approx(
        pmi["null_fwd"][0], abs=1e-4
    )


def test_a_registered_disc_scorer_gives_the_disc_term(spine, generator_art, tmp_path):
    """A scorer is one class: registered, it can stand in for the discriminator's term; the
    generative terms stay as they were and S moves by lambda_disc times its values."""
    from ctxsim.scores import ScoreParams, score_with_artefacts
    from ctxsim.scores.scorers import SCORERS, ContextScorer, Scored, get_scorer, register_scorer
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams

    class Half(ContextScorer):
        name = "test-half"
        role = "disc"
        columns = ("disc_logprob", "disc_source")

        def inputs(self, params):
            return ()

        def score(self, ctx, params, windows):
            n = len(windows)
            return Scored(
                {
                    "disc_logprob": np.full(n, -0.5, np.float32),
                    "disc_source": np.full(n, "test", dtype=object),
                }
            )

    register_scorer(Half)
    try:
        with pytest.raises(ValueError, match="unknown scorer 'test-half': one of generator"):
            get_scorer("test-half", "gen")
        cid = spine["contexts"].read_table(["context_id"]).column(0).to_numpy()[:6]
        q = spine["queries"].read_table(["query_id", "text"]).to_pydict()
        qid = np.full(len(cid), q["query_id"][0], np.int64)
        sents = np.asarray([q["text"][0]] * len(cid), dtype=object)
        up = {k: spine[k] for k in ("contexts", "shard")} | {"generator": generator_art[0]}
        store, run = ArtefactStore(tmp_path), RunParams(root=str(tmp_path), torch_threads=1)
        p = ScoreParams(lambda_disc=2.0)
        base, _ = score_with_artefacts(store, run, p, up, qid, cid, sents)
        mine, stats = score_with_artefacts(store, run, p, up, qid, cid, sents, disc="test-half")
    finally:
        del SCORERS["test-half"]
    b, m = base.to_pydict(), mine.to_pydict()
    assert set(b["disc_source"]) == {"missing"} and b["disc_logprob"] == [0.0] * 6
    assert set(m["disc_source"]) == {"test"} and m["disc_logprob"] == [-0.5] * 6
    for col in ("gen_fwd", "gen_left", "gen_right"):
        assert m[col] == b[col]
    assert np.allclose(np.asarray(m["S"]), np.asarray(b["S"]) - 1.0, atol=1e-5)
    assert stats["cache_hits"] > 0  # the second call read the first one's generative terms
