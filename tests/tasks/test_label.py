"""Eq. 4 labels: hand-computed vectors, ablation views, splits, each score computed once."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctxsim.models.contextual.origin import (
    ContextSets,
    ScoreLookup,
    origin_labels,
    origin_labels_naive,
    pair_split,
    recover_lambdas,
    required_scores,
    rescale_labels,
    spearman_conventions,
)


def _cos(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_eq4_on_hand_computed_vectors() -> None:
    # Cs1 = [10, 11], Cs2 = [12, 10] -> C = [10, 11, 12, 10] (concatenation keeps the repeat)
    cs = ContextSets.from_rows([1, 1, 2, 2], [10, 11, 12, 10], [0, 1, 0, 1])
    S = {(1, 10): -1.0, (1, 11): -2.0, (1, 12): -3.0, (2, 10): -1.5, (2, 11): -0.5, (2, 12): -2.5}
    q, c = required_scores(cs, [1], [2])
    assert sorted(zip(q.tolist(), c.tolist(), strict=True)) == sorted(S)
    lookup = ScoreLookup(q, c, [S[(a, b)] for a, b in zip(q.tolist(), c.tolist(), strict=True)])
    got = origin_labels(cs, np.array([1]), np.array([2]), lookup)[0, 0]
    v1 = [-1.0, -2.0, -3.0, -1.0]
    v2 = [-1.5, -0.5, -2.5, -1.5]
    assert got == pytest.approx(_cos(v1, v2), abs=1e-12)
    # symmetric in (s1, s2) up to the order of C, which cosine ignores
    assert origin_labels(cs, np.array([2]), np.array([1]), lookup)[0, 0] == pytest.approx(got)
    # centring = Pearson correlation of the two vectors
    cen = origin_labels(cs, np.array([1]), np.array([2]), lookup, similarity="pearson")[0, 0]
    assert cen == pytest.approx(np.corrcoef(v1, v2)[0, 1])
    rmse = origin_labels(cs, np.array([1]), np.array([2]), lookup, similarity="neg_rmse")[0, 0]
    assert rmse == pytest.approx(-np.sqrt(np.mean((np.array(v1) - np.array(v2)) ** 2)))
    # cross_fit: s2 on Cs1 = [10, 11] relative to s1, plus s1 on Cs2 = [12, 10] relative to s2
    cross = origin_labels(cs, np.array([1]), np.array([2]), lookup, similarity="cross_fit")[0, 0]
    want = np.mean([-1.5 - -1.0, -0.5 - -2.0]) + np.mean([-3.0 - -2.5, -1.0 - -1.5])
    assert cross == pytest.approx(want)
    # ... and symmetric in (s1, s2)
    back = origin_labels(cs, np.array([2]), np.array([1]), lookup, similarity="cross_fit")[0, 0]
    assert back == pytest.approx(want)
    with pytest.raises(ValueError, match="similarity"):
        origin_labels(cs, np.array([1]), np.array([2]), lookup, similarity="dot")


def test_vectorised_equals_naive_loop_and_missing_score_is_an_error() -> None:
    rng = np.random.default_rng(0)
    rows = [
        (q, int(c), p)
        for q in range(40)
        for p, c in enumerate(rng.choice(300, size=rng.integers(1, 9), replace=False))
    ]
    q, c, p = map(np.array, zip(*rows, strict=True))
    cs = ContextSets.from_rows(q, c, p)
    pairs = rng.integers(0, 40, size=(500, 2))
    rq, rc = required_scores(cs, pairs[:, 0], pairs[:, 1])
    vals = -rng.random(len(rq)) * 4
    lookup = ScoreLookup(rq, rc, vals)
    fast = origin_labels(cs, pairs[:, 0], pairs[:, 1], lookup, block_pairs=33)[:, 0]
    lists = {k: [int(x) for x in c[q == k][np.argsort(p[q == k])]] for k in range(40)}
    score = {(int(a), int(b)): float(v) for a, b, v in zip(rq, rc, vals, strict=True)}
    naive = origin_labels_naive(lists, [tuple(map(int, x)) for x in pairs], score)
    assert np.allclose(fast, naive, atol=1e-12)
    drop = ScoreLookup(rq[1:], rc[1:], vals[1:])
    with pytest.raises(KeyError, match="no score"):
        origin_labels(cs, pairs[:, 0], pairs[:, 1], drop)


def test_each_score_is_computed_once_and_reused(tmp_path) -> None:
    """A counting fake scoring engine goes through the code that computes S for the label
    stage: the (s, c) rows `required_scores` asks for (each once), scored by the score stage's
    `_generate_rows` with its score cache. Each window is scored exactly once, labelling reads
    every score from the lookup, and a second run of the same rows calls the engine no more."""
    from ctxsim.scores.eq3 import _generate_rows
    from ctxsim.store.score_cache import ScoreCache

    rng = np.random.default_rng(1)
    rows = [(qq, int(cc), pp) for qq in range(30) for pp, cc in enumerate(rng.choice(50, 6, False))]
    q, c, p = map(np.array, zip(*rows, strict=True))
    cs = ContextSets.from_rows(q, c, p)
    pairs = np.array([(a, b) for a in range(30) for b in range(a + 1, 30)])[:200]
    sentence = {i: f"sentence number {i}" for i in range(30)}
    left = {i: f"the context before {i}" for i in range(50)}

    class CountingEngine:
        def __init__(self) -> None:
            self.calls: Counter = Counter()

        def score(self, lefts, sents, rights, directions):
            for key in zip(lefts, sents, rights, strict=True):
                self.calls[key] += 1
            n = np.array([len(a) + 3 * len(b) for a, b in zip(lefts, sents, strict=True)])
            return {d: (-np.sin(n * 0.37) - 2.0).astype(np.float32) for d in directions}

    def scored(engine: CountingEngine, cache: ScoreCache) -> tuple[ScoreLookup, int]:
        rq, rc = required_scores(cs, pairs[:, 0], pairs[:, 1])
        lefts = np.array([left[int(x)] for x in rc], dtype=object)
        sents = np.array([sentence[int(x)] for x in rq], dtype=object)
        rights = np.array([""] * len(rq), dtype=object)
        got, hits = _generate_rows(engine, cache, lefts, sents, rights, ["left"])
        return ScoreLookup(rq, rc, got["left"]), hits

    engine = CountingEngine()
    cache = ScoreCache(tmp_path, "fake")
    lookup, hits = scored(engine, cache)
    assert hits == 0 and set(engine.calls.values()) == {1}  # no (s, c) scored twice
    per_pair = 2 * 12 * len(pairs)  # each pair: 2 sentences x |C| = 6 + 6 contexts
    assert len(engine.calls) < per_pair  # reuse across pairs: far fewer than per-pair scoring
    labels = origin_labels(cs, pairs[:, 0], pairs[:, 1], lookup)
    assert lookup.n_lookups == 2 * 12 * len(pairs)  # every lookup reads a stored score
    assert np.isfinite(labels).all()
    # the same rows again (a relabel): everything from the cache, the engine is not called
    before = sum(engine.calls.values())
    again, hits = scored(engine, cache)
    assert sum(engine.calls.values()) == before and hits == len(engine.calls)
    np.testing.assert_array_equal(origin_labels(cs, pairs[:, 0], pairs[:, 1], again), labels)
    rq, rc = required_scores(cs, pairs[:, 0], pairs[:, 1])
    with pytest.raises(ValueError, match="duplicate"):
        ScoreLookup(np.r_[rq, rq[:1]], np.r_[rc, rc[:1]], np.zeros(len(rq) + 1))


def test_per_term_labels_and_lambda_recovery() -> None:
    rng = np.random.default_rng(2)
    cs = ContextSets.from_rows([0, 0, 0, 1, 1], [5, 6, 7, 8, 9], [0, 1, 2, 0, 1])
    rq, rc = required_scores(cs, [0], [1])
    terms = -rng.random((len(rq), 4)) * 3
    lam = np.array([0.5, 1.0, 0.0, 2.0])
    S = terms @ lam
    lookup = ScoreLookup(rq, rc, np.column_stack([S, terms]))
    out = origin_labels(cs, np.array([0]), np.array([1]), lookup)[0]
    for k in range(4):
        only = ScoreLookup(rq, rc, terms[:, k])
        assert out[1 + k] == pytest.approx(
            origin_labels(cs, np.array([0]), np.array([1]), only)[0, 0]
        )
    assert np.allclose(recover_lambdas(S, terms), lam, atol=1e-8)
    assert recover_lambdas(S + rng.random(len(S)), terms) is None  # not a linear combination


def test_split_ratios_deterministic_and_symmetric() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 10**6, 200_000)
    b = rng.integers(0, 10**6, 200_000)
    s = pair_split(a, b, seed=0, ratios=[98, 1, 1])
    frac = np.bincount(s, minlength=3) / len(s)
    assert abs(frac[0] - 0.98) < 0.002 and abs(frac[1] - 0.01) < 0.001
    assert (pair_split(b, a, 0, [98, 1, 1]) == s).all()
    assert (pair_split(a, b, 0, [98, 1, 1]) == s).all()
    assert (pair_split(a, b, 1, [98, 1, 1]) != s).any()
    assert (pair_split(a, b, 0, [0, 0, 1]) == 2).all()


def test_spearman_conventions() -> None:
    gold = np.array([1, 2, 3, 4, 1, 2, 3, 4], float)
    sub = np.array(["a"] * 4 + ["b"] * 4)
    pred = np.array([1, 2, 3, 4, 14, 13, 12, 11], float)
    assert spearman_conventions(pred, gold, sub)[1] == pytest.approx(0.0)  # +100 and -100
    pred = np.array([1, 2, 3, 4, 5, 6, 7, 8], float)  # right within each subset, offset across
    s_all, s_mean = spearman_conventions(pred, gold, sub)
    assert s_mean == pytest.approx(100.0) and s_all < 90


# ---- the stage -----------------------------------------------------------------------------
def _publish(store, name: str, table: pa.Table, stats: dict | None = None, files=None):
    fp = uuid.uuid4().hex[:16]
    store.write_shard(name, fp, 0, table, {}, 0.0)
    for fname, t in (files or {}).items():
        pq.write_table(t, store.open_partial(name, fp) / "files" / fname)
    return store.publish(name, fp, 1, {"stats": stats or {}, "timings": {"total_seconds": 2.0}})


def _fake_world(
    tmp_path,
    given: bool,
    drop_one: bool = False,
    no_cs: tuple[int, ...] = (),
    mined_across_topics: bool = False,
):
    """8 sentences in two topics; a sentence 'fits' contexts of its own topic better."""
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.tasks.label.contextual.lm import required_score_table

    store = ArtefactStore(tmp_path)
    n = 8
    topic = np.arange(n) % 2
    texts = [f"{'cats purr' if t == 0 else 'stocks fell'} number {i}" for i, t in enumerate(topic)]
    queries = pa.table(
        {
            "query_id": np.arange(n),
            "text": texts,
            "sent_id": pa.nulls(n, pa.int64()),
            "origin": ["x"] * n,
            "shard": np.zeros(n, np.int32),
        }
    )
    sel_rows = [
        (q, 100 * topic[q] + k + q % 3, k) for q in range(n) for k in range(4) if q not in no_cs
    ]
    sel = pa.table(
        {
            name: pa.array([r[i] for r in sel_rows], pa.int64())
            for i, name in enumerate(["query_id", "context_id", "position"])
        }
    )
    pa_pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    gold = [4.0 if topic[a] == topic[b] else 0.5 for a, b in pa_pairs]
    gold = [g + 0.1 * (i % 3) for i, g in enumerate(gold)]
    pairs = pa.table(
        {
            "pair_id": np.arange(len(pa_pairs)),
            "s1_query_id": [a for a, _ in pa_pairs],
            "s2_query_id": [b for _, b in pa_pairs],
            "source": (
                ["random" if topic[a] == topic[b] else "knn" for a, b in pa_pairs]
                if mined_across_topics  # "mined" pairs that are the dissimilar ones
                else ["given" if given else "random"] * len(pa_pairs)
            ),
            "dataset": ["STS12"] * 14 + ["STSb"] * 14 if given else [None] * 28,
            "subset": ["MSRpar"] * 7 + ["OnWN"] * 7 + ["dev"] * 14 if given else [None] * 28,
            "gold": gold if given else [None] * 28,
        }
    )
    need = required_score_table(sel, pairs)
    qq = need.column("query_id").to_numpy()
    cc = need.column("context_id").to_numpy()
    fit = np.where(topic[qq] == cc // 100, -1.0, -4.0)
    rng = np.random.default_rng(0)
    terms = np.stack([fit + rng.normal(0, 0.3, len(qq)) for _ in range(4)], 1)
    lam = np.array([0.2, 1.0, 0.5, 0.5])
    score = pa.table(
        {
            "query_id": qq,
            "context_id": cc,
            "disc_logprob": terms[:, 0],
            "gen_fwd": terms[:, 1],
            "gen_left": terms[:, 2],
            "gen_right": terms[:, 3],
            "S": terms @ lam,
        }
    )
    if drop_one:
        score = score.slice(1)
    arts = {
        "queries": _publish(store, "queries", queries, {"n_shards": 1}),
        "select": _publish(store, "select", sel, {"queries_empty": len(no_cs)}),
        "pairs": _publish(store, "pairs", pairs),
        "score": _publish(store, "score", score),
    }
    return store, arts, lam


def _run_label(store, arts, **params):
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.label import LabelStage

    stage = LabelStage()
    plan = resolve_stage(stage, stage.Params(**params), RunParams(), store, arts)
    return run_stage_locally(plan)[0]


def test_label_stage_given_pairs_reports_spearman(tmp_path) -> None:
    store, arts, lam = _fake_world(tmp_path, given=True)
    art = _run_label(store, arts)
    t = art.read_table()
    assert t.num_rows == 28 and set(t.column("split").to_pylist()) == {"eval"}
    st = art.stats
    for name in ("STS12", "STSb.dev"):
        assert st[f"spearman_all.{name}"] > 50  # same-topic pairs get higher labels
        assert f"spearman_mean.{name}" in st and st[f"n_pairs.{name}"] == 14
        for view in ("disc", "fwd", "left", "right", "wo_disc", "wo_right", "tfidf_cosine"):
            assert f"spearman_all.{name}.{view}" in st
    report = json.loads((art.files_dir / "origin.json").read_text())
    assert report["datasets"]["STSb.dev"]["n_pairs"] == 14
    assert np.allclose([report["lambdas"][k] for k in ("disc", "fwd", "left", "right")], lam)
    assert (art.files_dir / "label_hist.png").stat().st_size > 1000
    assert t.column("s1").to_pylist()[0].startswith("cats purr")
    assert (t.column("n_ctx1").to_numpy() == 4).all()
    # S under every other vector similarity is reported; choosing one makes it the label
    views = report["datasets"]["STSb.dev"]["views"]
    assert {"sim_pearson", "sim_neg_rmse", "sim_cross_fit"} <= set(
        views
    ) and "sim_cosine" not in views
    for how in ("neg_rmse", "cross_fit"):
        other = _run_label(store, arts, lm={"similarity": how})
        rep = json.loads((other.files_dir / "origin.json").read_text())["datasets"]["STSb.dev"]
        assert rep["spearman_all"] == views[f"sim_{how}"]["spearman_all"]
        assert rep["views"]["sim_cosine"]["spearman_all"] == st["spearman_all.STSb.dev"]
        assert other.fingerprint != art.fingerprint


def test_label_stage_mined_pairs_and_missing_scores(tmp_path) -> None:
    store, arts, _ = _fake_world(tmp_path, given=False)
    art = _run_label(store, arts, split_ratios=[0.5, 0.25, 0.25])
    t = art.read_table()
    st = art.stats
    assert st["pairs"] == 28 and st["pairs_nan"] == 0
    assert st["split_train"] + st["split_dev"] + st["split_test"] == 28
    assert sum(st["label_hist_counts"]) == 28 and st["mean_cs"] == 4
    assert st["score_seconds_per_pair"] == pytest.approx(2.0 / 28)
    assert not any(k.startswith("spearman") for k in st)
    lab = t.column("label").to_numpy()
    assert np.all((lab > -1.0001) & (lab < 1.0001))
    store2, arts2, _ = _fake_world(tmp_path / "b", given=False, drop_one=True)
    with pytest.raises(KeyError, match="no score"):
        _run_label(store2, arts2)


def test_label_stage_fails_on_non_finite_labels(tmp_path) -> None:
    """Pairs whose sentences have no context set get NaN labels: all of them NaN, or more than
    label.max_nonfinite_fraction, fails the stage (it published 600 NaN labels, "completed")."""
    from ctxsim.store.errors import InputError

    store, arts, _ = _fake_world(tmp_path, given=False, no_cs=tuple(range(8)))
    with pytest.raises(
        InputError, match=r"^label: 28 of 28 labels are not finite.*select left 8 queries without"
    ):
        _run_label(store, arts, max_nonfinite_fraction=1.0)  # all of them: always an error
    assert store.latest("label") is None
    # sentences 0 and 1 without contexts: their pair (1 of 28, 3.6%) has none at all
    store, arts, _ = _fake_world(tmp_path / "b", given=False, no_cs=(0, 1))
    with pytest.raises(InputError, match=r"1 of 28 labels .*max_nonfinite_fraction=0.01"):
        _run_label(store, arts)
    art = _run_label(store, arts, max_nonfinite_fraction=0.05)
    assert art.stats["pairs_nan"] == 1
    # the threshold is a check, not an input of the labels: the same fingerprint
    assert _run_label(store, arts, max_nonfinite_fraction=0.5).fingerprint == art.fingerprint


def test_rescale_labels_keeps_order_and_spans_unit_range():
    v = np.array([0.995, 0.93, 0.999, 0.995, 0.96])
    r = rescale_labels(v, "rank")
    assert r.min() == 0.0 and r.max() == 1.0
    assert r[0] == r[3]  # ties share their average rank
    assert list(np.argsort(r[[1, 4, 0, 2]])) == [0, 1, 2, 3]
    m = rescale_labels(v, "minmax")
    assert np.allclose(m, (v - 0.93) / (0.999 - 0.93))
    assert np.array_equal(rescale_labels(v, "none"), v)
    assert np.array_equal(rescale_labels(np.array([0.5, 0.5]), "minmax"), np.zeros(2))
    with pytest.raises(ValueError, match="label scaling"):
        rescale_labels(v, "log")


def test_origin_report_has_the_generator_backbone_cosine(tmp_path) -> None:
    """With the generator upstream, the report adds the backbone's mean-pooled cosine."""
    from ctxsim.models.contextual.generator import (
        DEFAULT_TEMPLATES,
        CausalPrefixScorer,
        TinyConfig,
        tiny_causal,
        train_wordpiece_tokenizer,
    )
    from ctxsim.scores.loading import load_scorer, save_scorer

    store, arts, _ = _fake_world(tmp_path, given=True)
    texts = arts["queries"].read_table().column("text").to_pylist()
    tok = train_wordpiece_tokenizer([], vocab=" ".join(texts).split())
    cfg = TinyConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    scorer = CausalPrefixScorer(tiny_causal(tok, cfg, seed=0), tok)
    fp = uuid.uuid4().hex[:16]
    store.write_shard("generator", fp, 0, pa.table({"x": [0]}), {}, 0.0)
    files = store.open_partial("generator", fp) / "files"
    meta = {
        "backend": "causal",
        "weights": "artefact",
        "shared": True,
        "templates": dict(DEFAULT_TEMPLATES),
        "limits": {"max_context_tokens": 96, "max_sentence_tokens": 64},
    }
    save_scorer(scorer, files, meta, weights=True)
    arts["generator"] = store.publish("generator", fp, 1, {"stats": {}})
    art = _run_label(store, arts)
    assert "spearman_all.STSb.dev.backbone_cosine" in art.stats
    report = json.loads((art.files_dir / "origin.json").read_text())
    assert "backbone_cosine" in report["datasets"]["STS12"]["views"]
    # the view is the cosine of the reloaded model's mean-pooled embeddings
    from ctxsim.models.contextual.origin import spearman_x100

    t = art.read_table().to_pandas()
    t = t[t["dataset"] == "STSb"]
    loaded, _ = load_scorer(arts["generator"].files_dir)
    e1, e2 = loaded.embed(list(t["s1"])), loaded.embed(list(t["s2"]))
    cos = (e1 * e2).sum(1) / np.linalg.norm(e1, axis=1) / np.linalg.norm(e2, axis=1)
    want = round(spearman_x100(cos, t["gold"].to_numpy()), 2)
    assert report["datasets"]["STSb.dev"]["views"]["backbone_cosine"]["spearman_all"] == want


