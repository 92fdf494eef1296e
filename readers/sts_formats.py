"""STS files by format: the uniform TSV, the organisers' originals (STS12-16 input + gold), STSb's
``sts-*.csv`` and SICK's ``SICK_<split>.txt``. Each reader returns (s1, s2, gold) and names file
and line in a :class:`StsFormatError` for a malformed row, an empty sentence (Origin labelled one
0.53, and every encoder scores it), or a score that is not a finite number or lies outside the
set's scale (:data:`SCALES`: 0-5, SICK 1-5); a TSV of a set of another name may use its own
scale, so a score outside 0-5 there is a warning naming file and line.
TSVs are read with quoting off (many sentences start with a double quote) and STSb's CSV is split
on TABs, never by a CSV parser.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator
from pathlib import Path

from ctxsim.store.errors import InputError

TSV_HEADER = ["sentence1", "sentence2", "score"]
#: gold scales of the known sets (the organisers' guidelines): a score outside one is a typo
SCALES: dict[str, tuple[float, float]] = {
    **{f"STS{y}": (0.0, 5.0) for y in range(12, 17)},
    "STSb": (0.0, 5.0),
    "SICK-R": (1.0, 5.0),
}
#: the STS scale, which a set of another name is warned against (it may use its own)
STS_SCALE = (0.0, 5.0)
_log = logging.getLogger("ctxsim.readers.sts")


class StsFormatError(InputError):
    """A malformed STS file, with file and line."""


def _float(
    value: str, path: Path, lineno: int, scale: tuple[float, float] | None = STS_SCALE
) -> float:
    """A gold score; ``nan``/``inf`` parse as floats but would silently turn Spearman into NaN.
    One outside ``scale`` is refused (None: warned against the STS scale)."""
    try:
        score = float(value)
    except ValueError:
        raise StsFormatError(f"{path}:{lineno}: score {value!r} is not a number") from None
    if not math.isfinite(score):
        raise StsFormatError(f"{path}:{lineno}: score {value!r} is not a finite number")
    lo, hi = scale or STS_SCALE
    if not lo <= score <= hi:
        where = f"{path}:{lineno}: score {value!r} is outside the gold scale {lo:g}-{hi:g}"
        if scale is not None:
            raise StsFormatError(f"{where}; fix the row (a typo?) or remove it")
        _log.warning("%s of STS; if this set uses another scale, ignore this", where)
    return score


def _sentences(a: str, b: str, path: Path, lineno: int) -> tuple[str, str]:
    """The two sentences of a row, stripped; an empty one is refused (it would be scored)."""
    a, b = a.strip(), b.strip()
    for name, text in (("sentence1", a), ("sentence2", b)):
        if not text:
            raise StsFormatError(f"{path}:{lineno}: {name} is empty; fix the row or remove it")
    return a, b


#: longest field a TSV reader takes (csv's default limit): a longer one is a missing TAB or line end
MAX_FIELD_CHARS = 131_072


def tsv_rows(path: Path, error: type[InputError] = InputError) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of a TAB-separated file, quoting off (as csv's QUOTE_NONE reads
    it); a UTF-8 byte order mark (what spreadsheet programs write) is read as nothing. Bytes
    that are not UTF-8 or a field over ``MAX_FIELD_CHARS`` raise ``error`` naming file and line
    (decoded line by line, so the line is the right one). Lines end at \\n, \\r\\n or \\r, as
    Python's universal newlines (what csv read) end them."""
    data = Path(path).read_bytes()
    lines = re.split(rb"\r\n|\r|\n", data)
    if lines and not lines[-1]:
        lines.pop()  # the final line end
    for lineno, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise error(
                f"{path}:{lineno}: not UTF-8 (byte 0x{raw[e.start]:02x}: {e.reason}); "
                "save it as UTF-8"
            ) from None
        if lineno == 1:
            line = line.removeprefix("\ufeff")
        row = line.split("\t") if line else []
        if any(len(c) > MAX_FIELD_CHARS for c in row):
            raise error(
                f"{path}:{lineno}: a field of {max(map(len, row))} characters (at most "
                f"{MAX_FIELD_CHARS}): is a TAB or line end missing?"
            )
        yield lineno, row


