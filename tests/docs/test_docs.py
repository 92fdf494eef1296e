"""The documentation cannot rot: mkdocs builds it strictly (every page, link and anchor), the
generated stage reference matches the code, and the README's links point at files that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_mkdocs_build_is_strict_clean(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[dev]')")
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    assert (tmp_path / "index.html").exists()


def test_stage_reference_is_generated_from_the_code() -> None:
    res = subprocess.run(
        [sys.executable, "docs/gen_stages.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr


def test_readme_is_a_front_door_whose_links_resolve() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in links if not re.match(r"[a-z]+:|#", t)]
    assert local
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing, f"README links to missing files: {missing}"
    anchors = [t[1:] for t in links if t.startswith("#")]
    headings = {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", text, flags=re.M)
    }
    assert not set(anchors) - headings, set(anchors) - headings


def test_readme_pipeline_table_names_every_stage_its_module_and_routes() -> None:
    """A stage added to STAGES without its README row (module, routes) fails here, as `embed`
    was missing from the table before."""
    from ctxsim.tasks import STAGES

    text = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| \d+ \| `(\w+)` \| `([^`]+)` \|.*\| (\w+|-) \| (\w+|-) \|$", text, re.M)
    by_stage = {name: (module, lm, enc) for name, module, lm, enc in rows}
    assert list(by_stage) == list(STAGES), "the README's pipeline table lists STAGES in order"
    for name, (module, _, _) in by_stage.items():
        assert (REPO / module).exists(), f"README: {name}'s module {module} does not exist"
        assert STAGES[name].split(":")[0].replace("ctxsim.", "").replace(".", "/") in module
    assert by_stage["embed"][1:] == ("-", "yes") and by_stage["select"][1:] == ("yes", "-")
