"""`ctxsim export` (product/export.py, its card and target checks): round trip in every format
with its card, refusals that write nothing, contamination at export time, given pairs, and
non-finite labels."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ctxsim.product.contamination import ContaminationError
from ctxsim.readers.sts import write_tsv
from tests.tasks.test_label import _fake_world, _run_label


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
