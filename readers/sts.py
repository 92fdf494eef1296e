"""Find STS evaluation sets in a folder, and fetch the official releases into that layout.

``discover(root)`` returns every scored set it finds as :class:`StsSet` (dataset, subset, s1, s2,
gold). Dataset names follow the papers' tables: ``STS12`` ... ``STS16`` (subsets = the year's
genres, "all" = concatenated), ``STSb`` and ``SICK-R`` (subsets = splits). Sources, per subset:

1. the uniform TSV ``<DATASET>.<subset>.tsv`` (header ``sentence1<TAB>sentence2<TAB>score``, read
   with quoting off: many sentences start with a double quote);
2. otherwise the organisers' originals: ``STS.input.<s>.txt`` + ``STS.gs.<s>.txt`` (2012-15) and
   ``STS2016.input.<s>.txt`` + ``STS2016.gs.<s>.txt`` (blank gold = unscored, dropped, as the
   official scorer does), STSb ``sts-<split>.csv`` (TAB-split, never a CSV parser; score, s1, s2 in
   fields 5-7), SICK ``SICK_<split>.txt`` (header; CRLF in the test file).

``download(kind, dest)`` fetches the official archives with urllib (any URL urllib opens,
``file://`` included), records their sha256, unpacks them (zip / tar.gz) under
``dest/<DATASET>/original/`` and writes the uniform TSVs plus ``MANIFEST.json``.

The readers of each format are readers/sts_formats.py, the download readers/sts_download.py;
their public names are importable from here too.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxsim.readers.sts_download import SOURCES, download, fetch, unpack, verify_pinned
from ctxsim.readers.sts_formats import (
    MAX_FIELD_CHARS,
    SCALES,
    TSV_HEADER,
    StsFormatError,
    read_sick,
    read_sts_original,
    read_stsb_csv,
    read_tsv,
    tsv_rows,
    write_tsv,
)
from ctxsim.readers.tree import files_under

__all__ = [
    "MAX_FIELD_CHARS",
    "SCALES",
    "SOURCES",
    "TSV_HEADER",
    "StsFormatError",
    "StsSet",
    "dataset_key",
    "discover",
    "download",
    "fetch",
    "read_sick",
    "read_sts_original",
    "read_stsb_csv",
    "read_tsv",
    "sample_pairs",
    "tsv_rows",
    "unpack",
    "verify_pinned",
    "write_tsv",
]

_YEAR = re.compile(r"STS[-_]?(?:20)?(1[2-6])", re.IGNORECASE)
_SPLIT_NAMES = {"test_annotated": "test", "trial": "trial", "train": "train", "test": "test"}


@dataclass
class StsSet:
    """One scored subset of one dataset."""

    dataset: str
    subset: str
    s1: list[str]
    s2: list[str]
    gold: list[float]
    path: str = ""

    @property
    def name(self) -> str:
        return f"{self.dataset}.{self.subset}"

    def __iter__(self):  # (dataset, subset, s1, s2, gold) unpacking, as documented
        return iter((self.dataset, self.subset, self.s1, self.s2, self.gold))

    def __len__(self) -> int:
        return len(self.gold)


def _year_of(path: Path, root: Path) -> str | None:
    for part in reversed(path.relative_to(root).parts[:-1]):
        m = _YEAR.search(part)
        if m:
            return f"STS{m.group(1)}"
    m = _YEAR.search(root.name)
    return f"STS{m.group(1)}" if m else None


def _original_sets(root: Path) -> list[StsSet]:
    found: list[StsSet] = []
    for inp in files_under(root, "*.txt"):
        name = inp.name
        m = re.match(r"^STS(2016)?\.input\.(.+)\.txt$", name)
        if m:
            subset = m.group(2)
            gs = inp.with_name(f"STS{m.group(1) or ''}.gs.{subset}.txt")
            if not gs.exists():
                continue
            year = "STS16" if m.group(1) else _year_of(inp, root)
            if year is None:
                raise StsFormatError(
                    f"{inp}: cannot tell the STS year; put it under a folder named STS12..STS16"
                )
            found.append(StsSet(year, subset, *read_sts_original(inp, gs), path=str(inp)))
            continue
        m = re.match(r"^SICK_(train|trial|test_annotated)\.txt$", name)
        if m:
            found.append(StsSet("SICK-R", _SPLIT_NAMES[m.group(1)], *read_sick(inp), path=str(inp)))
    for csv_path in files_under(root, "sts-*.csv"):
        m = re.match(r"^sts-(train|dev|test)\.csv$", csv_path.name)
        if m:
            found.append(StsSet("STSb", m.group(1), *read_stsb_csv(csv_path), path=str(csv_path)))
    return found


def discover(root: str | Path, skip: tuple[str, ...] = ("*.pairs.tsv",)) -> list[StsSet]:
    """Every STS set under ``root``: uniform TSVs first, originals for what no TSV covers; a
    ``.tsv`` matching a glob of ``skip`` is another format's (readers/evaluators)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"STS directory {root} does not exist")
    sets: dict[tuple[str, str], StsSet] = {}
    for tsv in files_under(root, "*.tsv"):
        if any(tsv.match(g) for g in skip):  # pair classification (readers/domain.py), ...
            continue
        parts = tsv.name[: -len(".tsv")].split(".", 1)
        if len(parts) != 2:
            continue
        dataset, subset = parts
        scale = SCALES.get(dataset)  # a set of another name may use its own scale: warned
        sets[(dataset, subset)] = StsSet(dataset, subset, *read_tsv(tsv, scale), path=str(tsv))
    for s in _original_sets(root):
        sets.setdefault((s.dataset, s.subset), s)
    order = {"STS12": 0, "STS13": 1, "STS14": 2, "STS15": 3, "STS16": 4, "STSb": 5, "SICK-R": 6}
    return sorted(sets.values(), key=lambda s: (order.get(s.dataset, 99), s.dataset, s.subset))


def dataset_key(s: StsSet) -> str:
    """Grouping for the "all"/"mean" conventions: a year for STS12-16, a split otherwise."""
    return s.dataset if re.fullmatch(r"STS1[2-6]", s.dataset) else s.name


def sample_pairs(s: StsSet, n: int | None, seed: int) -> StsSet:
    """A seeded sample of ``n`` pairs in file order: files are grouped by genre (STSb's first
    rows are all captions), so the first ``n`` rows would not represent the set."""
    if n is None or len(s) <= n:
        return s
    rng = np.random.default_rng([seed, zlib.crc32(s.name.encode())])
    keep = np.sort(rng.choice(len(s), size=n, replace=False))
    return StsSet(
        s.dataset,
        s.subset,
        [s.s1[i] for i in keep],
        [s.s2[i] for i in keep],
        [s.gold[i] for i in keep],
        s.path,
    )
