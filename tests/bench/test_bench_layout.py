"""No bench imports another bench: what two benches share lives in bench/common.py (or
bench/harness.py, timing and results), so a finished experiment can move or go without
breaking a live tool."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
SHARED = {"bench", "bench.harness", "bench.common", "bench.results_index"}


def bench_imports(path: Path) -> set[str]:
    """The bench modules ``path`` imports, at the top or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench"):
            names = [f"{node.module}.{a.name}" for a in node.names]
            out |= {node.module} if node.module != "bench" else set(names)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("bench.")}
    return out


def test_no_bench_imports_another_bench() -> None:
    found = {
        f"{p.relative_to(BENCH)} imports {m}"
        for p in BENCH.rglob("*.py")
        for m in bench_imports(p)
        if m not in SHARED
    }
    assert not found, sorted(found)


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    f = tmp_path / "bench_x.py"
    f.write_text("def f():\n    from bench.bench_y import g\n    from bench import bench_z\n")
    assert bench_imports(f) == {"bench.bench_y", "bench.bench_z"}
