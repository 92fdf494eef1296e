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
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import tarfile
import tempfile
import time
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxsim.readers.pins import PINNED
from ctxsim.store.artefacts import sha256_file
from ctxsim.store.errors import InputError

TSV_HEADER = ["sentence1", "sentence2", "score"]
_YEAR = re.compile(r"STS[-_]?(?:20)?(1[2-6])", re.IGNORECASE)
_SPLIT_NAMES = {"test_annotated": "test", "trial": "trial", "train": "train", "test": "test"}


class StsFormatError(InputError):
    """A malformed STS file, with file and line."""


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


def _year_of(path: Path, root: Path) -> str | None:
    for part in reversed(path.relative_to(root).parts[:-1]):
        m = _YEAR.search(part)
        if m:
            return f"STS{m.group(1)}"
    m = _YEAR.search(root.name)
    return f"STS{m.group(1)}" if m else None


def _original_sets(root: Path) -> list[StsSet]:
    found: list[StsSet] = []
    for inp in sorted(root.rglob("*.txt")):
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
    for csv_path in sorted(root.rglob("sts-*.csv")):
        m = re.match(r"^sts-(train|dev|test)\.csv$", csv_path.name)
        if m:
            found.append(StsSet("STSb", m.group(1), *read_stsb_csv(csv_path), path=str(csv_path)))
    return found


def discover(root: str | Path) -> list[StsSet]:
    """Every STS set under ``root``: uniform TSVs first, originals for what no TSV covers."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"STS directory {root} does not exist")
    sets: dict[tuple[str, str], StsSet] = {}
    for tsv in sorted(root.rglob("*.tsv")):
        if tsv.name.endswith(".pairs.tsv"):  # pair classification (readers/domain.py)
            continue
        parts = tsv.name[: -len(".tsv")].split(".", 1)
        if len(parts) != 2:
            continue
        dataset, subset = parts
        sets[(dataset, subset)] = StsSet(dataset, subset, *read_tsv(tsv), path=str(tsv))
    for s in _original_sets(root):
        sets.setdefault((s.dataset, s.subset), s)
    order = {"STS12": 0, "STS13": 1, "STS14": 2, "STS15": 3, "STS16": 4, "STSb": 5, "SICK-R": 6}
    return sorted(sets.values(), key=lambda s: (order.get(s.dataset, 99), s.dataset, s.subset))


def dataset_key(s: StsSet) -> str:
    """Grouping for the "all"/"mean" conventions: a year for STS12-16, a split otherwise."""
    return s.dataset if re.fullmatch(r"STS1[2-6]", s.dataset) else s.name


# ---- download -------------------------------------------------------------------------------

#: Official release archives (the URLs SentEval and CLRCMD fetch, over https: both hosts serve
#: it). ``sha256`` pins a whole archive (None: archives are not pinned, their digest is recorded
#: in MANIFEST.json); the files inside are pinned by readers/pins.py (or a source's ``files``).
SOURCES: dict[str, list[dict[str, str | None]]] = {
    "sts": [
        {
            "dataset": "STS12",
            "url": "https://ixa2.si.ehu.es/stswiki/images/4/40/STS2012-en-test.zip",
            "sha256": None,
        },
        {
            "dataset": "STS13",
            "url": "https://ixa2.si.ehu.es/stswiki/images/2/2f/STS2013-en-test.zip",
            "sha256": None,
        },
        {
            "dataset": "STS14",
            "url": "https://ixa2.si.ehu.es/stswiki/images/8/8c/STS2014-en-test.zip",
            "sha256": None,
        },
        {
            "dataset": "STS15",
            "url": "https://ixa2.si.ehu.es/stswiki/images/d/da/STS2015-en-test.zip",
            "sha256": None,
        },
        {
            "dataset": "STS16",
            "url": "https://ixa2.si.ehu.es/stswiki/images/9/98/STS2016-en-test.zip",
            "sha256": None,
        },
        {
            "dataset": "STSb",
            "url": "https://ixa2.si.ehu.es/stswiki/images/4/48/Stsbenchmark.tar.gz",
            "sha256": None,
        },
        {
            "dataset": "SICK",
            "url": "https://alt.qcri.org/semeval2014/task1/data/uploads/sick_train.zip",
            "sha256": None,
        },
        {
            "dataset": "SICK",
            "url": "https://alt.qcri.org/semeval2014/task1/data/uploads/sick_trial.zip",
            "sha256": None,
        },
        {
            "dataset": "SICK",
            "url": "https://alt.qcri.org/semeval2014/task1/data/uploads/sick_test_annotated.zip",
            "sha256": None,
        },
    ],
    "ists": [
        {
            "dataset": "ists2016",
            "url": "https://alt.qcri.org/semeval2016/task2/data/uploads/test_goldstandard.tar.gz",
            "sha256": None,
        },
    ],
}


def fetch(url: str, dest: Path, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``dest`` atomically (urllib; http(s) and file URLs)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    req = urllib.request.Request(url, headers={"User-Agent": "ctxsim-data/1"})
    with urllib.request.urlopen(req, timeout=timeout) as resp, open(tmp, "wb") as out:
        shutil.copyfileobj(resp, out)
    tmp.replace(dest)
    return dest


def unpack(archive: Path, dest: Path) -> list[Path]:
    """Unpack a .zip or .tar(.gz) archive into ``dest``, refusing members that escape it."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    name = archive.name.lower()
    if name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            members = [m for m in z.namelist() if not m.endswith("/")]
            for m in members:
                if not (root / m).resolve().is_relative_to(root):
                    raise StsFormatError(f"{archive}: member {m!r} escapes the target folder")
            z.extractall(dest)
    elif name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(archive) as t:
            members = [m for m in t.getmembers() if m.isfile()]
            for m in t.getmembers():
                if not (root / m.name).resolve().is_relative_to(root) or m.issym() or m.islnk():
                    raise StsFormatError(f"{archive}: member {m.name!r} is unsafe")
            t.extractall(dest, members=members, filter="data")
            members = [m.name for m in members]  # type: ignore[assignment]
    else:
        raise StsFormatError(f"{archive}: unknown archive type (zip, tar.gz expected)")
    return [dest / m for m in members]  # type: ignore[operator]


