"""bench_gpu's arithmetic: rows read back from a device log, labelled pairs per GPU-hour."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_gpu import (
    OTHER_CPU_S_PER_PAIR,
    WINDOWS_PER_PAIR,
    pairs_per_gpu_hour,
    rows_from_logs,
)


def test_rows_from_a_device_log_and_pairs_per_gpu_hour(tmp_path: Path) -> None:
    log = tmp_path / "bench_gpu.log"
    log.write_text(
        "WARNING: pip said something\n"
        "{'device': 'cuda', 'gpu': 'NVIDIA H200', 'bf16_matmul_peak_tflops': 800.0}\n"
        "{'section': 'score_right_only', 'model': 'smollm2-135m (random init)', "
        "'windows_per_s': 3000.0}\n"
        "  return forward_call(*args, **kwargs)\n"
        "{'section': 'gencontexts_sampling', 'model': 'smollm2-135m (random init)', "
        "'samples_per_s': 100.0}\n"
        "{'section': 'gencontexts_sampling', 'model': 'smollm2-135m (random init)', "
        "'samples_per_s': 250.0}\n",
        encoding="utf-8",
    )
    info, rows = rows_from_logs([log])
    assert info["gpu"] == "NVIDIA H200" and info["bf16_matmul_peak_tflops_per_call"] == [800.0]
    assert [r["section"] for r in rows] == ["score_right_only"] + ["gencontexts_sampling"] * 2
    (got,) = pairs_per_gpu_hour(rows)
    gpu_s = WINDOWS_PER_PAIR / 3000.0 + 1 / 250.0  # the faster sampling setting is the one used
    assert got["gpu_s_per_pair"] == pytest.approx(gpu_s, abs=1e-5)
    assert got["pairs_per_hour_all_in"] == round(3600 / (gpu_s + OTHER_CPU_S_PER_PAIR))
    assert got["pairs_per_gpu_hour_gpu_stages_only"] == round(3600 / gpu_s)


def test_no_rate_no_estimate() -> None:
    rows = [{"section": "score_right_only", "model": "gemma-270m (x)", "windows_per_s": 1.0}]
    assert pairs_per_gpu_hour(rows) == []


def test_k_windows_give_each_sentence_k_right_contexts_of_its_own() -> None:
    """books_generated's right-term shape: no left context, a sentence repeated over its k
    windows (the prompt they share), right contexts drawn from the other sentences."""
    from bench.bench_gpu import k_windows

    paras = [[f"p{i} s{j}" for j in range(5)] for i in range(10)]  # 50 sentences
    lefts, sents, rights = k_windows(paras, 20, 4)
    assert lefts == [""] * 20
    assert sents[:4] == ["p0 s0"] * 4 and len(set(sents)) == 5
    assert not set(rights) & set(sents)  # rights come from the pool after the sentences
    with pytest.raises(ValueError, match="cannot make"):
        k_windows(paras, 200, 4)


def test_rows_of_several_calls_say_their_call_and_sampling_comes_from_a_results_file(
    tmp_path: Path,
) -> None:
    import json

    from bench.bench_gpu import sampling_rows

    logs = []
    for i, wps in enumerate((1000.0, 2000.0)):
        logs.append(tmp_path / f"call{i}.log")
        logs[-1].write_text(
            "{'section': 'right_term_at_scale', 'model': 'smollm2-135m (random init)', "
            f"'windows_per_s': {wps}}}\n",
            encoding="utf-8",
        )
    _, rows = rows_from_logs(logs)
    assert [r["call"] for r in rows] == [1, 2]
    res = tmp_path / "earlier.json"
    smp = {"model": "smollm2-135m (random init)", "samples_per_s": 500.0}
    res.write_text(json.dumps({"tables": {"gencontexts_sampling": [smp]}}), encoding="utf-8")
    rows += sampling_rows(res)
    assert rows[-1]["section"] == "gencontexts_sampling" and rows[-1]["from"] == "earlier.json"
    (got,) = pairs_per_gpu_hour(rows)  # the faster call's rate
    assert got["gpu_s_per_pair"] == pytest.approx(WINDOWS_PER_PAIR / 2000.0 + 1 / 500.0, abs=1e-5)
    assert sampling_rows(None) == []
