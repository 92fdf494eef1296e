"""Find domain evaluation files in a folder: pair classification and question-to-answer retrieval.

The same folder that holds STS sets may hold these; ``discover_domain(root)`` finds, at any depth:

* ``*.pairs.tsv``: header ``sentence1<TAB>sentence2<TAB>label`` (quoting off, as the STS TSVs),
  label 0 or 1 (MTEB PairClassification: e.g. MEDIQA RQE, 1 = answering the second question
  answers the first);
* ``*_qa.jsonl``: one object a line with ``question`` and ``answer`` (``qid`` optional; with a
  ``doc`` field the id is ``doc/qid``, as MedQuAD numbers questions per source document; ids are
  unique): the file's answers are the corpus, one document per line (an answer text that two
  questions share is two documents with the same text), each question's own answer the one
  relevant document (MTEB Retrieval, e.g. MedQuAD dev QA).

A malformed file stops with one line naming the file and line (``DomainFormatError``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ctxsim.readers.sts_formats import tsv_rows
from ctxsim.readers.tree import files_under
from ctxsim.store.errors import InputError

PAIRS_HEADER = ["sentence1", "sentence2", "label"]
PAIRS_GLOB = "*.pairs.tsv"
QA_GLOB = "*_qa.jsonl"


class DomainFormatError(InputError):
    """A malformed pair-classification or QA file, with file and line."""


@dataclass
class PairSet:
    """Sentence pairs with a binary label."""

    name: str
    s1: list[str]
    s2: list[str]
    labels: list[int]
    path: str = ""

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class QaSet:
    """Questions, the answer corpus, and for each question the index of its answer."""

    name: str
    qids: list[str]
    questions: list[str]
    answers: list[str]  # one document per line of the file
    relevant: list[int]  # question i's answer is answers[relevant[i]]
    path: str = ""
    meta: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.questions)


def set_name(path: Path, root: Path, suffix: str) -> str:
    """A set's name: its path under ``root`` without ``suffix`` ("sub/NAME" at depth)."""
    rel = path.relative_to(root) if path.is_relative_to(root) else Path(path.name)
    stem = rel.name[: -len(suffix)] if rel.name.endswith(suffix) else rel.stem
    return "/".join([*rel.parent.parts, stem]) if rel.parent.parts else stem


def read_pairs(path: str | Path, name: str | None = None) -> PairSet:
    """A ``*.pairs.tsv`` file; every row needs two non-empty sentences and a 0/1 label."""
    path = Path(path)
    s1: list[str] = []
    s2: list[str] = []
    labels: list[int] = []
    rows = tsv_rows(path, DomainFormatError)
    header = next(rows, (1, None))[1]
    if header is None or [h.strip() for h in header] != PAIRS_HEADER:
        raise DomainFormatError(
            f"{path}:1: header must be {' '.join(PAIRS_HEADER)} (tab-separated), got {header!r}"
        )
    for lineno, row in rows:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 3:
            raise DomainFormatError(
                f"{path}:{lineno}: expected 3 tab-separated fields, got {len(row)}"
            )
        a, b, lab = (c.strip() for c in row)
        if not a or not b:
            raise DomainFormatError(f"{path}:{lineno}: empty sentence")
        if lab not in ("0", "1"):
            raise DomainFormatError(f"{path}:{lineno}: label {lab!r} is not 0 or 1")
        s1.append(a)
        s2.append(b)
        labels.append(int(lab))
    if not labels:
        raise DomainFormatError(f"{path}: no pairs")
    if len(set(labels)) < 2:
        raise DomainFormatError(f"{path}: every label is {labels[0]}; AP needs both classes")
    return PairSet(name or path.name, s1, s2, labels, str(path))


def read_qa(path: str | Path, name: str | None = None) -> QaSet:
    """A ``*_qa.jsonl`` file; ``question`` and ``answer`` are non-empty strings, ``qid`` unique."""
    path = Path(path)
    qids: list[str] = []
    questions: list[str] = []
    answers: list[str] = []
    relevant: list[int] = []
    seen: dict[str, int] = {}
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as e:
                raise DomainFormatError(f"{path}:{lineno}: not UTF-8 ({e.reason})") from None
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DomainFormatError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise DomainFormatError(f"{path}:{lineno}: expected a JSON object")
            for key in ("question", "answer"):
                v = rec.get(key)
                if not isinstance(v, str) or not v.strip():
                    raise DomainFormatError(
                        f"{path}:{lineno}: field {key!r} is missing or not a non-empty string"
                    )
            qid = str(rec.get("qid", f"line{lineno}"))
            if rec.get("doc") is not None:
                qid = f"{rec['doc']}/{qid}"
            if qid in seen:
                raise DomainFormatError(
                    f"{path}:{lineno}: duplicate question id {qid!r} (first on line {seen[qid]})"
                )
            seen[qid] = lineno
            qids.append(qid)
            questions.append(rec["question"].strip())
            relevant.append(len(answers))
            answers.append(rec["answer"].strip())
    if not questions:
        raise DomainFormatError(f"{path}: no questions")
    return QaSet(name or path.name, qids, questions, answers, relevant, str(path))


def discover_domain(root: str | Path) -> tuple[list[PairSet], list[QaSet]]:
    """Every pair-classification and QA file under ``root``, sorted by path."""
    root = Path(root).expanduser()
    if not root.is_dir():
        return [], []
    pairs = [read_pairs(p, set_name(p, root, ".pairs.tsv")) for p in files_under(root, PAIRS_GLOB)]
    qa = [read_qa(p, set_name(p, root, ".jsonl")) for p in files_under(root, QA_GLOB)]
    return pairs, qa


def pair_sets_as_sts(root: str | Path) -> list:
    """Pair-classification files (``NAME.SPLIT.pairs.tsv``) as gold-scored sets
    ``NAME.SPLIT`` with gold 0/1: Origin (Eq. 4) of a domain's labelled pairs (MEDIQA RQE)."""
    from ctxsim.readers.sts import StsSet

    out = []
    for ps in discover_domain(root)[0]:
        stem = Path(ps.path).name[: -len(".pairs.tsv")]
        dataset, _, subset = stem.partition(".")
        gold = [float(y) for y in ps.labels]
        out.append(StsSet(dataset, subset or "all", ps.s1, ps.s2, gold, ps.path))
    return out
