"""`ctxsim explain` on an encoder-route run (product/explain_encoder.py, flows/explain.py): the
closed-form label as an exact sum of per-context terms, its top terms up and down (exact and by
faiss candidates), and the command on a tiny encoder-route run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxsim.models.contextual.encoder_origin import (
    ScatterStats,
    closed_form_similarity,
    explicit_profile_similarity,
    unit_rows,
)
from ctxsim.product.explain_encoder import (
    EmbeddingRows,
    eigen_directions,
    exact_terms,
    faiss_top_terms,
    find_top,
    ivf_index,
    term_weights,
    top_terms,
)


def _clustered(n: int, d: int, seed: int = 0, centres: int = 16) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = unit_rows(rng.standard_normal((centres, d)))
    x = c[rng.integers(0, centres, n)] + 0.6 * rng.standard_normal((n, d)) / np.sqrt(d)
    return unit_rows(x).astype(np.float32)


class _Rows(EmbeddingRows):
    def __init__(self, emb: np.ndarray) -> None:
        self.parts, self.n, self.dim = [emb], len(emb), emb.shape[1]
        self.starts = np.array([0, len(emb)], np.int64)


@pytest.mark.parametrize("centred", [True, False])
def test_terms_sum_to_the_closed_form_label(centred):
    emb = _clustered(3000, 24)
    rng = np.random.default_rng(1)
    scatter = ScatterStats.of(emb)
    for _ in range(5):
        e1, e2 = rng.standard_normal(24), rng.standard_normal(24)
        a, b, cbar, label = term_weights(e1, e2, scatter, centred)
        want = closed_form_similarity(e1[None], e2[None], scatter.matrix(centred))[0]
        t = exact_terms(emb, a, b, cbar, block=700)
        assert label == pytest.approx(want, abs=1e-9)
        assert t.sum() == pytest.approx(want, abs=1e-5)
        explicit = explicit_profile_similarity(e1[None], e2[None], emb, centred)[0]
        assert t.sum() == pytest.approx(explicit, abs=1e-5)


def test_top_terms_are_the_brute_force_ones():
    emb = _clustered(2000, 16, seed=3)
    a, b, cbar, _ = term_weights(emb[5], emb[900], ScatterStats.of(emb))
    t = exact_terms(emb, a, b, cbar)
    up, down = top_terms(t, 7)
    brute = [(a @ (c - cbar)) * (b @ (c - cbar)) for c in unit_rows(emb)]
    order = sorted(range(len(brute)), key=lambda i: (-brute[i], i))
    assert up.tolist() == order[:7]
    assert down.tolist() == sorted(range(len(brute)), key=lambda i: (brute[i], i))[:7]
    assert (t[up] > 0).all() and (t[down] < 0).all()
    few_up, _ = top_terms(np.array([-1.0, 2.0, -3.0]), 5)
    assert few_up.tolist() == [1]  # only terms of the sign


def test_rank_two_form_is_its_eigen_decomposition():
    rng = np.random.default_rng(2)
    a, b, x = rng.standard_normal((3, 12))
    lp, up, lm, um = eigen_directions(a, b)
    assert lp >= 0 >= lm
    assert (a @ x) * (b @ x) == pytest.approx(lp * (up @ x) ** 2 + lm * (um @ x) ** 2)


@pytest.mark.parametrize("index", ["flat", "ivf"])
def test_faiss_candidates_recall_the_exact_top_terms(index):
    """Recall of the faiss path on clustered synthetic unit vectors (20k, d 32, 20 pairs, top
    10 up and down): exact search (flat) finds every exact top term; IVF (141 lists, nprobe 32)
    at least 95% (measured 1.0 and 0.99+; bench/results/explain_topk.md at d 384)."""
    import faiss

    emb = _clustered(20_000, 32, seed=4, centres=64)
    rows = _Rows(emb)
    if index == "flat":
        ix = faiss.IndexFlatIP(32)
        ix.add(emb)
    else:
        ix = ivf_index(rows)
    scatter = ScatterStats.of(emb)
    rng = np.random.default_rng(5)
    hits = total = 0
    for i, j in rng.integers(0, len(emb), (20, 2)):
        a, b, cbar, _ = term_weights(emb[i], emb[j], scatter)
        up, down = top_terms(exact_terms(emb, a, b, cbar), 10)
        fu, fd, stats = faiss_top_terms(ix.search, rows.take, rows.n, a, b, cbar, 10)
        hits += len(np.intersect1d(fu, up)) + len(np.intersect1d(fd, down))
        total += len(up) + len(down)
    assert stats["path"] == "faiss"
    recall = hits / total
    assert recall == 1.0 if index == "flat" else recall >= 0.95


def test_find_top_takes_faiss_beyond_exact_max():
    import faiss

    emb = _clustered(4000, 16, seed=6)
    rows = _Rows(emb)
    a, b, cbar, _ = term_weights(emb[1], emb[2], ScatterStats.of(emb))

    def flat():
        ix = faiss.IndexFlatIP(16)
        ix.add(emb)
        return ix

    up, down, how = find_top(rows, a, b, cbar, 5)
    fu, fd, fhow = find_top(rows, a, b, cbar, 5, exact_max=1000, index=flat)
    assert how["path"] == "exact" and fhow["path"] == "faiss"
    assert how["sum_of_terms"] == pytest.approx(
        closed_form_similarity(emb[1:2], emb[2:3], ScatterStats.of(emb).matrix())[0], abs=1e-5
    )
    assert fu.tolist() == up.tolist() and fd.tolist() == down.tolist()


# --- on a tiny encoder-route run --------------------------------------------------------------


@pytest.fixture(scope="module")
def enc_run(tmp_path_factory):
    """A tiny encoder-route run through `label` (shard, contexts, queries, embed, pairs, label;
    run id ``enc``) on the sample corpus, the embed and pairs encoder a tiny random one."""
    from ctxsim.flows.config import load_config
    from ctxsim.flows.pipeline import execute
    from ctxsim.store.artefacts import ArtefactStore
    from tests.conftest import SAMPLE
    from tests.tasks.tiny_encoder import build_tiny_encoder

    root = tmp_path_factory.mktemp("enc-run")
    lines = [json.loads(x) for x in SAMPLE.read_text().splitlines() if x.strip()]
    texts = [p for r in lines for p in r["paragraphs"]][:120]
    enc = build_tiny_encoder(texts, root / "tiny-st")
    cfg = root / "enc.yaml"
    cfg.write_text(
        f"run: {{root: {root / 'artefacts'}, seed: 0, device: cpu, quiet: true}}\n"
        f"shard: {{paths: ['{SAMPLE}'], n_shards: 1}}\n"
        "contexts: {width: 1, chunk: paragraph}\n"
        "queries: {source: corpus, n_corpus: 30, n_shards: 1}\n"
        f"embed: {{model: '{enc}', max_seq_length: 32, n_shards: 2}}\n"
        f"pairs: {{pairs_per_query: 2, ratio_knn: 1, ratio_shared: 0, ratio_random: 1, "
        f"encoder: '{enc}'}}\n"
        "label: {contextual: encoder, split_ratios: [60, 20, 20]}\n"
    )
    record = execute(load_config(cfg), until="label", run_id="enc", use_prefect=False)
    return ArtefactStore(root / "artefacts"), record, cfg


def test_explain_a_labelled_pair_of_an_encoder_run(enc_run):
    """The run's own label, decomposed: the terms of the whole corpus sum to it, and the top
    units are the largest terms, with their text."""
    from ctxsim.flows.explain import explain_pair

    store, record, _ = enc_run
    label = store.require("label", record["stages"]["label"]["fingerprint"]).read_table()
    row = label.to_pylist()[0]
    res = explain_pair(store, "enc", row["s1"], row["s2"], top=3)
    assert res["route"] == "encoder" and res["form"] == "closed"
    assert res["label"] == pytest.approx(row["label"], abs=1e-5)
    assert res["label_in_run"] == pytest.approx(row["label"])
    assert res["search"]["sum_of_terms"] == pytest.approx(row["label"], abs=1e-5)
    up, down = res["top_up"], res["top_down"]
    assert len(up) == 3 and len(down) == 3
    assert [r["term"] for r in up] == sorted((r["term"] for r in up), reverse=True)
    assert up[0]["term"] > 0 > down[0]["term"] and all(r["text"] for r in up + down)
    assert up[0]["share_of_label"] == pytest.approx(up[0]["term"] / res["label"])
    assert sum(r["share_of_abs"] for r in up + down) <= 1 + 1e-9


def test_ctxsim_explain_prints_an_encoder_runs_top_contexts(enc_run):
    """`ctxsim explain` on a pair the run never saw prints the units pushing the label up and
    down; --json has the same; an unknown run and a softmax run give one line."""
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    store, record, cfg = enc_run
    a, b = "The bread rose slowly overnight.", "We walked along the cold beach."
    out = CliRunner().invoke(
        app, ["explain", a, b, "--run", "enc", "--root", str(store.root), "--top", "2"]
    )
    assert out.exit_code == 0, out.output
    assert "route=encoder (closed, centred)" in out.output
    assert "contexts pushing the label up:" in out.output
    assert "contexts pulling the label down:" in out.output
    js = CliRunner().invoke(
        app, ["explain", a, b, "--run", "enc", "--root", str(store.root), "--json"]
    )
    res = json.loads(js.output)
    assert res["label_in_run"] is None and len(res["top_up"]) == 5
    assert res["top_up"][0]["text"] in out.output.replace("\n", " ") or "…" in out.output
    bad = CliRunner().invoke(app, ["explain", a, b, "--run", "nope", "--root", str(store.root)])
    assert bad.exit_code != 0 and len(bad.output.strip().splitlines()) == 1
    rec = json.loads((store.root / "runs" / "enc.json").read_text())
    rec["run_id"] = "enc-soft"
    rec["config"]["label"]["encoder"] = {"form": "softmax", "tau": 0.1}
    rec["stages"].pop("label")
    (store.root / "runs" / "enc-soft.json").write_text(json.dumps(rec))
    soft = CliRunner().invoke(
        app, ["explain", a, b, "--run", "enc-soft", "--root", str(store.root)]
    )
    lines = soft.output.strip().splitlines()
    assert soft.exit_code != 0 and len(lines) == 1
    assert "label.encoder.form=softmax" in lines[0] and "closed form" in lines[0]


def test_explain_beyond_exact_max_finds_the_same_units_by_faiss(enc_run, monkeypatch):
    """Past EXACT_MAX units explain searches a faiss IVF index, built once and cached per embed
    artefact (memory-mapped on the next call): the same top units as the exact pass."""
    from ctxsim.flows.explain import explain_pair
    from ctxsim.product import explain_encoder

    store, record, _ = enc_run
    a, b = "Knead the dough on a floured board.", "The children ran home in the rain."
    exact = explain_pair(store, "enc", a, b, top=4)
    monkeypatch.setattr(explain_encoder, "EXACT_MAX", 10)
    fingerprint = record["stages"]["embed"]["fingerprint"]
    cached = store.root / "_cache" / "explain-faiss" / fingerprint / "ivf.index"
    assert not cached.exists()
    for _ in range(2):  # built, then read back
        res = explain_pair(store, "enc", a, b, top=4)
        assert res["search"]["path"] == "faiss" and cached.exists()
        for key in ("top_up", "top_down"):
            assert [r["context_id"] for r in res[key]] == [r["context_id"] for r in exact[key]]
        assert res["label"] == pytest.approx(exact["label"])
        assert res["abs_total"] is None and res["top_up"][0]["share_of_abs"] is None
        json.dumps(res, allow_nan=False)  # --json: no NaN where sum |t_c| is not computed


def test_explain_problem_says_which_runs_explain_handles():
    """What the run summary asks before it suggests explain: an LM run needs Cs, an encoder run
    the embed artefact and the closed form."""
    from ctxsim.flows.explain import explain_problem

    lm = {s: {} for s in ("shard", "contexts", "queries", "generator", "select", "label")}
    enc = {s: {} for s in ("shard", "contexts", "queries", "embed", "pairs", "label")}

    def rec(stages, label):
        return {"run_id": "r", "stages": stages, "config": {"label": label}}

    assert explain_problem(rec(lm, {})) is None
    assert explain_problem(rec(enc, {"contextual": "encoder"})) is None
    closed = {"contextual": "encoder", "encoder": {"form": "closed", "centred": False}}
    assert explain_problem(rec(enc, closed)) is None
    assert "no 'select' stage" in explain_problem(rec(enc, {}))
    soft = explain_problem(rec(enc, {"contextual": "encoder", "encoder": {"form": "topk"}}))
    assert "label.encoder.form=topk" in soft and "\n" not in soft
    flat = explain_problem(rec(enc, {"contextual": "encoder", "encoder_form": "softmax"}))
    assert "label.encoder.form=softmax" in flat
    no_embed = {k: v for k, v in enc.items() if k != "embed"}
    assert "no 'embed' stage" in explain_problem(rec(no_embed, {"contextual": "encoder"}))


def test_the_run_summary_suggests_an_explain_that_works_on_an_encoder_run(enc_run):
    """An encoder-route run (closed form) ends with a ready `ctxsim explain` line, and that
    command prints the run's top contexts; a softmax run is not offered one."""
    import shlex

    from typer.testing import CliRunner

    from ctxsim.flows.cli import app
    from ctxsim.flows.run_summary import summary_lines

    store, record, cfg = enc_run
    lines = summary_lines(record, config=cfg, root=str(store.root))
    cmd = [x for x in lines if x.strip().startswith("ctxsim explain")]
    assert len(cmd) == 1, lines
    argv = shlex.split(cmd[0].split("    #")[0])[1:]
    out = CliRunner().invoke(app, argv)
    assert out.exit_code == 0, out.output
    assert "contexts pushing the label up:" in out.output and "(run's label" in out.output
    soft = json.loads(json.dumps(record))
    soft["config"]["label"]["encoder"] = {"form": "softmax"}
    assert not any("ctxsim explain" in x for x in summary_lines(soft, config=cfg))


