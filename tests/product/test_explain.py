"""`ctxsim explain`: the exact decomposition of a label into per-context shares
(product/explain.py), and explain on a tiny real run (flows/explain.py): a labelled pair, an
unseen one, a read-only root, a sentence too long, a corrupt cached input."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ctxsim.product.explain import decompose
from ctxsim.readers.sts import write_tsv


def test_explain_top_context_is_the_decisive_one():
    """Context 2 is where both sentences fit (or fail to fit) far more than anywhere else: it
    carries most of the cosine; context 4 is where they disagree."""
    x = np.array([-1.0, -1.2, -9.0, -1.1, -3.0])
    y = np.array([-1.1, -1.0, -8.5, -1.0, 0.5])
    first = np.array([True, True, True, False, False])
    label, contrib, disagree = decompose(x, y, first, "cosine")
    assert int(np.argmax(contrib)) == 2 and int(np.argmax(disagree)) == 4
    assert label == pytest.approx(float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)))
    assert contrib.sum() == pytest.approx(label)
    lp, cp, _ = decompose(x, y, first, "pearson")
    assert cp.sum() == pytest.approx(lp)
    lx, cx, _ = decompose(x, y, first, "cross_fit")
    assert cx.sum() == pytest.approx(lx)
    ln, cn, _ = decompose(x, y, first, "neg_rmse")
    assert -np.sqrt(-cn.sum()) == pytest.approx(ln)


def test_explain_a_labelled_pair_reads_the_runs_scores(tiny_run):
    """For a pair the run labelled, explain's S are the score artefact's (from the cache, no
    scoring call), its label is the run's, and its shares are the exact decomposition."""
    from ctxsim.flows.explain import explain_pair

    store, record, _ = tiny_run
    label = store.require("label", record["stages"]["label"]["fingerprint"]).read_table()
    row = label.to_pylist()[0]
    res = explain_pair(store, "tiny", row["s1"], row["s2"], top=3)
    assert res["label"] == pytest.approx(row["label"], abs=1e-5)
    assert res["label_in_run"] == pytest.approx(row["label"])
    assert all(s["forward_calls"] == 0 for s in res["sentences"])
    score = store.require("score", record["stages"]["score"]["fingerprint"]).read_table()
    key = {
        (q, c): s
        for q, c, s in zip(
            score.column("query_id").to_pylist(),
            score.column("context_id").to_pylist(),
            score.column("S").to_pylist(),
            strict=True,
        )
    }
    for r in res["contexts"]:
        assert r["S1"] == pytest.approx(key[(row["s1_id"], r["context_id"])], rel=1e-5)
        assert r["S2"] == pytest.approx(key[(row["s2_id"], r["context_id"])], rel=1e-5)
        assert r["source"]["document"] and r["source"]["section_id"] is not None
    contrib = [r["contribution"] for r in res["contexts"]]
    assert res["top_contributing"][0]["contribution"] == max(contrib)
    assert sum(contrib) == pytest.approx(res["label"], abs=1e-4)
    assert len(res["contexts"]) == row["n_ctx1"] + row["n_ctx2"]


def test_explain_an_unseen_pair_builds_its_context_sets(tiny_run):
    from ctxsim.flows.explain import explain_pair

    store, _, _ = tiny_run
    a, b = "The soup needed more salt and pepper.", "We baked bread on a cold Sunday."
    res = explain_pair(store, "tiny", a, b, top=2)
    assert [s["cs_from"] for s in res["sentences"]] == ["run stages for new queries"] * 2
    assert np.isfinite(res["label"]) and res["label_in_run"] is None
    assert len(res["top_disagreeing"]) == 2
    again = explain_pair(store, "tiny", a, b, top=2)  # the same pair again: all cached
    assert again["label"] == res["label"]
    assert all(s["forward_calls"] == 0 for s in again["sentences"])


def _tree(root: Path) -> list[tuple[str, int, int]]:
    return sorted(
        (str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    )


def test_explain_on_a_read_only_root_works_and_writes_nothing_there(tiny_run, monkeypatch):
    """It was a 46-line traceback (OSError writing _cache/explain/...): now the new-query
    stages and new scores go to a temporary folder, and the result says so in one line."""
    from typer.testing import CliRunner

    from ctxsim.flows import explain as ex
    from ctxsim.flows.cli import app

    store, _, _ = tiny_run
    root = Path(store.root)
    before = _tree(root)
    # as root, permission bits do not stop a write: the probe is told what a read-only mount
    # would answer (the snapshot below is what shows that nothing is written)
    monkeypatch.setattr(ex, "root_writable", lambda path: False)
    if os.geteuid() != 0:
        for p in [root, *root.rglob("*")]:
            if p.is_dir():
                p.chmod(0o555)
        monkeypatch.undo()
    try:
        a, b = "Rain fell on the tin roof all night.", "The kettle whistled in the kitchen."
        res = CliRunner().invoke(app, ["explain", a, b, "--run", "tiny", "--root", str(root)])
    finally:
        for p in [root, *root.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[-1] == (
        f"note: artefact root {root} is read-only: S computed without its score cache and "
        "new-query stages in a temporary folder, nothing cached"
    )
    assert _tree(root) == before


def test_explain_refuses_a_sentence_longer_than_the_runs_own(tiny_run):
    """A 5,000-word sentence got `label=0.855680` (the scorer cut it silently); it is held to
    queries.max_tokens, the limit of the run's own sentences, before any work."""
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    store, record, _ = tiny_run
    root = Path(store.root)
    before = _tree(root)
    limit = record["config"]["queries"]["max_tokens"]
    long = " ".join(["word"] * 5000) + "."
    res = CliRunner().invoke(
        app, ["explain", "A short sentence here.", long, "--run", "tiny", "--root", str(root)]
    )
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        f"error: S2 (the second sentence) has 5,001 tokens, more than this run's "
        f"queries.max_tokens={limit} (the limit its own sentences were held to; the scorer "
        "would cut it silently): explain a shorter sentence"
    ]
    assert _tree(root) == before
    ok = " ".join(["word"] * (limit - 1)) + "."  # at the limit: explained
    res = CliRunner().invoke(app, ["explain", ok, "Short.", "--run", "tiny", "--root", str(root)])
    assert res.exit_code == 0, res.output


def test_explain_rewrites_a_corrupt_input_file_instead_of_reading_it(tiny_run, caplog):
    """explain's cached pair file (_cache/explain/KEY/EXPLAIN.pair.tsv) is checked against the
    bytes its texts give: a corrupt copy (here one letter changed, same size, as a flipped byte
    leaves it) is moved aside with a warning and written again, not read as the pair."""
    import hashlib

    from ctxsim.flows.explain import explain_pair

    store, _, _ = tiny_run
    a, b = "The lighthouse keeper counted the ships.", "A gull stole his sandwich at noon."
    key = hashlib.sha256("\x1f".join([a, b]).encode()).hexdigest()[:16]
    tsv = Path(store.root) / "_cache" / "explain" / key / "EXPLAIN.pair.tsv"
    tsv.parent.mkdir(parents=True)
    write_tsv(tsv, [a.replace("keeper", "kEeper")], [b], [0.0])
    with caplog.at_level("WARNING"):
        res = explain_pair(store, "tiny", a, b, top=2)
    assert [s["text"] for s in res["sentences"]] == [a, b] and np.isfinite(res["label"])
    assert any(
        f"explain input file {tsv}: sha256 mismatch" in r.getMessage() for r in caplog.records
    )
    assert "kEeper" not in tsv.read_text() and list(tsv.parent.glob("EXPLAIN.pair.tsv.corrupt-*"))
