"""Do the sentences of a generated dataset occur in the STS test sets it will be evaluated on?

A sentence counts as contaminated when, after normalisation (NFKC, lower case, every run of
non-alphanumerics one space), it equals a test sentence, or its word n-gram set has Jaccard
similarity >= ``threshold`` with one (a near copy: changed punctuation, one word swapped in a long
sentence). Test sets are discovered in the STS folder (readers/sts.py ``discover``): every set
whose subset is not a training, development or trial split, so STS12-16 subsets, STSb.test and
SICK-R.test, or whatever else the folder holds; no set name is hard-coded.

The n-gram match is exact Jaccard through an inverted index (candidates share at least one
n-gram), so a count is reproducible and needs no tuning of MinHash permutations.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ctxsim.store.errors import InputError

#: subset names that are not test data (anything else found in the folder is)
NON_TEST_SUBSETS = frozenset({"train", "dev", "trial", "validation", "val"})
_NON_ALNUM = re.compile(r"[\W_]+", re.UNICODE)


class ContaminationParams(BaseModel):
    """The `label.contamination` config section."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        True,
        description=(
            "Check the mined pairs' sentences against STS test sets (word n-gram overlap) and "
            "report matches in the label stats and the dataset card."
        ),
    )
    sts_dir: str | None = Field(
        None,
        description=(
            "STS folder whose test sets are checked; default: train.sts_dir, else evaluate.sts_dir."
        ),
    )
    ngram: int = Field(
        3,
        ge=1,
        description="Word n-grams compared (n); smaller n finds looser matches.",
    )
    threshold: float = Field(
        0.8,
        gt=0.0,
        le=1.0,
        description=(
            "Jaccard similarity of two sentences' n-gram sets counted as a match; lower it to catch"
            " paraphrased copies."
        ),
    )
    error: bool = Field(
        False,
        description=(
            "A non-zero match count fails the label stage (so train) and export, instead of only "
            "reporting it."
        ),
    )
    max_examples: int = Field(
        10,
        ge=0,
        description="Matches listed in the report and the dataset card.",
    )


def normalise(text: str) -> str:
    """NFKC, lower case, punctuation and whitespace runs to one space, stripped."""
    return _NON_ALNUM.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip()


def ngrams(norm: str, n: int) -> frozenset[tuple[str, ...]]:
    """Word n-grams of a normalised text; a text shorter than n is one gram of all its words."""
    words = norm.split()
    if len(words) < n:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def is_test_subset(subset: str) -> bool:
    return subset.lower() not in NON_TEST_SUBSETS


def load_test_sentences(sts_dir: str | Path) -> tuple[dict[str, str], list[str]]:
    """{sentence: "<DATASET>.<subset>"} of every test set under ``sts_dir``, and the file paths
    read (a sentence in several sets keeps the first set's name)."""
    from ctxsim.readers.sts import discover

    out: dict[str, str] = {}
    files: list[str] = []
    for s in discover(sts_dir):
        if not is_test_subset(s.subset):
            continue
        files.append(s.path)
        for text in (*s.s1, *s.s2):
            out.setdefault(text, s.name)
    return out, files


@dataclass
class ContaminationIndex:
    """Test sentences indexed for exact (normalised) and n-gram Jaccard lookup."""

    ngram: int
    threshold: float
    exact: dict[str, tuple[str, str]] = field(default_factory=dict)  # norm -> (text, set)
    grams: list[frozenset] = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)
    postings: dict[tuple[str, ...], list[int]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def build(cls, sentences: dict[str, str], ngram: int, threshold: float) -> ContaminationIndex:
        idx = cls(ngram, threshold)
        for text, where in sentences.items():
            norm = normalise(text)
            if not norm or norm in idx.exact:
                continue
            idx.exact[norm] = (text, where)
            g = ngrams(norm, ngram)
            k = len(idx.grams)
            idx.grams.append(g)
            idx.texts.append((text, where))
            for gram in g:
                idx.postings[gram].append(k)
        return idx

    def match(self, text: str) -> dict[str, Any] | None:
        """The best test-set match of one sentence, or None below the threshold."""
        norm = normalise(text)
        if not norm:
            return None
        if norm in self.exact:
            hit, where = self.exact[norm]
            return {"kind": "exact", "jaccard": 1.0, "test_sentence": hit, "test_set": where}
        g = ngrams(norm, self.ngram)
        shared: Counter[int] = Counter()
        for gram in g:
            shared.update(self.postings.get(gram, ()))
        best, best_j = -1, 0.0
        for k, n in shared.items():
            j = n / (len(g) + len(self.grams[k]) - n)
            if j > best_j or (j == best_j and k < best):
                best, best_j = k, j
        if best < 0 or best_j < self.threshold:
            return None
        hit, where = self.texts[best]
        return {
            "kind": "ngram",
            "jaccard": round(best_j, 4),
            "test_sentence": hit,
            "test_set": where,
        }


def check_contamination(
    sentences: Iterable[str], sts_dir: str | Path, p: ContaminationParams
) -> dict[str, Any]:
    """Count the distinct sentences that occur in a test set of ``sts_dir``: a JSON-ready report
    with the counts, the sets they hit, the settings and the first matches."""
    sts_dir = Path(sts_dir)
    if not sts_dir.is_dir():
        raise FileNotFoundError(f"contamination check: STS directory {sts_dir} does not exist")
    tests, files = load_test_sentences(sts_dir)
    idx = ContaminationIndex.build(tests, p.ngram, p.threshold)
    uniq = sorted({s for s in sentences if s})
    exact = ngram = 0
    per_set: Counter[str] = Counter()
    examples: list[dict[str, Any]] = []
    for s in uniq:
        m = idx.match(s)
        if m is None:
            continue
        exact += m["kind"] == "exact"
        ngram += m["kind"] == "ngram"
        per_set[m["test_set"]] += 1
        if len(examples) < p.max_examples:
            examples.append({"sentence": s, **m})
    return {
        "sts_dir": str(sts_dir),
        "test_files": files,
        "test_sentences": len(idx.texts),
        "checked_sentences": len(uniq),
        "contaminated": exact + ngram,
        "exact": exact,
        "ngram": ngram,
        "by_test_set": dict(sorted(per_set.items())),
        "ngram_n": p.ngram,
        "threshold": p.threshold,
        "examples": examples,
    }


class ContaminationError(InputError):
    """Dataset sentences occur in the test sets and ``contamination.error`` is set."""


def raise_if_contaminated(report: dict[str, Any], setting: str) -> None:
    if report.get("contaminated"):
        ex = report["examples"][0] if report.get("examples") else {}
        raise ContaminationError(
            f"{report['contaminated']} dataset sentences occur in the STS test sets under "
            f"{report['sts_dir']} ({report['exact']} exact, {report['ngram']} with n-gram "
            f"Jaccard >= {report['threshold']}; e.g. {ex.get('sentence')!r} ~ "
            f"{ex.get('test_set')}); {setting}: false records the count instead of failing"
        )
