"""STS discovery (TSV + originals) and download/unpack/layout on local archives."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from ctxsim.readers.sts import (
    StsFormatError,
    dataset_key,
    discover,
    download,
    read_stsb_csv,
    read_tsv,
)


def _originals(root):
    d = root / "STS15" / "original"
    d.mkdir(parents=True)
    d.joinpath("STS.input.images.txt").write_text('"A cat".\tA dog.\nx\ty\nfoo\tbar\n')
    d.joinpath("STS.gs.images.txt").write_text("4.2\n\n1\n")  # blank = unscored
    b = root / "STSb" / "original"
    b.mkdir(parents=True)
    b.joinpath("sts-dev.csv").write_text(
        'main\tMSRvid\t2012\t0001\t5.000\t"Quoted" man.\tA man.\n'
        "main\tx\t2012\t0002\t1.5\tA\tB\tsrc1\tsrc2\n"
    )
    s = root / "SICK" / "original"
    s.mkdir(parents=True)
    s.joinpath("SICK_test_annotated.txt").write_bytes(
        b"pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\r\n"
        b"1\tA boy runs\tA kid runs\t4.5\tENTAILMENT\r\n"
    )


def test_discover_originals_and_tsv(tmp_path):
    _originals(tmp_path)
    (tmp_path / "STS12").mkdir()
    (tmp_path / "STS12" / "STS12.MSRpar.tsv").write_text(
        'sentence1\tsentence2\tscore\n"He said\tShe said\t3.5\n'
    )
    sets = {s.name: s for s in discover(tmp_path)}
    assert set(sets) == {"STS12.MSRpar", "STS15.images", "STSb.dev", "SICK-R.test"}
    assert sets["STS12.MSRpar"].s1 == ['"He said']  # quoting off
    assert sets["STS15.images"].gold == [4.2, 1.0] and sets["STS15.images"].s1[0] == '"A cat".'
    assert sets["STSb.dev"].s1 == ['"Quoted" man.', "A"] and sets["STSb.dev"].gold == [5.0, 1.5]
    assert sets["SICK-R.test"].s2 == ["A kid runs"] and sets["SICK-R.test"].gold == [4.5]
    ds, sub, s1, s2, gold = sets["STS15.images"]
    assert (ds, sub, len(s1)) == ("STS15", "images", 2)
    assert dataset_key(sets["STS15.images"]) == "STS15"
    assert dataset_key(sets["STSb.dev"]) == "STSb.dev"


def test_tsv_errors_name_file_and_line(tmp_path):
    p = tmp_path / "STS12.x.tsv"
    p.write_text("sentence1\tsentence2\tscore\na\tb\tnot-a-number\n")
    with pytest.raises(StsFormatError, match=r"STS12.x.tsv:2"):
        read_tsv(p)


@pytest.mark.parametrize("bad", ["nan", "inf", "-Infinity", "NaN"])
def test_non_finite_gold_scores_are_rejected_with_file_and_line(tmp_path, bad):
    """A nan/inf gold score would make Spearman NaN ("-" in the report) without a word."""
    p = tmp_path / "STS12.x.tsv"
    p.write_text(f"sentence1\tsentence2\tscore\na\tb\t1.0\nc\td\t{bad}\n")
    with pytest.raises(StsFormatError, match=r"STS12.x.tsv:3: score .* not a finite number"):
        read_tsv(p)
    csv_path = tmp_path / "sts-dev.csv"
    csv_path.write_text(f"g\tf\ty\t1\t{bad}\ta\tb\n")
    with pytest.raises(StsFormatError, match=r"sts-dev.csv:1: score"):
        read_stsb_csv(csv_path)


def _zip_bytes(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    return buf.getvalue()


def test_download_from_local_archives(tmp_path):
    arch = tmp_path / "arch"
    arch.mkdir()
    (arch / "STS2016-en-test.zip").write_bytes(
        _zip_bytes(
            {
                "sts2016-english-with-gs-v1.0/STS2016.input.headlines.txt": (
                    "a b\tc d\tsrc\tsrc\ne\tf\tx\ty\n"
                ),
                "sts2016-english-with-gs-v1.0/STS2016.gs.headlines.txt": "3.0\n\n",
            }
        )
    )
    tgz = arch / "Stsbenchmark.tar.gz"
    with tarfile.open(tgz, "w:gz") as t:
        data = b"g\tf\t2012\t1\t2.5\tA man.\tA woman.\n"
        info = tarfile.TarInfo("stsbenchmark/sts-test.csv")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    srcs = [
        {"dataset": "STS16", "url": (arch / "STS2016-en-test.zip").as_uri(), "sha256": None},
        # a local stand-in for the official archive: not the pinned files (readers/pins.py)
        {"dataset": "STSb", "url": tgz.as_uri(), "sha256": None, "files": {}},
    ]
    dest = tmp_path / "sts"
    man = download("sts", dest, sources=srcs)
    assert (dest / "STS16" / "STS16.headlines.tsv").exists()
    assert (dest / "STSb" / "STSb.test.tsv").exists()
    assert {s["dataset"] for s in man["sets"]} == {"STS16", "STSb"}
    assert all(len(a["sha256"]) == 64 for a in man["archives"])
    sets = {s.name: s for s in discover(dest)}
    assert sets["STS16.headlines"].gold == [3.0] and sets["STSb.test"].s2 == ["A woman."]
    assert sets["STS16.headlines"].path.endswith(".tsv")
    bad = [dict(srcs[0], sha256="0" * 64)]
    with pytest.raises(StsFormatError, match="sha256"):
        download("sts", tmp_path / "sts2", sources=bad)
    with pytest.raises(ValueError, match="unknown data kind"):
        download("nope", tmp_path)


def test_download_refuses_escaping_members(tmp_path):
    z = tmp_path / "evil.zip"
    z.write_bytes(_zip_bytes({"../escape.txt": "x"}))
    with pytest.raises(StsFormatError, match="escapes"):
        download("ists", tmp_path / "i", url=z.as_uri())
