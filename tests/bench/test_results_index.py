"""Every file in bench/results is in bench/results/INDEX.md, superseded ones name their
successor, and new results record the commit that produced them."""

from __future__ import annotations

import json
import re
import subprocess
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


def _shows_cells(index_text: str) -> dict[str, str]:
    """Result name -> its 'what it shows' cell (the sixth column) in an index text."""
    out = {}
    for line in index_text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            out[cells[0].strip("`")] = cells[5]
    return out


def _says_nothing(text: str) -> bool:
    """An empty cell, the old fallback, or a fragment cut from the file's text."""
    return (
        not text.strip()
        or text.startswith("benchmark tables of")
        or text.startswith(("Command:", "Setup:", "Labels:", "Plots:"))
        or "**" in text
        or bool(re.search(r"\(?Eq$", text))
        or text.endswith("...")  # a long note cut at 200 characters
    )


def test_every_index_row_says_what_the_result_shows() -> None:
    from bench.results_index import render

    empty = sorted(k for k, v in _shows_cells(render()).items() if _says_nothing(v))
    assert not empty, (
        "these results do not say what they show: add one sentence each, with the headline "
        f"figure, to bench/results/SHOWS.json: {empty}"
    )


def test_the_check_catches_a_result_without_a_sentence(tmp_path: Path, monkeypatch) -> None:
    import bench.results_index as ri

    (tmp_path / "new_result.md").write_text("# Benchmark: new_result\n\n| a |\n|---|\n| 1 |\n")
    (tmp_path / "new_result.json").write_text('{"name": "new_result", "meta": {}}')
    monkeypatch.setattr(ri, "RESULTS", tmp_path)
    monkeypatch.setattr(ri, "SHOWS", tmp_path / "SHOWS.json")
    assert ri.shows(ri.result_files()) == ""
    assert _says_nothing(ri.shows(ri.result_files()))
    (tmp_path / "SHOWS.json").write_text('{"new_result": "x is 2x faster than y"}')
    assert ri.shows(ri.result_files()) == "x is 2x faster than y"


def test_shows_register_names_only_existing_results() -> None:
    from bench.results_index import result_files, result_key, shows_register

    keys = {result_key(p) for p in result_files()}
    stale = sorted(set(shows_register()) - keys)
    assert not stale, f"bench/results/SHOWS.json names results that do not exist: {stale}"


def test_bench_readme_says_whether_each_bench_is_live_or_finished() -> None:
    bench = Path(__file__).resolve().parents[2] / "bench"
    readme = (bench / "README.md").read_text()
    table = readme.split("## Live tools and finished experiments", 1)[1].split("\n## ", 1)[0]
    kind: dict[str, list[str]] = {}
    for row in table.splitlines():
        cells = row.split(" | ")
        if row.startswith("| `bench.") and len(cells) > 1:
            for mod in re.findall(r"`(bench\.(?:archive\.)?bench_\w+)`", cells[0]):
                kind.setdefault(mod, []).append(cells[1].split(":")[0])
    live = {f"bench.{p.stem}" for p in bench.glob("bench_*.py")}
    from bench.results_index import removed_benches

    finished = {f"bench.archive.{p.stem}" for p in (bench / "archive").glob("bench_*.py")}
    finished |= {f"bench.archive.{name}" for name in removed_benches()}
    assert set(kind) == live | finished, f"not classified: {sorted(live | finished - set(kind))}"
    # a live tool sits in bench/, a finished experiment in bench/archive/
    assert all(kind[m] == ["live"] for m in live), {m: kind[m] for m in live}
    assert all(kind[m] == ["finished"] for m in finished), {m: kind[m] for m in finished}


def test_every_index_command_names_a_module_that_exists() -> None:
    """A bench moved to bench/archive/ keeps its results' commands runnable: the index names it
    where it is now (python -m bench.archive.bench_X)."""
    import importlib.util

    from bench.results_index import removed_benches, render

    mods = set(re.findall(r"-m (bench\.[\w.]+)", render()))
    assert mods, "no command found in the index"
    removed = {f"bench.archive.{name}" for name in removed_benches()}
    gone = sorted(m for m in mods - removed if importlib.util.find_spec(m) is None)
    assert not gone, f"bench/results/INDEX.md runs modules that do not exist: {gone}"


def test_a_command_of_an_archived_bench_names_the_archive(tmp_path: Path, monkeypatch) -> None:
    import bench.results_index as ri

    (tmp_path / "bench_old.py").write_text("")
    monkeypatch.setattr(ri, "ARCHIVE", tmp_path)
    cmd = "python -m bench.bench_old --root /tmp/x/root --against bench.bench_old_two"
    assert ri.portable(cmd) == (
        "python -m bench.archive.bench_old --root ROOT --against bench.bench_old_two"
    )


def test_a_removed_bench_command_names_the_commit_that_has_its_code(tmp_path, monkeypatch) -> None:
    import json

    import bench.results_index as ri

    (tmp_path / "REMOVED.json").write_text(json.dumps({"bench_gone": {"commit": "abc1234"}}))
    monkeypatch.setattr(ri, "ARCHIVE", tmp_path)
    monkeypatch.setattr(ri, "REMOVED", tmp_path / "REMOVED.json")
    assert ri.portable("python -m bench.bench_gone --root /tmp/q/root") == (
        "python -m bench.archive.bench_gone --root ROOT"
        " (code at abc1234: git show abc1234:bench/archive/bench_gone.py)"
    )


def test_removed_benches_are_gone_and_their_commit_has_them() -> None:
    from bench.results_index import ARCHIVE, removed_benches

    root = ARCHIVE.parents[1]
    shallow = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=root, capture_output=True, text=True
    )
    for name, commit in removed_benches().items():
        assert not (ARCHIVE / f"{name}.py").exists(), f"{name} is listed as removed but exists"
        out = subprocess.run(
            ["git", "cat-file", "-e", f"{commit}:bench/archive/{name}.py"],
            cwd=root,
            capture_output=True,
        )
        if shallow.stdout.strip() != "false":  # a shallow clone (CI) lacks old commits
            continue
        assert out.returncode == 0, f"{commit} has no bench/archive/{name}.py"
