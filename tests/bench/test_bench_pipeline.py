"""bench_pipeline reads runs from several roots: a speed knob on and off gives artefacts of the same
fingerprints, so each run lives in a root of its own."""

from __future__ import annotations

from pathlib import Path

from bench.bench_pipeline import root_and_run


def test_a_run_is_read_from_its_own_root_or_the_default_one() -> None:
    assert root_and_run("books-label", Path("data/artefacts")) == (
        Path("data/artefacts"),
        "books-label",
    )
    assert root_and_run("/tmp/a/root:bg-q500", Path("x")) == (Path("/tmp/a/root"), "bg-q500")