def _flatten_into(files: list[Path], target: Path) -> None:
    """Move unpacked data files into ``target`` (a flat original/ folder), skipping OS junk."""
    target.mkdir(parents=True, exist_ok=True)
    for f in files:
        if f.name.startswith(".") or "__MACOSX" in f.parts:
            continue
        shutil.move(str(f), target / f.name)


def verify_pinned(files: list[Path], pins: dict[str, str], url: str) -> list[str]:
    """Check the unpacked data files named in ``pins`` (file name -> sha256); every pinned file
    must be there with its digest. Returns the names of the data files nothing pins (warned)."""
    by_name = {f.name: f for f in files if f.is_file()}
    for name, want in sorted(pins.items()):
        if name not in by_name:
            raise StsFormatError(f"{url}: the archive lacks {name}, whose sha256 is pinned")
        got = sha256_file(by_name[name])
        if got != want:
            raise StsFormatError(
                f"{url}: {name} has sha256 {got}, not the pinned {want} (a changed or "
                "tampered archive; readers/pins.py)"
            )
    junk = ("readme", "license", "00-")
    unpinned = sorted(
        n
        for n in by_name
        if n not in pins and not n.startswith(".") and not n.lower().startswith(junk)
    )
    if unpinned:
        logging.getLogger("ctxsim.data").warning(
            "%s: %d file(s) not pinned by sha256 (recorded in MANIFEST.json): %s",
            url,
            len(unpinned),
            ", ".join(unpinned),
        )
    return unpinned


def download(
    kind: str,
    dest: str | Path,
    url: str | None = None,
    sources: list[dict[str, str | None]] | None = None,
    timeout: float = 60.0,
) -> dict:
    """Fetch, verify, unpack and lay out the official STS or iSTS release under ``dest``.

    ``url`` replaces the URL when the kind has a single archive (e.g. a mirror); ``sources``
    replaces the whole list (same keys as :data:`SOURCES`). Returns the manifest it writes to
    ``dest/MANIFEST.json`` (archive URLs and sha256, every produced TSV with its pair count).
    """
    if kind not in SOURCES:
        raise ValueError(f"unknown data kind {kind!r}; use one of {', '.join(SOURCES)}")
    dest = Path(dest)
    srcs = [dict(s) for s in (sources or SOURCES[kind])]
    originals = [s["url"] for s in srcs]  # pins are looked up by the official archive's name
    if url is not None:
        if len(srcs) != 1:
            raise ValueError(
                f"--url replaces one archive, but {kind} has {len(srcs)}; pass sources"
            )
        srcs[0]["url"] = url
    manifest: dict = {
        "kind": kind,
        "downloaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "archives": [],
        "sets": [],
    }
    with tempfile.TemporaryDirectory(prefix="ctxsim-dl-") as tmpd:
        tmp = Path(tmpd)
        for i, src in enumerate(srcs):
            u = str(src["url"])
            arch = fetch(u, tmp / f"{i}-{Path(u.split('?')[0]).name}", timeout=timeout)
            digest = sha256_file(arch)
            if src.get("sha256") and src["sha256"] != digest:
                raise StsFormatError(
                    f"{u}: sha256 {digest} does not match the pinned {src['sha256']}"
                )
            files = unpack(arch, tmp / f"unpacked-{i}")
            pins = src.get("files", PINNED.get(Path(str(originals[i])).name, {}))
            unpinned = verify_pinned(files, pins, u)  # type: ignore[arg-type]
            ds = str(src["dataset"])
            # staged until every archive is fetched and verified: a failure leaves dest as it was
            sub = "original" if kind == "sts" else "test_goldStandard"
            _flatten_into(files, tmp / "staged" / ds / sub)
            manifest["archives"].append(
                {
                    "dataset": ds,
                    "url": u,
                    "sha256": digest,
                    "bytes": arch.stat().st_size,
                    "pinned_files": len(pins),  # type: ignore[arg-type]
                    "unpinned_files": unpinned,
                }
            )
        shutil.copytree(tmp / "staged", dest, dirs_exist_ok=True)
    if kind == "sts":
        for s in discover(dest):
            if Path(s.path).suffix == ".tsv":
                continue
            folder = Path(s.path).parent.parent  # <dest>/<DATASET>/original/<file>
            out = folder / f"{s.dataset}.{s.subset}.tsv"
            write_tsv(out, s.s1, s.s2, s.gold)
            manifest["sets"].append(
                {
                    "dataset": s.dataset,
                    "subset": s.subset,
                    "n_pairs": len(s),
                    "tsv": str(out.relative_to(dest)),
                    "sha256": sha256_file(out),
                }
            )
    else:
        from ctxsim.readers.ists import discover_ists

        for d in discover_ists(dest):
            manifest["sets"].append(
                {
                    "domain": d.name,
                    "n_pairs": len(d.gold),
                    "wa": str(d.wa_path.relative_to(dest)),
                    "sha256": sha256_file(d.wa_path),
                }
            )
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))
    return manifest


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
