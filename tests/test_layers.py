"""The packages form no cycle: each package's imports of the others (module level or inside a
function) point one way, so a package can be read, tested and replaced without the ones above it
(docs/architecture.md, "Where things live")."""

from __future__ import annotations

import ast

from tests.conftest import REPO

PACKAGES = ("flows", "tasks", "scores", "product", "store", "readers", "models")


def package_imports() -> dict[str, set[str]]:
    """{package: the other ctxsim packages its modules import}."""
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names: list[str] = []
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "ctxsim" and len(parts) > 1 and parts[1] in PACKAGES:
                        if parts[1] != pkg:
                            graph[pkg].add(parts[1])
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        path = [*path, node]
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if state.get(nxt) is None:
                found = visit(nxt, path)
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [])
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert _cycle(graph) is not None and _cycle({"a": {"b"}, "b": set()}) is None


def test_no_package_cycle() -> None:
    graph = package_imports()
    assert graph["flows"] >= {"tasks", "store"}  # the scan sees imports
    assert _cycle(graph) is None, f"package cycle: {' -> '.join(_cycle(graph) or [])}"


def test_models_import_no_other_package() -> None:
    """models/ is pure maths: no stage, no store, no orchestration."""
    assert not package_imports()["models"] & {"flows", "tasks", "scores", "product"}
