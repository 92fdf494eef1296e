"""bench/bench_adapt.py: finished runs' trained models scored on the dev tasks with paired
intervals against the model each started from and between arms, and each run's CPU by stage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.bench.test_bench_evaluators import PAIRS, QA


def _run(root, run_id, model_dir, cpu, backbone, labels):
    import pyarrow as pa
    import pyarrow.parquet as pq

    label_dir = root / "label" / run_id
    label_dir.mkdir(parents=True)
    pq.write_table(
        pa.table({"pair_id": list(range(len(labels))), "label": labels}),
        label_dir / "part-00000.parquet",
    )
    parts = [{"file": "part-00000.parquet", "rows": len(labels)}]
    (label_dir / "_MANIFEST.json").write_text(
        json.dumps({"stats": {"cpu_seconds": 1.0}, "parts": parts})
    )
    (label_dir / "files").mkdir()  # as a real label artefact: not parts
    (label_dir / "files" / "diagnostics.json").write_text("{}")
    stage = root / "train" / run_id
    stage.mkdir(parents=True)
    (stage / "_MANIFEST.json").write_text(json.dumps({"stats": {"cpu_seconds": cpu}}))
    (stage / "files").mkdir()
    (stage / "files" / "model").symlink_to(model_dir, target_is_directory=True)
    (root / "runs").mkdir(exist_ok=True)
    rec = {
        "run_id": run_id,
        "config": {"train": {"backbone": str(backbone)}},
        "stages": {"train": {"path": str(stage)}, "label": {"path": str(label_dir)}},
    }
    (root / "runs" / f"{run_id}.json").write_text(json.dumps(rec))


def test_arms_are_scored_and_paired_against_each_other_and_their_backbone(tmp_path):
    from bench.bench_adapt import main
    from tests.tasks.tiny_encoder import build_tiny_encoder

    texts = PAIRS.s1 + PAIRS.s2 + QA.questions + QA.answers
    a = build_tiny_encoder(texts * 5, tmp_path / "a", seed=0)
    b = build_tiny_encoder(texts * 5, tmp_path / "b", seed=1)
    root = tmp_path / "root"
    _run(root, "ra", a, 12.5, a, [0.1, 0.5, 0.9, 0.3])
    _run(root, "rb", b, 3.0, b, [0.2, 0.6, 0.8, 0.4])  # started from b, which is no --reference
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "x.pairs.tsv").write_text(
        "sentence1\tsentence2\tlabel\n"
        + "".join(
            f"{s}\t{t}\t{y}\n" for s, t, y in zip(PAIRS.s1, PAIRS.s2, PAIRS.labels, strict=True)
        )
    )
    (dev / "y_qa.jsonl").write_text(
        "".join(
            json.dumps({"qid": f"q{i}", "question": q, "answer": x}) + "\n"
            for i, (q, x) in enumerate(zip(QA.questions, QA.answers[:2], strict=True))
        )
    )
    # ra's in-domain scorer ran first: its own train counts, the label stage it shares does not
    rec = json.loads((root / "runs" / "ra.json").read_text())
    scorer_train = root / "train" / "ra-scorer"
    scorer_train.mkdir(parents=True)
    (scorer_train / "_MANIFEST.json").write_text(json.dumps({"stats": {"cpu_seconds": 7.0}}))
    stages = {
        "train": {"path": str(scorer_train), "fingerprint": "s"},
        "label": rec["stages"]["label"],
    }
    (root / "runs" / "ra-scorer.json").write_text(json.dumps({"stages": stages}))
    (tmp_path / "ra.time").write_text("\tUser time (seconds): 10.5\n\tSystem time (seconds): 1.5\n")
    sts = tmp_path / "sts"
    sts.mkdir()
    (sts / "STSb.dev.tsv").write_text(
        "sentence1\tsentence2\tscore\n"
        + "".join(
            f"{s}\t{t}\t{5 * y}\n"
            for s, t, y in zip(PAIRS.s1, PAIRS.s2, [0.1, 0.9, 0.4, 0.6], strict=False)
        )
    )
    out = tmp_path / "out"
    main(
        [
            "--eval-dir",
            str(dev),
            "--sts",
            "STSb.dev",  # found beside the dev folder, under ../sts
            "--arm",
            f"A={root}:ra",
            "--arm",
            f"B={root}:rb",
            "--reference",
            str(a),
            "--reference",
            f"bee={b}",  # a model folder under a label of its own
            "--vs",
            "A=B",
            "--vs",
            "A=bee",
            "--merge",
            f"whole-b={a}:{b}:1",  # all of b's weights: b again
            "--merge",
            f"mid={a}:{b}:0.5",
            "--vs",
            "mid=bee",
            "--vs",
            "A,B=bee,mid",  # two seeds a side: no STS interval
            "--merge",
            "soup=A:B:0.5",  # the arms' models by their labels: the same merge as mid
            "--merge",
            "soup-again=soup:B:0",  # an earlier merge by its label
            "--agree",
            "A=B",
            "--time",
            f"A={tmp_path / 'ra.time'}",
            "--cache",
            str(tmp_path / "cache"),
            "--resamples",
            "20",
            "--resample-seeds",
            "--out-dir",
            str(out),
            "--name",
            "t",
        ]
    )
    doc = json.loads((out / "t.json").read_text())
    rows = {r["arm"]: r for r in doc["rows"]}
    assert set(rows) == {str(a), "bee", "whole-b", "mid", "soup", "soup-again", "A", "B"}
    assert rows["soup"]["x AP"] == rows["mid"]["x AP"] == rows["soup-again"]["x AP"]
    assert rows["whole-b"]["x AP"] == rows["bee"]["x AP"]
    merged = sorted((tmp_path / "cache").glob("merged-*"))
    assert len(merged) == 3 and not any((m / "README.md").exists() for m in merged)
    assert rows["A"]["x AP"] == rows[str(a)]["x AP"]  # the same model scores the same
    assert rows["bee"]["x AP"] == rows["B"]["x AP"] and rows["bee"]["run"] == str(b)
    cis = {(r["arm"], r["vs"]): r for r in doc["tables"]["paired intervals"]}
    assert cis[("A", str(a))]["x AP"] == "+0.00 [+0.00, +0.00]"
    assert cis[("A", str(a))]["STSb.dev"] == "+0.00 [+0.00, +0.00]"
    assert rows["A"]["STSb.dev spearman"] == rows[str(a)]["STSb.dev spearman"]
    assert cis[("A,B", "bee,mid")]["STSb.dev"] == "" and cis[("A,B", "bee,mid")]["x AP"]
    assert ("A", "B") in cis and ("B", str(a)) not in cis  # an arm meets its own backbone only
    drawn = cis[("A,B", "bee,mid (seeds resampled)")]  # a second row, for seed groups only
    assert drawn["x AP"].split(" [")[0] == cis[("A,B", "bee,mid")]["x AP"].split(" [")[0]
    assert not any(vs.endswith("(seeds resampled)") for arm, vs in cis if arm != "A,B")
    assert ("A", "bee") in cis and ("B", "bee") not in cis and ("mid", "bee") in cis
    cost = {r["arm"]: r for r in doc["tables"]["cost"]}
    assert cost["A"]["all-in CPU-s"] == 12.0 and cost["A"]["train"] == 12.5
    assert cost["B"]["all-in CPU-s"] is None
    assert cost["A"]["scorer train"] == 7.0 and "scorer label" not in cost["A"]
    assert "scorer train" not in cost["B"]
    agree = doc["tables"]["label agreement"][0]
    assert agree["pairs in both"] == 4 and agree["label Spearman x100"] == 100.0
    assert agree["max |label gap|"] == 0.1


def test_merged_model_interpolates_the_weights_once_and_refuses_two_architectures(tmp_path):
    import pytest
    import torch
    from safetensors.torch import load_file, save_file

    from bench.common import merged_model
    from tests.tasks.tiny_encoder import build_tiny_encoder

    texts = (PAIRS.s1 + PAIRS.s2) * 5
    a = build_tiny_encoder(texts, tmp_path / "a", seed=0)
    b = build_tiny_encoder(texts, tmp_path / "b", seed=1)
    out = merged_model(str(a), str(b), 0.25, tmp_path / "cache")
    wa, wb, wm = (load_file(Path(d) / "model.safetensors") for d in (a, b, out))
    assert wm.keys() == wb.keys()
    for k, v in wm.items():
        if v.is_floating_point():
            torch.testing.assert_close(v, 0.75 * wa[k] + 0.25 * wb[k])
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert merged_model(str(a), str(b), 0.25, tmp_path / "cache") == out  # kept, not rewritten
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    other = tmp_path / "other"
    shutil.copytree(b, other)
    save_file({"extra.weight": torch.zeros(2)} | wb, other / "model.safetensors")
    with pytest.raises(SystemExit, match="not one architecture"):
        merged_model(str(a), str(other), 0.5, tmp_path / "cache")
    k = next(k for k, v in wb.items() if v.ndim == 2)
    save_file(
        wb | {k: torch.zeros(wb[k].shape[0] + 1, wb[k].shape[1])}, other / "model.safetensors"
    )
    with pytest.raises(SystemExit, match="another shape"):
        merged_model(str(a), str(other), 0.5, tmp_path / "cache")
