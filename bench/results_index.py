"""Write bench/results/INDEX.md: every result file with its command, commit, date, status and
where the documentation cites it.

    python -m bench.results_index            # rewrite bench/results/INDEX.md
    python -m bench.results_index --check    # exit 1 when a result file is missing from it

Results are rewritten in place and siblings accumulate, so a reader cannot tell from the folder
which file is current. The index says so: a result moved under `bench/results/superseded/` is
superseded, by the file and for the reason `superseded/SUPERSEDED.json` records; every other one
is current. The command comes from the result's JSON (`meta.command`, written by
`harness.write_results`), the commit from the JSON (`meta.git_commit`, recorded since the index
exists) or else from git (the last commit that changed the file), the date from git.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
INDEX = RESULTS / "INDEX.md"
SUPERSEDED_DIR = RESULTS / "superseded"
SUPERSEDED = SUPERSEDED_DIR / "SUPERSEDED.json"
#: result name -> one sentence saying what it shows, with its headline figure (written by hand,
#: preferred over the note the result recorded)
SHOWS = RESULTS / "SHOWS.json"
#: finished experiments' code (``python -m bench.archive.bench_X``); their results stay here
ARCHIVE = REPO / "bench" / "archive"
#: finished experiments whose code was removed once replaced: name -> the commit that has it
REMOVED = ARCHIVE / "REMOVED.json"
#: where results are cited: the front door, the docs, the configs' comments, the bench README
CITING = ["README.md", "docs/*.md", "configs/*.yaml", "bench/README.md"]
_CITED = re.compile(r"(?:\.\.\.)?[\w*.-]*\w\.(?:md|json|png|log)\b")
_MD_COMMAND = re.compile(r"\*\*command\*\*: (.+)")


def result_files() -> list[Path]:
    """Every file under bench/results except the index and the superseded register."""
    skip = {INDEX, SUPERSEDED, SHOWS}
    return sorted(p for p in RESULTS.rglob("*") if p.is_file() and p not in skip)


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def _json_of(path: Path) -> dict:
    sibling = path if path.suffix == ".json" else path.with_suffix(".json")
    if path.suffix == ".png":  # <name>_labels.png belongs to <name>.json
        sibling = path.with_name(path.name.removesuffix("_labels.png") + ".json")
    try:
        doc = json.loads(sibling.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def command_of(path: Path) -> str:
    doc = _json_of(path)
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    cmd = meta.get("command") or doc.get("command")
    if cmd:
        return " ".join(cmd) if isinstance(cmd, list) else str(cmd)
    md = path.with_suffix(".md")
    if md.exists():
        text = md.read_text(errors="replace")
        m = _MD_COMMAND.search(text)
        if m:
            return m.group(1).strip().strip("`")
    return ""


def commit_and_date(path: Path) -> tuple[str, str]:
    doc = _json_of(path)
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    recorded = meta.get("git_commit") or doc.get("git_commit")
    # the last change of content: a file moved under superseded/ is looked up at its old path
    # (git's --follow guesses renames between look-alike results, so it is not used)
    where = RESULTS / path.name if SUPERSEDED_DIR in path.parents else path
    log = _git("log", "-1", "--diff-filter=AM", "--format=%h %ad", "--date=short", "--", str(where))
    commit, _, date = log.partition(" ")
    if recorded:
        commit = str(recorded)[:12]
    return commit or "not committed", date or "not committed"


def citations() -> dict[str, list[tuple[str, str]]]:
    """Cited name or pattern -> [(citing file, name as written)]."""
    out: dict[str, list[tuple[str, str]]] = {}
    for pattern in CITING:
        for f in sorted(REPO.glob(pattern)):
            for token in set(_CITED.findall(f.read_text(errors="replace"))):
                name = token.rsplit("/", 1)[-1]
                name = "*" + name[3:] if name.startswith("...") else name
                out.setdefault(name, []).append((str(f.relative_to(REPO)), token))
    return out


def cited_in(path: Path, cites: dict[str, list[tuple[str, str]]]) -> list[str]:
    """The documents citing ``path`` (by its name, its .md/.json sibling, or a pattern)."""
    stem = path.name.removesuffix("_labels.png") if path.suffix == ".png" else path.stem
    names = {path.name, f"{stem}.md", f"{stem}.json"}
    where: set[str] = set()
    for pattern, places in cites.items():
        if any(fnmatch.fnmatchcase(n, pattern) for n in names):
            where.update(p for p, _ in places)
    return sorted(where)


def superseded_register() -> dict[str, dict[str, str]]:
    if not SUPERSEDED.exists():
        return {}
    return json.loads(SUPERSEDED.read_text())


def status_of(path: Path, register: dict[str, dict[str, str]]) -> str:
    if SUPERSEDED_DIR not in path.parents:
        return "current"
    entry = register.get(path.name)
    if entry is None:
        raise SystemExit(f"{path} is under superseded/ but not in {SUPERSEDED.name}")
    return f"superseded by `{entry['by']}`: {entry['why']}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


#: a machine's scratch path in a recorded command (``/tmp/i17/root``) or the checkout's own
#: absolute path: the index shows ``ROOT`` / a relative path, the same on every machine
_SCRATCH = re.compile(r"(?<![\w.])/tmp/[^\s'\"`]*")
_CHECKOUT = re.compile(r"(?<![\w.])/(?:work|home|root)/(?:[^\s'\"`]*/)?main/")


def removed_benches() -> dict[str, str]:
    """Finished experiments whose code was removed: bench name -> the commit that still has it."""
    if not REMOVED.exists():
        return {}
    return {name: entry["commit"] for name, entry in json.loads(REMOVED.read_text()).items()}


def portable(cmd: str) -> str:
    """A recorded command without machine paths (scratch roots become ``ROOT``), naming a bench
    moved to ``bench/archive/`` where it is now, or the commit that has a removed one's code."""
    cmd = _CHECKOUT.sub("", _SCRATCH.sub("ROOT", cmd))
    gone = removed_benches()
    for name in sorted({p.stem for p in ARCHIVE.glob("bench_*.py")} | set(gone)):
        cmd = re.sub(rf"\bbench\.(?:archive\.)?{name}\b", f"bench.archive.{name}", cmd)
    for name, commit in sorted(gone.items()):
        if f"bench.archive.{name}" in cmd:
            cmd += f" (code at {commit}: git show {commit}:bench/archive/{name}.py)"
    return cmd