def test_the_suggested_explain_of_a_sentence_that_starts_with_a_dash_runs(enc_run, tmp_path):
    """A list item ('- Granulocytes (white blood cells) ...', MedQuAD's first labelled pair) as
    the first pair: the summary ends the options with `--`, so the command does not read the
    sentence as an option (before: 'No such option')."""
    import shlex

    import pyarrow as pa
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app
    from ctxsim.flows.run_summary import summary_lines

    store, record, cfg = enc_run
    label = tmp_path / "label"
    label.mkdir()
    pair = {"s1": ["- White cells fight infection."], "s2": ["The bread rose slowly."]}
    pq.write_table(pa.table(pair), label / "part-00000.parquet")
    rec = json.loads(json.dumps(record))
    rec["stages"]["label"]["path"] = str(label)
    lines = summary_lines(rec, config=cfg, root=str(store.root))
    line = next(x for x in lines if x.strip().startswith("ctxsim explain"))
    out = CliRunner().invoke(app, shlex.split(line.split("    #")[0])[1:])
    assert out.exit_code == 0, out.output
    assert "s1: - White cells fight infection." in out.output


def test_a_root_set_by_set_run_root_is_carried_into_the_suggested_commands(enc_run):
    """`ctxsim run --set run.root=ROOT` (every stage reused here): the summary's commands carry
    --root ROOT (before: the config's own root, where the run is not)."""
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    store, _, cfg = enc_run
    args = ["run", "--config", str(cfg), "--until", "label", "--run-id", "enc-set"]
    out = CliRunner().invoke(app, [*args, "--set", f"run.root={store.root}"])
    assert out.exit_code == 0, out.output
    explain = next(x for x in out.output.splitlines() if x.strip().startswith("ctxsim explain"))
    assert f"--root {store.root}" in explain