def read_tsv(
    path: str | Path, scale: tuple[float, float] | None = STS_SCALE
) -> tuple[list[str], list[str], list[float]]:
    """Read a uniform TSV (quoting off, header required); gold outside ``scale`` is refused
    (None: a set of its own scale, warned about outside 0-5)."""
    path = Path(path)
    s1, s2, gold = [], [], []
    rows = tsv_rows(path, StsFormatError)
    header = next(rows, (1, None))[1]
    if header is None or [h.strip() for h in header[:3]] != TSV_HEADER:
        raise StsFormatError(f"{path}:1: header must be {'<TAB>'.join(TSV_HEADER)}, got {header}")
    for lineno, row in rows:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) < 3:
            raise StsFormatError(
                f"{path}:{lineno}: expected 3 TAB-separated fields, got {len(row)}"
            )
        a, b = _sentences(row[0], row[1], path, lineno)
        s1.append(a)
        s2.append(b)
        gold.append(_float(row[2].strip(), path, lineno, scale))
    return s1, s2, gold


def write_tsv(path: str | Path, s1: list[str], s2: list[str], gold: list[float]) -> None:
    """Write a uniform TSV (LF line ends, no quoting; TABs/newlines in text are rejected)."""
    path = Path(path)
    lines = ["\t".join(TSV_HEADER)]
    for i, (a, b, g) in enumerate(zip(s1, s2, gold, strict=True)):
        if any(c in a + b for c in "\t\n\r"):
            raise StsFormatError(f"{path}: pair {i} contains a TAB or newline")
        lines.append(f"{a}\t{b}\t{g:g}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8-sig", errors="strict", newline=None) as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]


def read_sts_original(
    input_path: str | Path, gs_path: str | Path
) -> tuple[list[str], list[str], list[float]]:
    """STS12-16 input + gold files; pairs whose gold line is blank are dropped."""
    input_path, gs_path = Path(input_path), Path(gs_path)
    inputs, golds = _lines(input_path), _lines(gs_path)
    while inputs and not inputs[-1].strip():
        inputs.pop()
    while golds and not golds[-1].strip():
        golds.pop()
    if len(golds) > len(inputs):
        raise StsFormatError(f"{gs_path}: {len(golds)} gold lines but {len(inputs)} input lines")
    s1, s2, gold = [], [], []
    for lineno, (inp, g) in enumerate(zip(inputs, golds, strict=False), 1):
        if not g.strip():
            continue
        parts = inp.split("\t")
        if len(parts) < 2:
            raise StsFormatError(f"{input_path}:{lineno}: expected sentence1<TAB>sentence2")
        a, b = _sentences(parts[0], parts[1], input_path, lineno)
        s1.append(a)
        s2.append(b)
        gold.append(_float(g.strip(), gs_path, lineno))
    return s1, s2, gold


def read_stsb_csv(path: str | Path) -> tuple[list[str], list[str], list[float]]:
    """STSb ``sts-*.csv``: TAB-split genre, file, year, id, score, s1, s2[, sources]."""
    path = Path(path)
    s1, s2, gold = [], [], []
    for lineno, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 7:
            raise StsFormatError(
                f"{path}:{lineno}: expected >= 7 TAB-separated fields, got {len(parts)}"
            )
        a, b = _sentences(parts[5], parts[6], path, lineno)
        gold.append(_float(parts[4].strip(), path, lineno))
        s1.append(a)
        s2.append(b)
    return s1, s2, gold


def read_sick(path: str | Path) -> tuple[list[str], list[str], list[float]]:
    """SICK ``SICK_<split>.txt``: header, pair_ID, sentence_A, sentence_B, relatedness_score, ..."""
    path = Path(path)
    lines = _lines(path)
    if not lines or not lines[0].startswith("pair_ID"):
        raise StsFormatError(f"{path}:1: expected a SICK header starting with pair_ID")
    s1, s2, gold = [], [], []
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 4:
            raise StsFormatError(f"{path}:{lineno}: expected >= 4 TAB-separated fields")
        a, b = _sentences(parts[1], parts[2], path, lineno)
        s1.append(a)
        s2.append(b)
        gold.append(_float(parts[3].strip(), path, lineno, SCALES["SICK-R"]))
    return s1, s2, gold
