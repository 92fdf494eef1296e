"""STS test sets with a planted sentence, for the contamination check and the tiny run's
export: two test sets (an STS-year genre and a `test` split) and a dev set, told apart by file
name only."""

from __future__ import annotations

from pathlib import Path

from ctxsim.readers.sts import write_tsv

PLANTED = "A man is playing a large flute on the stage tonight."
LONG = "the old ferry crossed the grey harbour slowly while gulls circled above the quiet town"


def sts_dir(root: Path) -> Path:
    """Two test sets (an STS-year genre and a `test` split) and a dev set, by file name only."""
    d = root / "sts"
    (d / "STSX").mkdir(parents=True)
    write_tsv(d / "STSX" / "STSX.genre.tsv", [PLANTED, "Dogs run."], [LONG, "Cats sit."], [4, 1])
    write_tsv(d / "FOO.test.tsv", ["A bird sings in the tall tree."], ["x y z"], [2.0])
    write_tsv(d / "FOO.dev.tsv", ["Only in the dev split, never a test sentence."], ["q"], [1.0])
    return d
