"""A stage's code cannot change without a decision about its `version` (tests/stage_versions.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.stage_versions import (
    PIN_FILE,
    REPO,
    _read,
    current,
    imported_modules,
    stage_hash,
    stage_sources,
)


def _changed_files(old: dict[str, str], new: dict[str, str]) -> list[str]:
    return sorted(f for f in old.keys() | new.keys() if old.get(f) != new.get(f))


def test_every_stage_source_is_pinned_to_its_version() -> None:
    pinned = json.loads(PIN_FILE.read_text())
    now = current()
    assert sorted(now) == sorted(pinned), "stages added or removed: python -m tests.stage_versions"
    stale = []
    for name, cur in now.items():
        old = pinned[name]
        if (cur["version"], cur["source"]) == (old["version"], old["source"]):
            continue
        changed = ", ".join(_changed_files(old.get("files", {}), cur["files"]))
        if cur["version"] == old["version"]:
            stale.append(
                f"{name}: sources changed ({changed}) but version is still {cur['version']!r}; "
                "bump the stage's `version` if its output can change (else it is a refactor), "
                "then re-pin with `python -m tests.stage_versions`"
            )
        else:
            stale.append(f"{name}: version {old['version']} -> {cur['version']}; re-pin")
    assert not stale, "\n".join(stale)


def test_a_change_in_scores_fires_the_guard_for_score() -> None:
    """Commit 8e28635 changed int8 scoring in scores/eq3.py and the guard, then hashing only
    tasks/, did not fire. The hash of a modified copy (the real file is not touched) differs."""
    eq3 = REPO / "scores" / "eq3.py"

    def edited(path: Path) -> bytes:
        data = _read(path)
        return data + b"\n# an edit\n" if path == eq3 else data

    before, files = stage_hash("score")
    after, files_after = stage_hash("score", read=edited)
    assert "scores/eq3.py" in files
    assert after != before
    assert _changed_files(files, files_after) == ["scores/eq3.py"]
    # a stage that does not reach scores/ keeps its hash
    assert stage_hash("contexts", read=edited)[0] == stage_hash("contexts")[0]


def test_sources_follow_imports_inside_functions_and_declared_sources() -> None:
    src = (
        b"def f():\n    from ctxsim.scores import eq3\n"
        b"    import ctxsim.models.training.wordpiece\n"
    )
    assert imported_modules(src) == {
        "ctxsim.scores",
        "ctxsim.scores.eq3",
        "ctxsim.models.training.wordpiece",
    }
    rel = {p.relative_to(REPO).as_posix() for p in stage_sources("ctxsim.tasks.contexts")}
    assert "scores/eq3.py" not in rel and "tasks/contexts.py" in rel
    rel = {
        p.relative_to(REPO).as_posix()
        for p in stage_sources("ctxsim.tasks.contexts", ("ctxsim.scores.eq3",))
    }
    assert {"scores/eq3.py", "scores/__init__.py"} <= rel
