"""A stage's code cannot change without a decision about its `version` (tests/stage_versions.py)."""

from __future__ import annotations

import json

from tests.stage_versions import PIN_FILE, current


def test_every_stage_source_is_pinned_to_its_version() -> None:
    pinned = json.loads(PIN_FILE.read_text())
    now = current()
    assert sorted(now) == sorted(pinned), "stages added or removed: python -m tests.stage_versions"
    stale = []
    for name, cur in now.items():
        old = pinned[name]
        if cur == old:
            continue
        if cur["version"] == old["version"]:
            stale.append(
                f"{name}: source changed but version is still {cur['version']!r}; bump the "
                "stage's `version` if its output can change (else it is a refactor), then "
                "re-pin with `python -m tests.stage_versions`"
            )
        else:
            stale.append(f"{name}: version {old['version']} -> {cur['version']}; re-pin")
    assert not stale, "\n".join(stale)
