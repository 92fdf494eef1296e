"""Each stage's source hash, pinned next to its `version`.

A stage's `version` is part of its fingerprint: when a code change can change the output, the
version must change too, or old artefacts are reused for new code.
tests/tasks/test_stage_versions.py fails when a stage's sources changed since they were pinned,
so the change gets a conscious choice: bump `version` (output can change), or only re-pin (a
refactor). Re-pin with ``python -m tests.stage_versions`` (``--check`` only lists the stale).

A stage's sources are its module (every file, for a package) and, transitively, every ctxsim
module it imports (``import ctxsim.x`` / ``from ctxsim.x import y`` anywhere in a file, found
with ``ast``; the parent packages' ``__init__.py`` too, since importing runs them), plus the
modules a stage declares in ``Stage.sources`` (code it reaches without an import statement).
Only files of this repository count: ``ctxsim.<pkg>`` maps to a folder by pyproject's
``[tool.setuptools.package-dir]``. So a change in ``scores/eq3.py`` fires the guard for `score`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import tomllib
from collections.abc import Callable
from pathlib import Path

PIN_FILE = Path(__file__).with_name("stage_versions.json")
REPO = Path(__file__).resolve().parents[1]

#: reads a source file's bytes; tests pass another to see the hash of a modified copy
Reader = Callable[[Path], bytes]


def _read(path: Path) -> bytes:
    return path.read_bytes()


def package_dirs(repo: Path = REPO) -> dict[str, Path]:
    """``ctxsim.<pkg>`` -> its folder in this repository (pyproject's package-dir)."""
    cfg = tomllib.loads((repo / "pyproject.toml").read_text())
    return {k: repo / v for k, v in cfg["tool"]["setuptools"]["package-dir"].items()}


def module_files(module: str, dirs: dict[str, Path]) -> list[Path]:
    """The repository files that importing ``module`` runs: its parent packages' ``__init__.py``
    and the module itself (``x.py``, or a package's ``__init__.py``) when it is a module of the
    repository (in ``from ctxsim.scores import load``, ``ctxsim.scores.load`` is not)."""
    parts = module.split(".")
    if len(parts) < 2 or ".".join(parts[:2]) not in dirs:
        return []
    base = dirs[".".join(parts[:2])]
    files: list[Path] = []
    for depth in range(2, len(parts) + 1):
        where = base.joinpath(*parts[2:depth])
        if (where / "__init__.py").is_file():
            files.append(where / "__init__.py")
        elif depth > 2 and depth == len(parts) and where.with_suffix(".py").is_file():
            files.append(where.with_suffix(".py"))
        else:
            break
    return files


def module_path(module: str, dirs: dict[str, Path]) -> Path | None:
    """The file of a repository module (a package's ``__init__.py``), or None."""
    files = module_files(module, dirs)
    if not files:
        return None
    where = dirs[".".join(module.split(".")[:2])].joinpath(*module.split(".")[2:])
    return files[-1] if files[-1] in (where / "__init__.py", where.with_suffix(".py")) else None


def imported_modules(source: bytes) -> set[str]:
    """The ctxsim modules a file imports (top level or inside functions), as dotted names; for
    ``from ctxsim.a import b`` both ``ctxsim.a`` and ``ctxsim.a.b`` (b may be a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("ctxsim."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "ctxsim" or node.module.startswith("ctxsim."):
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names if a.name != "*")
    return out


def stage_sources(
    module: str, extra: tuple[str, ...] = (), read: Reader = _read, repo: Path = REPO
) -> list[Path]:
    """Every repository file a stage module (``ctxsim.tasks.x``) depends on: its own file(s),
    the modules in ``extra`` (``Stage.sources``) and their transitive ctxsim imports."""
    dirs = package_dirs(repo)
    todo: list[Path] = []
    for name in (module, *extra):
        path = module_path(name, dirs)
        if path is None:
            raise ValueError(f"{name!r} is not a module of this repository")
        todo += module_files(name, dirs)
        if path.name == "__init__.py":  # a package: all of its files
            todo += sorted(path.parent.rglob("*.py"))
    seen: set[Path] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for name in imported_modules(read(f)):
            todo += module_files(name, dirs)
    return sorted(seen, key=lambda p: p.relative_to(repo).as_posix())


def file_hash(data: bytes) -> str:
    return hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest()[:12]


def source_hash(
    module: str, extra: tuple[str, ...] = (), read: Reader = _read, repo: Path = REPO
) -> tuple[str, dict[str, str]]:
    """(combined hash, {repo-relative path: file hash}) of a stage's sources."""
    files = {
        f.relative_to(repo).as_posix(): file_hash(read(f))
        for f in stage_sources(module, extra, read, repo)
    }
    h = hashlib.sha256()
    for rel, fh in files.items():
        h.update(f"{rel}\0{fh}\0".encode())
    return h.hexdigest()[:16], files


def stage_hash(name: str, read: Reader = _read) -> tuple[str, dict[str, str]]:
    from ctxsim.tasks import STAGES, load_stage

    return source_hash(STAGES[name].split(":")[0], tuple(load_stage(name).sources), read)


def current(read: Reader = _read) -> dict[str, dict]:
    """{stage: {"version", "source", "files": {path: hash}}} as of the working tree."""
    from ctxsim.tasks import STAGES, load_stage

    out: dict[str, dict] = {}
    for name in STAGES:
        combined, files = stage_hash(name, read)
        out[name] = {"version": load_stage(name).version, "source": combined, "files": files}
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m tests.stage_versions",
        description="Pin every stage's source hash beside its version (stage_versions.json).",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="only list the stages whose pins are stale; exit 1 if any",
    )
    args = ap.parse_args(argv)
    now = current()
    if args.check:
        pinned = json.loads(PIN_FILE.read_text())
        stale = sorted(n for n in now.keys() | pinned.keys() if now.get(n) != pinned.get(n))
        for name in stale:
            print(f"stale: {name}")
        return 1 if stale else 0
    PIN_FILE.write_text(json.dumps(now, indent=2) + "\n")
    print(f"pinned {PIN_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
