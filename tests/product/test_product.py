"""The dataset as a product: contamination check, label diagnostics, explain's
decomposition, and export (round trip, card, refusals) plus explain on a tiny real run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ctxsim.product.contamination import (
    ContaminationError,
    ContaminationParams,
    check_contamination,
    normalise,
)
from ctxsim.product.explain import decompose
from ctxsim.readers.sts import write_tsv
from tests.tasks.test_label import _fake_world, _publish, _run_label

PLANTED = "A man is playing a large flute on the stage tonight."
LONG = "the old ferry crossed the grey harbour slowly while gulls circled above the quiet town"


def _sts_dir(root: Path) -> Path:
    """Two test sets (an STS-year genre and a `test` split) and a dev set, by file name only."""
    d = root / "sts"
    (d / "STSX").mkdir(parents=True)
    write_tsv(d / "STSX" / "STSX.genre.tsv", [PLANTED, "Dogs run."], [LONG, "Cats sit."], [4, 1])
    write_tsv(d / "FOO.test.tsv", ["A bird sings in the tall tree."], ["x y z"], [2.0])
    write_tsv(d / "FOO.dev.tsv", ["Only in the dev split, never a test sentence."], ["q"], [1.0])
    return d


# ---- contamination ------------------------------------------------------------------------------
def test_contamination_finds_planted_and_near_copies_and_ignores_near_misses(tmp_path):
    sts = _sts_dir(tmp_path)
    words = LONG.split()
    near_copy = " ".join(words[:-1] + ["village"])  # one word of 15 changed: 3-gram J = 12/14
    near_miss = " ".join(words[:7] + ["and", "then", "nothing", "else", "happened", "at", "all"])
    sentences = [
        "  a MAN is playing a large flute -- on the stage, tonight!",  # planted, normalised
        near_copy,
        near_miss,  # shares 5 of its 3-grams: Jaccard 5/20 < 0.8
        "Only in the dev split, never a test sentence.",  # dev sets are not test sets
        "Something else entirely.",
    ]
    rep = check_contamination(sentences, sts, ContaminationParams(ngram=3, threshold=0.8))
    assert rep["contaminated"] == 2 and rep["exact"] == 1 and rep["ngram"] == 1
    assert rep["checked_sentences"] == 5 and rep["by_test_set"] == {"STSX.genre": 2}
    assert len(rep["test_files"]) == 2 and not any("dev" in f for f in rep["test_files"])
    hit = {e["sentence"]: e for e in rep["examples"]}
    assert hit[near_copy]["jaccard"] == pytest.approx(12 / 14, abs=1e-4)
    assert near_miss not in hit
    # the near miss counts once the threshold drops below its Jaccard
    low = check_contamination([near_miss], sts, ContaminationParams(ngram=3, threshold=0.2))
    assert low["contaminated"] == 1
    assert normalise(" A  MAN, is!") == "a man is"


def test_label_stage_reports_contamination_and_can_fail_on_it(tmp_path):
    store, arts, _ = _fake_world(tmp_path / "w", given=False)
    sts = tmp_path / "sts"
    sts.mkdir()
    write_tsv(sts / "BAR.test.tsv", ["Cats purr number 2."], ["unrelated"], [3.0])
    art = _run_label(store, arts, contamination={"sts_dir": str(sts)})
    assert art.stats["contamination"] == 1 and art.stats["contamination_exact"] == 1
    diag = json.loads((art.files_dir / "diagnostics.json").read_text())
    assert diag["contamination"]["examples"][0]["sentence"] == "cats purr number 2"
    with pytest.raises(ContaminationError, match="label.contamination.error"):
        _run_label(store, arts, contamination={"sts_dir": str(sts), "error": True})
    exact_only = _run_label(store, arts, contamination={"sts_dir": str(sts), "threshold": 1.0})
    assert exact_only.stats["contamination"] == 1  # exact matches do not depend on the threshold
    off = _run_label(store, arts)  # no STS directory configured: recorded as not checked
    assert off.stats["contamination"] is None


# ---- diagnostics --------------------------------------------------------------------------------
def test_label_diagnostics_reference_yields_and_histograms(tmp_path):
    store, arts, _ = _fake_world(tmp_path, given=False)
    art = _run_label(store, arts, reference_encoder="tfidf")
    st = art.stats
    assert st["diag_near_one_share"] < 0.5 and st["diag_warnings"] == []
    assert st["diag_reference_spearman"] is not None and st["yield_select_per_query"] == 4
    diag = json.loads((art.files_dir / "diagnostics.json").read_text())
    assert diag["by_mode"]["random"]["n"] == 28
    assert sum(diag["by_mode"]["random"]["counts"]) == 28
    assert (art.files_dir / "label_vs_reference.png").stat().st_size > 1000
    assert (art.files_dir / "label_by_mode.png").stat().st_size > 1000
    assert "# Label diagnostics" in (art.files_dir / "report.md").read_text()


def test_reference_encoder_can_be_a_sentence_transformers_model(tmp_path):
    """A model directory (here a tiny random BERT, mean-pooled by sentence-transformers) as
    the reference: its cosine is what the agreement is computed against."""
    from ctxsim.product.diagnostics import reference_similarity
    from ctxsim.tasks.train import TrainParams, build_tiny_backbone

    store, arts, _ = _fake_world(tmp_path / "w", given=False)
    texts = arts["queries"].read_table().column("text").to_pylist()
    model = build_tiny_backbone(texts, tmp_path / "bb", TrainParams(tiny_vocab_size=200), 0)
    art = _run_label(store, arts, reference_encoder=str(model))
    t = art.read_table()
    ref = reference_similarity(str(model), t.column("s1").to_pylist(), t.column("s2").to_pylist())
    assert np.all(np.abs(ref) <= 1.0 + 1e-6) and np.ptp(ref) > 0
    from scipy.stats import spearmanr

    want = round(100 * spearmanr(t.column("label").to_numpy(), ref).statistic, 2)
    assert art.stats["diag_reference_spearman"] == pytest.approx(want, abs=0.01)


def test_labels_crowded_at_one_warn(tmp_path, caplog):
    """Eq. 3 with a shared offset per context (the quickstart's old labels): every label is
    within 1e-4 of 1.0, which the stage says, twice."""
    store, arts, _ = _fake_world(tmp_path, given=False)
    score = arts["score"].read_table()
    n = score.num_rows
    rng = np.random.default_rng(0)
    s = -50.0 - 3 * (score.column("context_id").to_numpy() % 5) + rng.normal(0, 1e-4, n)
    score = score.set_column(score.schema.get_field_index("S"), "S", pa.array(s))
    arts["score"] = _publish(store, "score", score)
    with caplog.at_level("WARNING"):
        art = _run_label(store, arts, ablations=False)
    assert art.stats["diag_near_one_share"] > 0.5
    assert len(art.stats["diag_warnings"]) == 2
    assert "within 0.0001 of 1.0" in caplog.text and "warn_band_width" in caplog.text


# ---- explain's decomposition --------------------------------------------------------------------
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


# ---- a tiny real run: export and explain --------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from ctxsim.flows.config import load_config
    from ctxsim.flows.pipeline import execute
    from ctxsim.store.artefacts import ArtefactStore
    from tests.conftest import REPO, SMALL_QUICKSTART

    root = tmp_path_factory.mktemp("product-run")
    sts = _sts_dir(root)
    sets = [
        *SMALL_QUICKSTART,
        "label.split_ratios=[60, 20, 20]",
        f"label.contamination.sts_dir='{sts}'",
        "run.license=cc-by-4.0",
        "run.quiet=true",
    ]
    cfg = load_config(REPO / "configs" / "quickstart.yaml", sets, str(root / "artefacts"))
    record = execute(cfg, until="label", run_id="tiny", use_prefect=False)
    return ArtefactStore(root / "artefacts"), record, sts


@pytest.mark.parametrize("fmt", ["hf", "parquet", "jsonl"])
def test_export_round_trips_with_a_card(tiny_run, tmp_path, fmt):
    from ctxsim.product.export import export_run, parse_card

    store, record, _ = tiny_run
    label = store.require("label", record["stages"]["label"]["fingerprint"]).read_table()
    out = tmp_path / "ds"
    summary = export_run(store, "tiny", out, fmt)
    assert summary["splits"] == {
        s: label.column("split").to_pylist().count(s) for s in ("train", "dev", "test")
    }
    for split in summary["splits"]:
        want = label.filter(pa.compute.equal(label.column("split"), split)).to_pylist()
        if fmt == "hf":
            from datasets import load_from_disk

            got = load_from_disk(str(out))[split].to_list()
        elif fmt == "parquet":
            import pyarrow.parquet as pq

            got = pq.read_table(out / "data" / f"{split}.parquet").to_pylist()
        else:
            lines = (out / "data" / f"{split}.jsonl").read_text().splitlines()
            got = [json.loads(x) for x in lines]
        assert _same_rows(got, want)
    meta, body = parse_card((out / "README.md").read_text())
    assert meta["license"] == "cc-by-4.0" and meta["task_categories"] == ["sentence-similarity"]
    c = meta["ctxsim"]
    assert c["fingerprints"] == {k: v["fingerprint"] for k, v in record["stages"].items()}
    assert c["counts"]["pairs"] == label.num_rows and c["contamination"]["contaminated"] == 0
    assert len(c["corpus"]["checksum_sha256"]) == 64 and c["config"]["label"]["split_ratios"]
    assert body.lstrip().startswith("# ctxsim") and "## Contamination check" in body
    assert (out / "figures" / "label_hist.png").is_file()  # not label_label_hist.png
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]  # nothing beside DIR


def _same_rows(got: list[dict], want: list[dict]) -> bool:
    if len(got) != len(want):
        return False
    for a, b in zip(got, want, strict=True):
        for k, v in b.items():
            w = a[k]
            if isinstance(v, float) and np.isnan(v):
                if not (w is None or np.isnan(w)):
                    return False
            elif w != v:
                return False
    return True


def test_export_refuses_non_empty_or_unwritable_targets_and_writes_nothing(
    tiny_run, tmp_path, monkeypatch
):
    from ctxsim.product import export as ex

    store, _, _ = tiny_run
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(ex.ExportError, match="not empty; pass --overwrite"):
        ex.export_run(store, "tiny", full, "parquet")
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    # --overwrite never wipes a directory that is not a previous export
    with pytest.raises(ex.ExportError, match="not a previous ctxsim export"):
        ex.export_run(store, "tiny", full, "parquet", overwrite=True)
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    # a failure half-way leaves neither DIR nor the staging directory beside it
    monkeypatch.setattr(ex, "write_rows", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        ex.export_run(store, "tiny", tmp_path / "new", "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]
    monkeypatch.undo()
    if Path("/proc").is_dir():  # not writable even for root
        with pytest.raises(ex.ExportError, match="cannot create|not writable"):
            ex.export_run(store, "tiny", Path("/proc/ctxsim-export"), "hf")
        assert not Path("/proc/ctxsim-export").exists()
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        with pytest.raises(ex.ExportError, match="not writable"):
            ex.export_run(store, "tiny", locked / "ds", "hf")
        assert list(locked.iterdir()) == []


def test_export_fails_on_contamination_when_the_config_says_so(tiny_run, tmp_path):
    from ctxsim.product.export import export_run

    store, _, sts = tiny_run
    label = store.require("label", store.read_run("tiny")["stages"]["label"]["fingerprint"])
    planted = label.read_table(["s1"]).column("s1")[0].as_py()
    dirty = tmp_path / "sts"
    dirty.mkdir()
    write_tsv(dirty / "BAZ.test.tsv", [planted], ["other"], [1.0])
    summary = export_run(store, "tiny", tmp_path / "a", "jsonl", sts_dir=str(dirty))
    assert summary["contaminated"] == 1
    record = store.read_run("tiny")
    record["config"]["label"]["contamination"]["error"] = True
    store.write_run("tiny-strict", {**record, "run_id": "tiny-strict"})
    with pytest.raises(ContaminationError):
        export_run(store, "tiny-strict", tmp_path / "b", "jsonl", sts_dir=str(dirty))
    assert not (tmp_path / "b").exists()


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


def test_a_stage_report_becomes_a_prefect_markdown_artifact(tmp_path, monkeypatch):
    from ctxsim.flows import pipeline
    from ctxsim.store.artefacts import ArtefactStore

    store = ArtefactStore(tmp_path)
    calls: list[dict] = []
    monkeypatch.setattr(pipeline, "create_table_artifact", lambda **kw: calls.append(kw))
    monkeypatch.setattr(pipeline, "create_markdown_artifact", lambda **kw: calls.append(kw))
    with_report = _publish(store, "label", pa.table({"x": [1]}))
    (with_report.files_dir).mkdir(exist_ok=True)
    (with_report.files_dir / "report.md").write_text("# Label diagnostics\n")
    pipeline._stats_artifact("label", with_report, reused=False)
    assert calls[-1]["key"] == "ctxsim-label-report"
    assert calls[-1]["markdown"] == "# Label diagnostics\n"
    calls.clear()
    pipeline._stats_artifact("pairs", _publish(store, "pairs", pa.table({"x": [1]})), False)
    assert len(calls) == 1 and "markdown" not in calls[0]


def test_export_of_given_pairs_has_one_eval_split_and_the_origin_table(tmp_path):
    from datasets import Dataset, load_from_disk

    from ctxsim.product.export import export_run, parse_card

    store, arts, _ = _fake_world(tmp_path / "w", given=True)
    arts["label"] = _run_label(store, arts)
    stages = {k: {"fingerprint": a.fingerprint} for k, a in arts.items()}
    store.write_run("g", {"run_id": "g", "config": {"run": {}}, "stages": stages})
    summary = export_run(store, "g", tmp_path / "out", "hf")
    assert summary["splits"] == {"eval": 28}
    ds = load_from_disk(str(tmp_path / "out"))
    assert isinstance(ds, Dataset) and ds.num_rows == 28
    meta, body = parse_card((tmp_path / "out" / "README.md").read_text())
    assert meta["license"] == "unknown"
    want = f"| STSb.dev | 14 | {arts['label'].stats['spearman_all.STSb.dev']} |"
    assert "## Origin similarity against gold" in body and want in body
    assert "Not checked: given pairs are evaluation pairs" in body


def test_overwrite_replaces_only_a_previous_export_never_the_root_or_cwd(
    tiny_run, tmp_path, monkeypatch
):
    """Item 1 of the hostile-input round: `--overwrite` pointed at the artefact root, its
    parent or the working directory is refused in one line and deletes nothing."""
    from ctxsim.product import export as ex

    store, _, _ = tiny_run
    root = Path(store.root)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    for target in (root, root.parent):
        with pytest.raises(ex.ExportError, match="artefact root"):
            ex.export_run(store, "tiny", target, "parquet", overwrite=True)
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    with pytest.raises(ex.ExportError, match="current directory"):
        ex.export_run(store, "tiny", Path("."), "parquet", overwrite=True)
    with pytest.raises(ex.ExportError, match="current directory"):
        ex.export_run(store, "tiny", work.parent, "parquet", overwrite=True)
    assert (work / "notes.txt").read_text() == "mine"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before
    # a previous export is replaced (its marker says what it is)
    out = tmp_path / "ds"
    ex.export_run(store, "tiny", out, "parquet")
    assert (out / ex.EXPORT_MARKER).is_file()
    (out / "stale.txt").write_text("old")
    ex.export_run(store, "tiny", out, "jsonl", overwrite=True)
    assert not (out / "stale.txt").exists() and (out / "README.md").is_file()
    assert json.loads((out / ex.EXPORT_MARKER).read_text())["format"] == "jsonl"


def test_export_refuses_non_finite_labels_in_one_line(tmp_path):
    """A label artefact with a NaN label (let through by label.max_nonfinite_fraction) is not
    exported: one line naming the run and the count, nothing written (it wrote them, exit 0)."""
    from typer.testing import CliRunner

    from ctxsim.flows.cli import app

    store, arts, _ = _fake_world(tmp_path / "w", given=False, no_cs=(0, 1))
    arts["label"] = _run_label(store, arts, max_nonfinite_fraction=0.05)
    stages = {k: {"fingerprint": a.fingerprint} for k, a in arts.items()}
    store.write_run("nan", {"run_id": "nan", "config": {"run": {}}, "stages": stages})
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["export", "nan", "--out", str(out), "--root", str(store.root)])
    assert res.exit_code == 1 and not out.exists()
    assert res.output.strip().splitlines() == [
        f"error: run nan: 1 of 28 labels in {arts['label'].path} are not finite (NaN or inf); "
        "not exported: fix what left those pairs without contexts and re-run label"
    ]


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
    from ctxsim.readers.sts import write_tsv

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
