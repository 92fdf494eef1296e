"""Fetch the official STS and iSTS releases into the layout ``discover`` reads.

``download(kind, dest)`` fetches the official archives with urllib (any URL urllib opens,
``file://`` included), records their sha256, checks the files inside against their pins
(readers/pins.py), unpacks them (zip / tar.gz) under ``dest/<DATASET>/original/`` and writes the
uniform TSVs plus ``MANIFEST.json``. Everything is staged until every archive is fetched and
verified: a failure leaves ``dest`` as it was.
"""

from __future__ import annotations

import json
import logging
import shutil
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

from ctxsim.readers.pins import PINNED
from ctxsim.readers.sts_formats import StsFormatError, write_tsv
from ctxsim.store.artefacts import sha256_file

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
        raise StsFormatError(f"unknown data kind {kind!r}; use one of {', '.join(SOURCES)}")
    dest = Path(dest)
    srcs = [dict(s) for s in (sources or SOURCES[kind])]
    originals = [s["url"] for s in srcs]  # pins are looked up by the official archive's name
    if url is not None:
        if len(srcs) != 1:
            raise StsFormatError(
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
            manifest["archives"].append(
                _fetch_archive(kind, i, src, str(originals[i]), tmp, timeout)
            )
        shutil.copytree(tmp / "staged", dest, dirs_exist_ok=True)
    manifest["sets"] += _lay_out_sets(kind, dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def _fetch_archive(
    kind: str, i: int, src: dict[str, str | None], original: str, tmp: Path, timeout: float
) -> dict:
    """Fetch, verify and unpack archive ``i`` of ``download``, staged under ``tmp/staged``;
    its manifest entry. ``original`` is the official archive's URL (pins are looked up by its
    name)."""
    u = str(src["url"])
    arch = fetch(u, tmp / f"{i}-{Path(u.split('?')[0]).name}", timeout=timeout)
    digest = sha256_file(arch)
    if src.get("sha256") and src["sha256"] != digest:
        raise StsFormatError(f"{u}: sha256 {digest} does not match the pinned {src['sha256']}")
    files = unpack(arch, tmp / f"unpacked-{i}")
    pins = src.get("files", PINNED.get(Path(original).name, {}))
    unpinned = verify_pinned(files, pins, u)  # type: ignore[arg-type]
    ds = str(src["dataset"])
    # staged until every archive is fetched and verified: a failure leaves dest as it was
    sub = "original" if kind == "sts" else "test_goldStandard"
    _flatten_into(files, tmp / "staged" / ds / sub)
    return {
        "dataset": ds,
        "url": u,
        "sha256": digest,
        "bytes": arch.stat().st_size,
        "pinned_files": len(pins),  # type: ignore[arg-type]
        "unpinned_files": unpinned,
    }


def _lay_out_sets(kind: str, dest: Path) -> list[dict]:
    """The manifest's sets of an unpacked release under ``dest``; for STS, each set also
    written as ``<dest>/<DATASET>/original/<DATASET>.<subset>.tsv``."""
    sets: list[dict] = []
    if kind == "sts":
        from ctxsim.readers.sts import discover  # sts.py re-exports download: not at the top

        for s in discover(dest):
            if Path(s.path).suffix == ".tsv":
                continue
            folder = Path(s.path).parent.parent  # <dest>/<DATASET>/original/<file>
            out = folder / f"{s.dataset}.{s.subset}.tsv"
            write_tsv(out, s.s1, s.s2, s.gold)
            sets.append(
                {
                    "dataset": s.dataset,
                    "subset": s.subset,
                    "n_pairs": len(s),
                    "tsv": str(out.relative_to(dest)),
                    "sha256": sha256_file(out),
                }
            )
        return sets
    from ctxsim.readers.ists import discover_ists

    for d in discover_ists(dest):
        sets.append(
            {
                "domain": d.name,
                "n_pairs": len(d.gold),
                "wa": str(d.wa_path.relative_to(dest)),
                "sha256": sha256_file(d.wa_path),
            }
        )
    return sets
