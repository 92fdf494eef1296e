"""STS files by format: the uniform TSV, the organisers' originals (STS12-16 input + gold), STSb's
``sts-*.csv`` and SICK's ``SICK_<split>.txt``. Each reader returns (s1, s2, gold) and names file
and line in a :class:`StsFormatError` for a malformed row or a score that is not a finite number.
TSVs are read with quoting off (many sentences start with a double quote) and STSb's CSV is split
on TABs, never by a CSV parser.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

from ctxsim.store.errors import InputError

TSV_HEADER = ["sentence1", "sentence2", "score"]


class StsFormatError(InputError):
    """A malformed STS file, with file and line."""


def _float(value: str, path: Path, lineno: int) -> float:
    """A gold score; ``nan``/``inf`` parse as floats but would silently turn Spearman into NaN."""
    try:
        score = float(value)
    except ValueError:
        raise StsFormatError(f"{path}:{lineno}: score {value!r} is not a number") from None
    if not math.isfinite(score):
        raise StsFormatError(f"{path}:{lineno}: score {value!r} is not a finite number")
    return score


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


def read_tsv(path: str | Path) -> tuple[list[str], list[str], list[float]]:
    """Read a uniform TSV (quoting off, header required)."""
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
        s1.append(row[0].strip())
        s2.append(row[1].strip())
        gold.append(_float(row[2].strip(), path, lineno))
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
        s1.append(parts[0].strip())
        s2.append(parts[1].strip())
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
        gold.append(_float(parts[4].strip(), path, lineno))
        s1.append(parts[5].strip())
        s2.append(parts[6].strip())
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
        s1.append(parts[1].strip())
        s2.append(parts[2].strip())
        gold.append(_float(parts[3].strip(), path, lineno))
    return s1, s2, gold
