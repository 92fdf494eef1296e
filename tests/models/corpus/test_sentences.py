"""models.sentences: every splitter on the hard cases, empty input, and pathological lengths."""

from __future__ import annotations

import pytest

from ctxsim.models.corpus.sentences import (
    MAX_CHARS,
    METHODS,
    _chunks,
    count_tokens,
    split_paragraph,
    split_sentences,
)

GOOD = ("blingfire", "syntok")  # the two that pass the abbreviation/dialogue cases


@pytest.mark.parametrize("method", GOOD)
def test_abbreviations_do_not_split(method: str) -> None:
    text = "Mr. Jarndyce met Dr. Smith and Mrs. Bennet at St. Paul’s. They talked for an hour."
    assert split_sentences(text, method) == [
        "Mr. Jarndyce met Dr. Smith and Mrs. Bennet at St. Paul’s.",
        "They talked for an hour.",
    ]


def test_naive_regex_splits_after_abbreviations() -> None:
    """The baseline's known failure, which is why it is not the default."""
    assert len(split_sentences("Mr. Jarndyce met Dr. Smith.", "regex")) == 3


@pytest.mark.parametrize("method", GOOD)
def test_dialogue_speech_tag_stays_attached(method: str) -> None:
    text = "“Where’s Sir Gregory?” said Melmotte, in a whisper. “I’m a-comin’. Wait for me!”"
    assert split_sentences(text, method) == [
        "“Where’s Sir Gregory?” said Melmotte, in a whisper.",
        "“I’m a-comin’.",
        "Wait for me!”",
    ]


@pytest.mark.parametrize("method", METHODS)
def test_ellipsis_inside_sentence_is_not_a_boundary(method: str) -> None:
    text = "All day in bed with a cataplasm … and at night rose a little. This noon we dined."
    assert split_sentences(text, method) == [
        "All day in bed with a cataplasm … and at night rose a little.",
        "This noon we dined.",
    ]


def test_default_splits_after_ellipsis_before_new_sentence() -> None:
    out = split_sentences("It’s Mr. Miüsov’s relation … I’ve forgotten his name.")
    assert out == ["It’s Mr. Miüsov’s relation …", "I’ve forgotten his name."]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
def test_empty_gives_no_sentences(method: str, text: str) -> None:
    assert split_sentences(text, method) == []


@pytest.mark.parametrize("method", METHODS)
def test_text_is_preserved_and_whitespace_collapsed(method: str) -> None:
    text = "The storm came at four p.m.\nIt lasted  an hour!  Then the sun came out, e.g. briefly."
    out = split_sentences(text, method)
    assert " ".join(out) == " ".join(text.split())
    assert all(s == s.strip() and "\n" not in s for s in out)


def test_unknown_method_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown sentence splitter 'nltk'.*blingfire"):
        split_sentences("A sentence.", "nltk")


def test_ten_megabyte_single_line_does_not_crash() -> None:
    """A 10 MB line (one issue-2 bad input) with the default splitter: linear, all text kept."""
    unit = "The bus was late again this morning. "
    text = unit * (10_000_000 // len(unit) + 1)
    out = split_sentences(text)
    assert len(out) == text.count(". ")
    assert out[0] == unit.strip() and out[-1] == unit.strip()


def test_long_line_without_spaces_is_hard_chunked() -> None:
    text = "x" * 3_000_000
    out = split_sentences(text)
    assert "".join(out) == text
    assert max(map(len, out)) <= MAX_CHARS["blingfire"]


@pytest.mark.parametrize("method", METHODS)
def test_chunking_fallback_keeps_all_text(method: str) -> None:
    """Chunked splitting (what guards pysbd's quadratic time) loses and reorders nothing."""
    unit = "Mrs. Bennet said nothing at all. “Really?” asked Jane. "
    text = (unit * 200).strip()
    out = split_sentences(text, method, max_chars=500)
    assert " ".join(out) == text
    assert max(map(len, out)) <= 500
    assert len(out) >= text.count("Jane.")


def test_chunks_prefer_whitespace_and_cover_the_text() -> None:
    text = "ab cd ef gh ij kl mn"
    pieces = _chunks(text, 6)
    assert "".join(pieces) == text
    assert all(len(p) <= 6 for p in pieces)
    assert all(p.endswith(" ") for p in pieces[:-1])


def test_bad_max_chars() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        split_sentences("A sentence.", "regex", max_chars=0)


@pytest.mark.parametrize(
    ("text", "n"),
    [("", 0), ("Hello, world!", 4), ("It’s 4 p.m.", 8), ("naïve café", 2), ("…", 1)],
)
def test_count_tokens(text: str, n: int) -> None:
    assert count_tokens(text) == n


def test_split_paragraph_cuts_at_sentence_closing_lines_then_sentences() -> None:
    """An over-long paragraph: lines that close a sentence (or a blank line) end a paragraph, a
    hard-wrapped sentence stays whole, and a line over the limit is packed by sentences; no text
    is lost."""
    assert split_paragraph("Short one. Two here.", 100) == [["Short one.", "Two here."]]
    assert split_paragraph("  ", 100) == [[]]
    text = (
        "The kettle boiled at seven and Anna\npoured the tea. She said “Go.”\n"
        "Her brother slept.\n\nThe sun rose over the hill.\n"
        + " ".join(f"Sentence number {i} is here." for i in range(12))
    )
    groups = split_paragraph(text, 100)
    assert groups[:3] == [
        ["The kettle boiled at seven and Anna poured the tea.", "She said “Go.”"],
        ["Her brother slept."],
        ["The sun rose over the hill."],
    ]
    assert all(len(" ".join(g)) <= 100 for g in groups[3:]) and len(groups) > 4
    assert [s for g in groups for s in g] == split_sentences(text)
