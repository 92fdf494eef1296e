"""bench/bench_adamw.py: each AdamW kernel steps the same parameters from the same gradients,
is clocked, and ends where the multi-tensor loop does up to rounding; the results are written."""

from __future__ import annotations

import json

TEXTS = ["prices rise when demand rises .", "taxes raise the price buyers pay ."] * 4


def test_every_kernel_steps_the_same_update_and_is_written(tmp_path):
    from bench.bench_adamw import KERNELS, main
    from tests.tasks.tiny_encoder import build_tiny_encoder

    build_tiny_encoder(TEXTS, tmp_path / "st")
    main(["--model", str(tmp_path / "st"), "--steps", "2", "--out-dir", str(tmp_path / "out")])
    rows = json.loads((tmp_path / "out" / "adamw_step.json").read_text())["rows"]
    assert [r["kernel"] for r in rows] == list(KERNELS)
    assert all(r["CPU ms a step (median)"] >= 0 for r in rows)
    assert rows[0]["largest parameter difference from the multi-tensor loop"] == 0.0
    assert all(r["largest parameter difference from the multi-tensor loop"] < 1e-6 for r in rows)
    assert (tmp_path / "out" / "adamw_step.md").exists()
