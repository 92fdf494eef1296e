"""Every file in bench/results is in bench/results/INDEX.md, superseded ones name their
successor, and new results record the commit that produced them."""

from __future__ import annotations

import json
import re
from pathlib import Path


def test_every_result_file_is_in_the_index() -> None:
    from bench.results_index import missing_from_index

    missing = missing_from_index()
    assert not missing, f"not in bench/results/INDEX.md (python -m bench.results_index): {missing}"


def test_superseded_results_name_a_current_successor() -> None:
    from bench.results_index import RESULTS, SUPERSEDED_DIR, result_files, superseded_register

    register = superseded_register()
    moved = {p.name for p in result_files() if SUPERSEDED_DIR in p.parents}
    assert moved == set(register), "superseded/ and superseded/SUPERSEDED.json disagree"
    for name, entry in register.items():
        assert (RESULTS / entry["by"]).is_file(), f"{name}: successor {entry['by']} missing"
        assert entry["why"].strip(), name


def test_write_results_records_the_commit(tmp_path: Path) -> None:
    from bench.harness import git_commit, write_results

    jpath, mpath = write_results("x", [{"a": 1}], {"command": "python -m bench.x"}, tmp_path)
    recorded = json.loads(jpath.read_text())["meta"].get("git_commit")
    assert recorded == git_commit()
    if recorded:  # a git checkout
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", recorded)
        assert recorded in mpath.read_text()


def test_bench_readme_names_every_module_and_make_bench_runs_every_speed_benchmark() -> None:
    from bench.run_all import BENCHES

    bench = Path(__file__).resolve().parents[2] / "bench"
    readme = (bench / "README.md").read_text()
    modules = {f"bench.{p.stem}" for p in bench.glob("bench_*.py")}
    unnamed = sorted(m for m in modules if f"`{m}`" not in readme)
    assert not unnamed, f"bench/README.md does not name {unnamed}"
    speed = readme.split("## Speed benchmarks", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"`(bench\.bench_\w+)`", speed)) == set(BENCHES)
