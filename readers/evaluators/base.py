"""The shape of an evaluation task format and the registry the `evaluate` stage, the model card
and the benches read (in the spirit of sentence-transformers' ``evaluation/``: one class, one
file, a ``primary_metric``, ``__call__`` returning a dict of metrics).

An evaluator is one evaluation set of one format: it reads its files (``read``, ``discover``),
scores a system (``__call__``: ``scores(predict(system))``), names its primary metric and
computes the paired interval of two systems' difference (``interval``). The maths are
models/evaluation's (metrics, domain_metrics, ists); a system is a :class:`Similarity`, so the
evaluators need no model code and the layering holds (readers -> models).

Adding a format: a file in this package with an ``Evaluator`` subclass under ``@register`` and
its test (tests/readers/test_evaluators.py registers a toy one). Formats with ``in_eval_dir``
are found under ``evaluate.eval_dir`` and reported by the `evaluate` stage in its ``domain``
section, in registration order (the package's modules are imported in name order).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from ctxsim.readers.domain import set_name
from ctxsim.readers.tree import files_under

E = TypeVar("E", bound="Evaluator")


class Similarity(Protocol):
    """What an evaluator scores: a similarity of texts (an encoder's cosine, TF-IDF, ...)."""

    def paired(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        """The similarity of each pair (s1[i], s2[i])."""
        ...

    def matrix(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        """The (queries x docs) similarity matrix."""
        ...


class Evaluator(ABC):
    """One evaluation set of one task format."""

    #: the registry key
    format: ClassVar[str]
    #: the key of its figures in the `evaluate` result (``result["domain"][section]``)
    section: ClassVar[str] = ""
    #: the glob of its files (any depth) and the suffix stripped from a file name for the set name
    pattern: ClassVar[str] = ""
    suffix: ClassVar[str] = ""
    #: found under ``evaluate.eval_dir`` and reported in the stage's domain section
    in_eval_dir: ClassVar[bool] = True
    #: the metric that ranks systems (a key of ``__call__``'s dict)
    primary_metric: ClassVar[str]
    #: the report's table: its title, {metric: header} and (count key, header)
    title: ClassVar[str] = ""
    columns: ClassVar[dict[str, str]] = {}
    count: ClassVar[tuple[str, str]] = ("n", "items")
    #: the metrics whose paired intervals the stage reports (surrogate minus each other system)
    interval_metrics: ClassVar[tuple[str, ...]] = ()

    name: str

    @classmethod
    def read(cls: type[E], path: Path, name: str) -> E:
        """The set in ``path`` named ``name``; a malformed file is an ``InputError`` naming it."""
        raise NotImplementedError(f"{cls.__name__} reads no single file")

    @classmethod
    def discover(cls: type[E], root: str | Path) -> list[E]:
        """Every set of this format under ``root``, sorted by path (none when it is no folder)."""
        root = Path(root).expanduser()
        if not root.is_dir():
            return []
        files = files_under(root, cls.pattern)
        return [cls.read(p, set_name(p, root, cls.suffix)) for p in files]

    @abstractmethod
    def predict(self, system: Any) -> Any:
        """The system's per-item predictions (what ``scores`` and ``interval`` take)."""

    @abstractmethod
    def scores(self, pred: Any) -> dict[str, Any]:
        """The metrics of ``predict``'s output (``primary_metric`` among them)."""

    @abstractmethod
    def interval(
        self, a: Any, b: Any, metric: str, n_resamples: int, confidence: float, seed: int
    ) -> dict[str, Any]:
        """The paired bootstrap interval of ``metric``(a) - ``metric``(b) on this set's items."""

    @abstractmethod
    def __len__(self) -> int: ...

    def describe(self) -> str:
        """What the log says when the set is scored."""
        return f"{self.format} on {self.name} ({len(self)} items)"

    def __call__(self, system: Any) -> dict[str, Any]:
        """The metrics of ``system`` on this set."""
        return self.scores(self.predict(system))


#: format -> evaluator class, in registration order
EVALUATORS: dict[str, type[Evaluator]] = {}

C = TypeVar("C", bound=type[Evaluator])


def register(cls: C) -> C:
    """Class decorator: add an evaluator to ``EVALUATORS`` under its ``format``."""
    if cls.format in EVALUATORS and EVALUATORS[cls.format] is not cls:
        raise ValueError(f"evaluator format {cls.format!r} registered twice")
    EVALUATORS[cls.format] = cls
    return cls


def eval_dir_formats() -> list[type[Evaluator]]:
    """The formats found under ``evaluate.eval_dir`` beside STS, in registration order."""
    return [c for c in EVALUATORS.values() if c.in_eval_dir]


def discover_eval_dir(root: str | Path) -> list[Evaluator]:
    """Every set of every such format under ``root``: format by format, each sorted by path."""
    return [e for cls in eval_dir_formats() for e in cls.discover(root)]
