"""bench/harness.py's markdown cells: agreements near 1 keep the digits that tell them apart."""

from __future__ import annotations

from bench.harness import markdown_table


def test_cells_keep_agreements_near_one_apart_and_round_the_rest() -> None:
    rows = [
        {"variant": "int8", "spearman": 0.99829, "cpu_s": 10.373, "big": 12345.678, "tiny": 0.0001},
        {"variant": "kept", "spearman": 0.999012, "cpu_s": 11.6, "big": 2e7, "tiny": 0.0},
        {"variant": "same", "spearman": 0.9999999999999998, "cpu_s": 9.0, "big": -0.995},
    ]
    lines = markdown_table(rows).splitlines()
    assert lines[0] == "| variant | spearman | cpu_s | big | tiny |"
    assert lines[2] == "| int8 | 0.99829 | 10.373 | 12,345.7 | 0.0001 |"
    assert lines[3] == "| kept | 0.99901 | 11.6 | 2e+07 | 0 |"
    assert lines[4] == "| same | 1 | 9 | -0.995 |  |"
