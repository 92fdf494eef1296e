"""Figures in the docs stand on the result files they cite: every result file named from README.md
or docs/ exists in bench/results/ (or superseded/), and every decimal figure of a table row that
cites a result file is in that file (its .md or .json), at the precision quoted."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

RESULTS = REPO / "bench" / "results"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: a backticked file name with a result's suffix
_CITE = re.compile(r"`((?:bench/results/)?[\w./*-]+\.(?:md|json|png|log))`")
#: result files are snake_case (`origin_curve_cs10.md`); artefact files (`config.json`) are not
_RESULT_NAME = re.compile(r"^[a-z0-9*]+(?:_[\w.*-]+)+\.(?:md|json|png|log)$")
#: the figures a row quotes: decimals (integers are counts and settings: pairs, K, steps)
_FIGURE = re.compile(r"(?<![\w.])-?\d[\d,]*\.\d+(?![\w.])")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _resolve(name: str) -> list[Path]:
    """The files a citation names (a pattern may name several), current or superseded."""
    name = name.removeprefix("bench/results/")
    if name.startswith("..."):  # an abbreviation of the name cited just before
        return []
    return sorted(RESULTS.glob(name)) + sorted((RESULTS / "superseded").glob(name))


def _citations(doc: Path) -> list[str]:
    """Result files a doc cites: any `bench/results/...` path; bare names on the results page."""
    names = _CITE.findall(doc.read_text())
    return [
        n
        for n in names
        if n.startswith("bench/results/")
        or (doc.name == "results.md" and "/" not in n and _RESULT_NAME.match(n))
    ]


def test_every_cited_result_file_exists() -> None:
    cited = [(doc.name, n) for doc in DOCS for n in _citations(doc)]
    assert len(cited) > 50  # the results page cites its files, so this check has work to do
    missing = [f"{doc}: {n}" for doc, n in cited if not _resolve(n)]
    assert not missing, f"cited result files that do not exist: {missing}"


def _numbers(files: list[Path]) -> list[float]:
    out: list[float] = []
    for f in files:
        for path in {f, f.with_suffix(".md"), f.with_suffix(".json")}:
            if path.is_file():
                text = path.read_text(errors="replace")
                out += [float(x.replace(",", "")) for x in _NUMBER.findall(text)]
    return out


def _quoted_in(figure: str, values: list[float]) -> bool:
    """Whether a file value rounds to ``figure`` at its quoted precision (signs aside: a
    difference may be quoted as a loss)."""
    text = figure.replace(",", "").lstrip("-")
    tol = 0.5 * 10 ** -len(text.split(".")[1]) + 1e-9
    return any(abs(v - float(text)) <= tol for v in values)


def _table_rows(doc: Path) -> list[tuple[int, str, list[Path]]]:
    """(line, row, cited files) of each table row citing a result file; "same file" rows take the
    row above's files."""
    rows: list[tuple[int, str, list[Path]]] = []
    above: list[Path] = []
    for i, line in enumerate(doc.read_text().splitlines(), 1):
        if not line.startswith("|"):
            above = []
            continue
        files = [f for n in _CITE.findall(line) for f in _resolve(n)]
        if not files and "same file" in line:
            files = above
        if files:
            rows.append((i, line, files))
            above = files
    return rows


def test_table_figures_appear_in_the_result_files_they_cite() -> None:
    checked, wrong = 0, []
    for doc in DOCS:
        for line_no, row, files in _table_rows(doc):
            values = _numbers(files)
            for cell in row.split("|"):
                if _CITE.search(cell):  # the citation cell: file names, not figures
                    continue
                for figure in _FIGURE.findall(cell):
                    checked += 1
                    if not _quoted_in(figure, values):
                        names = [f.name for f in files]
                        wrong.append(f"{doc.name}:{line_no}: {figure} not in {names}")
    assert checked > 50, checked  # the results page's tables cite their files row by row
    assert not wrong, "\n".join(wrong)
