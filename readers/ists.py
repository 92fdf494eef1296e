"""Readers and a writer for SemEval-2016 Task 2 (iSTS) files.

* ``*.wa``: per pair ``<sentence id="N" ...>``, two ``// sentence`` lines, ``<source>`` and
  ``<translation>`` token lists, and ``<alignment>`` lines
  ``i j ... <==> k l ... // TYPE // SCORE // comment`` (``0`` = unaligned, ``NIL`` = no score).
* ``*.sent{1,2}.chunk.txt``: one pair per line, gold chunks as ``[ w w ] [ w ]``.
* A folder holds domains ``STSint.<split>.<domain>.{sent1,sent2,sent1.chunk,sent2.chunk}.txt`` +
  ``.wa`` (the official ``test_goldStandard`` layout); ``discover_ists`` finds them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ctxsim.models.evaluation.ists import WaAlignment, WaPair
from ctxsim.readers.tree import files_under
from ctxsim.store.atomic import write_bytes_atomic
from ctxsim.store.errors import InputError

_SENT = re.compile(r'<sentence id="([^"]*)"')
_CHUNK = re.compile(r"\[\s?(.*?)\s?\]")


class IstsFormatError(InputError):
    """A malformed iSTS file, with file and line."""


def read_wa(path: str | Path) -> list[WaPair]:
    """Parse a .wa alignment file (gold or system)."""
    path = Path(path)
    pairs: list[WaPair] = []
    cur: WaPair | None = None
    section = None
    comments: list[str] = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            m = _SENT.search(line)
            if m:
                try:
                    cur = WaPair(int(m.group(1)), [], [])
                except ValueError:
                    raise IstsFormatError(
                        f"{path}:{lineno}: bad sentence id {m.group(1)!r}"
                    ) from None
                pairs.append(cur)
                comments = []
                section = None
                continue
            if cur is None:
                continue
            s = line.strip()
            if s in ("<source>", "<translation>", "<alignment>"):
                section = s[1:-1]
                continue
            if s.startswith("</"):
                section = None
                continue
            if section is None and s.startswith("//"):
                comments.append(s[2:].strip())
                continue
            if section in ("source", "translation") and s:
                parts = s.split(" ", 2)
                if len(parts) < 2:
                    raise IstsFormatError(f"{path}:{lineno}: bad token line {s!r}")
                (cur.tokens1 if section == "source" else cur.tokens2).append(parts[1])
            elif section == "alignment" and "<==>" in s:
                fields = [x.strip() for x in s.split("//")]
                if len(fields) < 3:
                    raise IstsFormatError(f"{path}:{lineno}: alignment needs ids // type // score")
                left, right = fields[0].split("<==>")
                try:
                    ids1 = tuple(int(x) for x in left.split())
                    ids2 = tuple(int(x) for x in right.split())
                except ValueError:
                    raise IstsFormatError(
                        f"{path}:{lineno}: non-integer token id in {s!r}"
                    ) from None
                score_s = fields[2]
                try:
                    score = None if score_s.upper() == "NIL" else float(score_s)
                except ValueError:
                    raise IstsFormatError(f"{path}:{lineno}: bad score {score_s!r}") from None
                types = tuple(t for t in fields[1].split("_") if t)
                comment = "//".join(fields[3:]) if len(fields) > 3 else ""
                cur.alignments.append(WaAlignment(ids1, ids2, types, score, comment))
    if not pairs:
        raise IstsFormatError(f"{path}: no <sentence> found")
    for p in pairs:
        if not p.tokens1 and not p.tokens2:
            raise IstsFormatError(f"{path}: pair {p.id} has no <source>/<translation> tokens")
    return pairs


def write_wa(pairs: list[WaPair], path: str | Path) -> None:
    """Write alignments in the official format (readable by evalF1.pl)."""
    out = []
    for p in pairs:
        out.append(f'<sentence id="{p.id}" status="">')
        out.append("// " + " ".join(p.tokens1))
        out.append("// " + " ".join(p.tokens2))
        out.append("<source>")
        out += [f"{i} {t} : " for i, t in enumerate(p.tokens1, 1)]
        out.append("</source>")
        out.append("<translation>")
        out += [f"{i} {t} : " for i, t in enumerate(p.tokens2, 1)]
        out.append("</translation>")
        out.append("<alignment>")
        for a in p.alignments:
            score = "NIL" if a.score is None else f"{a.score:g}"
            ids1 = " ".join(map(str, a.ids1)) or "0"
            ids2 = " ".join(map(str, a.ids2)) or "0"
            out.append(f"{ids1} <==> {ids2} // {a.type} // {score} // {a.comment}")
        out.append("</alignment>")
        out.append("</sentence>")
        out.append("")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # evaluate writes these before its report
    write_bytes_atomic(path, ("\n".join(out) + "\n").encode("utf-8"))


def read_chunks(path: str | Path) -> list[list[list[str]]]:
    """Chunked sentences: one list of chunks (lists of words) per line.

    Text outside brackets (a known defect of answers-students lines 252, 287, 315) becomes a chunk
    of its own so the words still map one-to-one onto the sentence.
    """
    path = Path(path)
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            chunks: list[list[str]] = []
            pos = 0
            for m in _CHUNK.finditer(line):
                outside = line[pos : m.start()].split()
                if outside:
                    chunks.append(outside)
                inner = m.group(1).split()
                if inner:
                    chunks.append(inner)
                pos = m.end()
            tail = line[pos:].split()
            if tail:
                chunks.append(tail)
            if not chunks:
                raise IstsFormatError(f"{path}:{lineno}: no chunk found")
            out.append(chunks)
    return out


@dataclass
class IstsDomain:
    """One iSTS domain: gold pairs (from .wa) with their gold chunking."""

    name: str
    gold: list[WaPair]
    chunks1: list[list[list[str]]]
    chunks2: list[list[list[str]]]
    wa_path: Path


def discover_ists(root: str | Path) -> list[IstsDomain]:
    """Find every domain with a .wa and both chunk files under ``root`` (recursively)."""
    root = Path(root)
    domains = []
    for wa in files_under(root, "*.wa"):
        stem = wa.name[: -len(".wa")]
        c1 = wa.with_name(f"{stem}.sent1.chunk.txt")
        c2 = wa.with_name(f"{stem}.sent2.chunk.txt")
        if not (c1.exists() and c2.exists()):
            continue
        gold = read_wa(wa)
        ch1, ch2 = read_chunks(c1), read_chunks(c2)
        if not len(gold) == len(ch1) == len(ch2):
            raise IstsFormatError(
                f"{wa}: {len(gold)} pairs but {len(ch1)} / {len(ch2)} chunk lines in {c1.name}, "
                f"{c2.name}"
            )
        name = stem.split(".")[-1]
        domains.append(IstsDomain(name, gold, ch1, ch2, wa))
    return domains
