"""Sentence splitting and token counting for the ``shard`` stage.

The method needs sentences in reading order, because a sentence's left/right neighbours are its
contexts (Sun et al. 2022, Sec. 3.2: c<i and c>i). The default splitter was chosen by a measured
comparison on the books corpus (``bench/bench_shard.py``, results in ``bench/results/shard.md``):
boundary F1 on a hand-checked gold set of 217 sentences (abbreviations, dialogue, ellipses) first,
then speed. ``blingfire`` won: F1 0.977 (syntok 0.951, naive regex 0.807, pysbd 0.637, which
never splits inside quoted speech), at about 10x syntok's and 50x pysbd's speed and half the naive
regex's. The others stay selectable so the comparison can be rerun.

Pure functions, no I/O. Library imports are lazy: only the chosen splitter is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

#: a question: a sentence whose text ends in a question mark, closing quotes or brackets aside
#: (a regular expression that both ``re`` and Arrow's RE2 read)
QUESTION_END = "\\?[\"'\u201d\u2019)\\]]*\\s*$"

DEFAULT_METHOD = "blingfire"
METHODS = ("blingfire", "syntok", "pysbd", "regex")
# Above this many characters a paragraph is cut in chunks (at whitespace) that are split
# separately: pysbd is quadratic in the input length (measured: 5k chars 0.24 s, 10k 0.75 s,
# 20k 2.7 s, 100k 44 s) and syntok mildly super-linear, while blingfire and the regex stay linear.
# A chunk edge can add a boundary mid-sentence but never loses text; 99.9% of corpus paragraphs
# are far shorter than these limits.
MAX_CHARS: dict[str, int] = {
    "blingfire": 1_000_000,
    "syntok": 100_000,
    "pysbd": 10_000,
    "regex": 1_000_000,
}

_WS = re.compile(r"\s+")
# A line that closes a sentence: terminal punctuation, then closing quotes or brackets.
_LINE_ENDS_SENTENCE = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]\u00bb]*$")
_TOKEN = re.compile(r"\w+|[^\w\s]")
# The naive baseline: split after . ! ? followed by whitespace and a capital or opening quote.
_NAIVE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“])")


def count_tokens(text: str) -> int:
    """Number of word tokens (``\\w+`` runs and single punctuation marks), for length filters.
    ``findall``'s list, not ``finditer``'s matches counted one by one: the same count, faster."""
    return len(_TOKEN.findall(text))


def _split_regex(text: str) -> list[str]:
    return _NAIVE.split(text)


def _split_blingfire(text: str) -> list[str]:
    import blingfire

    return blingfire.text_to_sentences(text).split("\n")


@cache
def _pysbd_segmenter():  # noqa: ANN202 - pysbd has no type hints
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def _split_pysbd(text: str) -> list[str]:
    return list(_pysbd_segmenter().segment(text))


def _split_syntok(text: str) -> list[str]:
    import syntok.segmenter

    out = []
    for para in syntok.segmenter.analyze(text):
        for sent in para:
            if sent:
                last = sent[-1]
                out.append(text[sent[0].offset : last.offset + len(last.value)])
    return out


_SPLITTERS: dict[str, Callable[[str], list[str]]] = {
    "blingfire": _split_blingfire,
    "syntok": _split_syntok,
    "pysbd": _split_pysbd,
    "regex": _split_regex,
}


def _chunks(text: str, max_chars: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``max_chars``, preferring the last space of a piece."""
    out, start, n = [], 0, len(text)
    while n - start > max_chars:
        end = text.rfind(" ", start + max_chars // 2, start + max_chars)
        end = start + max_chars if end < 0 else end + 1
        out.append(text[start:end])
        start = end
    out.append(text[start:])
    return out


def split_sentences(
    paragraph: str, method: str = DEFAULT_METHOD, max_chars: int | None = None
) -> list[str]:
    """Split one paragraph into sentences (stripped, non-empty, in order).

    Whitespace runs (newlines included) are collapsed to one space first, as in the books corpus,
    so every method sees the same text. ``method`` is one of :data:`METHODS`. A paragraph longer
    than ``max_chars`` (default: :data:`MAX_CHARS` of the method) is cut at whitespace into
    chunks that are split separately, which keeps every method linear on pathological input
    (e.g. a 10 MB line with no newline).
    """
    try:
        split = _SPLITTERS[method]
    except KeyError:
        raise ValueError(
            f"unknown sentence splitter {method!r}; choose one of {', '.join(METHODS)}"
        ) from None
    max_chars = MAX_CHARS[method] if max_chars is None else max_chars
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    text = _WS.sub(" ", paragraph).strip()
    if not text:
        return []
    pieces = [text] if len(text) <= max_chars else _chunks(text, max_chars)
    return [s for piece in pieces for s in (x.strip() for x in split(piece)) if s]


def split_paragraph(
    paragraph: str, max_chars: int, method: str = DEFAULT_METHOD
) -> list[list[str]]:
    """The sentences of a paragraph, grouped into paragraphs of at most ``max_chars``.

    A paragraph within the limit is one group (empty if it holds no sentence). A longer one
    (typically a plain-text book with single newlines and no blank lines, read as one block) is
    cut at its line breaks: at every blank line and after every line that closes a sentence, so
    that one-paragraph-per-line text gets its paragraphs back while hard-wrapped prose is never
    cut mid-sentence. A piece still
    over the limit is split into sentences, packed greedily into groups within the limit. No text
    is dropped; a single sentence longer than ``max_chars`` stays whole (the length filters of
    the ``shard`` stage decide about it).
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    if len(paragraph) <= max_chars:
        return [split_sentences(paragraph, method)]
    pieces, cur = [], []
    for line in paragraph.splitlines():
        line = line.strip()
        if line:
            cur.append(line)
        if cur and (not line or _LINE_ENDS_SENTENCE.search(line)):
            pieces.append(" ".join(cur))
            cur = []
    if cur:
        pieces.append(" ".join(cur))
    groups: list[list[str]] = []
    for piece in pieces:
        sents = split_sentences(piece, method)
        if len(piece) <= max_chars:
            groups.append(sents)
            continue
        group: list[str] = []
        size = -1  # characters of the group's sentences joined by spaces
        for sent in sents:
            if group and size + 1 + len(sent) > max_chars:
                groups.append(group)
                group, size = [], -1
            group.append(sent)
            size += 1 + len(sent)
        groups.append(group)
    return [g for g in groups if g]