def test_without_the_only_term_is_no_view():
    """S = λ·left alone (λ recovered with float32 rounding): S without left is NaN, not a
    rescaled copy of left that would report left's Spearman under another name."""
    from ctxsim.scores.views import ablation_views

    rng = np.random.default_rng(0)
    left = rng.normal(-3, 1, 50).astype(np.float32)
    fwd = rng.normal(-4, 1, 50).astype(np.float32)
    nan = np.full(50, np.nan, np.float32)
    table = pa.table(
        {
            "S": left,
            "disc_logprob": np.zeros(50, np.float32),
            "gen_fwd": nan,
            "gen_left": left,
            "gen_right": nan,
        }
    )
    names, values, lam = ablation_views(table, True)
    assert lam is not None and lam[2] == pytest.approx(1.0)
    assert np.isnan(values[:, names.index("wo_left")]).all()
    assert np.isnan(values[:, names.index("wo_both_contexts")]).all()
    both = pa.table(
        {
            "S": left + 0.5 * fwd,
            "disc_logprob": np.zeros(50, np.float32),
            "gen_fwd": fwd,
            "gen_left": left,
            "gen_right": nan,
        }
    )
    names, values, _ = ablation_views(both, True)
    assert np.allclose(values[:, names.index("wo_left")], 0.5 * fwd, atol=1e-5)