def result_key(path: Path) -> str:
    """One result = the files of one stem (``x.md``, ``x.json``, ``x_labels.png``)."""
    rel = path.relative_to(RESULTS)
    stem = path.name.removesuffix("_labels.png") if path.suffix == ".png" else path.stem
    return (rel.parent / stem).as_posix()


_SHOWS_SKIP = ("Machine:", "Env:", "- **", "|", "Generated", "#", "_no rows_", "load ")


def shows_register() -> dict[str, str]:
    """``bench/results/SHOWS.json``: result name (as in the index) -> what it shows."""
    if not SHOWS.exists():
        return {}
    return json.loads(SHOWS.read_text())


def shows(files: list[Path], register: dict[str, str] | None = None) -> str:
    """What a result shows, in one sentence: its sentence in SHOWS.json, else its recorded
    ``shows`` or ``note``, else the first sentence of prose in its .md; empty when none (the
    index test fails on an empty one)."""
    register = shows_register() if register is None else register
    if files and (written := register.get(result_key(files[0]))):
        return written
    doc = next((d for f in files if (d := _json_of(f))), {})
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    text = str(meta.get("shows") or meta.get("note") or "")
    md = next((f for f in files if f.suffix == ".md"), None)
    if not text and md is not None:
        for line in md.read_text(errors="replace").splitlines():
            line = line.strip()
            if line and not line.startswith(_SHOWS_SKIP):
                text = line
                break
    text = text.split(". ")[0].rstrip(".")
    return text if len(text) <= 200 else text[:197].rstrip() + "..."


def render() -> str:
    cites = citations()
    register = superseded_register()
    written = shows_register()
    files = result_files()
    groups: dict[str, list[Path]] = {}
    for path in files:
        groups.setdefault(result_key(path), []).append(path)
    rows = []
    for key, group in groups.items():
        first = group[0]
        commit, date = commit_and_date(first)
        cmd = next((c for p in group if (c := command_of(p))), "")
        where = sorted({c for p in group for c in cited_in(p, cites)})
        kinds = " ".join(f"`{p.name[len(Path(key).name) :]}`" for p in group)
        rows.append(
            f"| `{key}` | {kinds} | {_cell(status_of(first, register))} | {date} | "
            f"`{commit[:7]}` | {_cell(shows(group, written))} | "
            + (f"`{_cell(portable(cmd))}`" if cmd else "written by hand (see the file)")
            + f" | {', '.join(where) or '-'} |"
        )
    n_sup = sum(SUPERSEDED_DIR in g[0].parents for g in groups.values())
    head = [
        "# Index of results",
        "",
        "Generated by `python -m bench.results_index`; do not edit by hand",
        "(`tests/bench/test_results_index.py` fails when a file in `bench/results/` is missing",
        "here). One row per result: the files of one name (`.md` table, `.json` data, plots).",
        "Status: *current*, or superseded",
        "(moved to `superseded/`, with the file that replaces it and why, from",
        "`superseded/SUPERSEDED.json`). Commit: recorded by `harness.write_results`, or else the",
        "last commit that changed the file; date: that commit's. What it shows: its sentence in",
        "`SHOWS.json`, else its recorded note or first line. Command: `ROOT` is any scratch",
        "directory (an artefact root or output folder of the run); results written by hand say",
        "how they were made in their text. Cited in: README, docs, configs and",
        "`bench/README.md` naming the file (or its .md/.json sibling). The figures themselves",
        "are discussed in `docs/results.md`.",
        "",
        f"{len(groups)} results ({len(files)} files): {len(groups) - n_sup} current, "
        f"{n_sup} superseded.",
        "",
        "| result | files | status | date | commit | what it shows | command | cited in |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + rows) + "\n"


def missing_from_index() -> list[str]:
    """Result files the index does not list (a new result written without regenerating it)."""
    text = INDEX.read_text() if INDEX.exists() else ""
    listed: dict[str, str] = {
        m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| ([^|]*) \|", text, re.M)
    }
    out = []
    for p in result_files():
        key = result_key(p)
        if key not in listed or f"`{p.name[len(Path(key).name) :]}`" not in listed[key]:
            out.append(p.relative_to(RESULTS).as_posix())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a result is not indexed")
    args = ap.parse_args()
    if args.check:
        missing = missing_from_index()
        if missing:
            print(f"not in {INDEX}: {', '.join(missing)}", file=sys.stderr)
            print("run: python -m bench.results_index", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(render())
    print(f"wrote {INDEX}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
