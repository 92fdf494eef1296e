"""Each stage module's source hash, pinned next to its `version`.

A stage's `version` is part of its fingerprint: when a code change can change the output, the
version must change too, or old artefacts are reused for new code. tests/test_stage_versions.py
fails when a stage's source changed since it was pinned, so the change gets a conscious choice:
bump `version` (output can change), or only re-pin (a refactor). Re-pin with
``python -m tests.stage_versions``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

PIN_FILE = Path(__file__).with_name("stage_versions.json")
TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"


def stage_sources(module: str) -> list[Path]:
    """The files of a stage module (`ctxsim.tasks.x`): one file, or every file of a package."""
    rel = module.removeprefix("ctxsim.tasks.").replace(".", "/")
    pkg = TASKS_DIR / rel
    if pkg.is_dir():
        return sorted(pkg.rglob("*.py"))
    return [TASKS_DIR / f"{rel}.py"]


def source_hash(module: str) -> str:
    h = hashlib.sha256()
    for f in stage_sources(module):
        h.update(f.relative_to(TASKS_DIR).as_posix().encode() + b"\0")
        h.update(f.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()[:16]


def current() -> dict[str, dict[str, str]]:
    from ctxsim.tasks import STAGES, load_stage

    return {
        name: {"version": load_stage(name).version, "source": source_hash(spec.split(":")[0])}
        for name, spec in STAGES.items()
    }


def main() -> None:
    PIN_FILE.write_text(json.dumps(current(), indent=2) + "\n")
    print(f"pinned {PIN_FILE}")


if __name__ == "__main__":
    main()
