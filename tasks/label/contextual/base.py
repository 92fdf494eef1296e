"""The shape of a contextual model and the registry ``label.contextual`` names one from (in the
style of the training objectives, models/training/objectives/base.py: one class, one file).

A contextual model gives every pair its Eq. 4 label from the contexts it knows: it says which
upstream stages it reads (``inputs``, refused in one line when a config lacks one, and
``optional_inputs``, read when the run has them), which of the label columns it fills
(``columns``; the others of LABEL_SCHEMA are NaN by design), what ``n_ctx1``/``n_ctx2`` count
for it, and its settings (``settings``: a ``ContextualSettings`` class in the same file, read
from the sub-section of `label` named after it; tasks/label/params.py makes one field of each).
The `label` stage owns what every model shares: the pairs and their texts, the splits, the
table, the stats, the Origin report of given pairs, the diagnostics.

Adding one: a file in this package with a ``ContextualModel`` subclass under ``@register``
(every module here is imported, so it registers itself) and its test; its settings, if it has
any, a ``ContextualSettings`` subclass in the same file named by ``settings``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from ctxsim.store.errors import InputError

if TYPE_CHECKING:
    from ctxsim.store.stage import StageContext

#: the label columns of the stage's table (LABEL_SCHEMA) a contextual model may fill: the label
#: and the label from each Eq. 3 term alone
LABEL_COLUMNS = ("label", "label_disc", "label_fwd", "label_left", "label_right")


class ContextualSettings(BaseModel):
    """Base of a contextual model's settings: the sub-section of `label` named after the model
    (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")

    #: field -> the flat `label` key it was before the sub-sections (read with a deprecation
    #: warning; the fingerprint keeps the flat layout)
    flat_keys: ClassVar[dict[str, str]] = {}


@dataclass
class PairsToLabel:
    """What the stage hands a contextual model: the pairs artefact's table, each pair's two
    query ids, the text of every query id, and whether the pairs are given (STS) pairs."""

    table: pa.Table
    s1: np.ndarray
    s2: np.ndarray
    text_of: dict[int, str]
    given: bool

    def __len__(self) -> int:
        return len(self.s1)


@dataclass
class ContextualLabels:
    """A contextual model's answer: ``columns`` (a value per pair for each name it declared in
    ``columns``, ``label`` always) and ``n_ctx1``/``n_ctx2`` (per pair, what the model's
    ``n_ctx`` says); for the Origin report of given pairs, ``views`` (other predictions of the
    same pairs, by name, in report order) and ``lambdas`` (Eq. 3's λ, when recovered);
    ``stats`` join the stage's, ``score_lookups`` counts the scores looked up."""

    columns: dict[str, np.ndarray]
    n_ctx1: np.ndarray
    n_ctx2: np.ndarray
    views: dict[str, np.ndarray] = field(default_factory=dict)
    lambdas: np.ndarray | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    score_lookups: int = 0


class ContextualModel:
    """One contextual model: a name, the stages it reads, the columns it fills, its labels."""

    name: ClassVar[str]
    #: upstream stages it cannot label without (besides `queries` and `pairs`, which every
    #: model gets)
    inputs: ClassVar[tuple[str, ...]] = ()
    #: stages it reads when the run has them (they enter the fingerprint only then)
    optional_inputs: ClassVar[tuple[str, ...]] = ()
    #: the label columns (LABEL_COLUMNS) it fills; the others are NaN by design
    columns: ClassVar[tuple[str, ...]] = ("label",)
    #: what the table's n_ctx1 / n_ctx2 count for it (docs/stages.md)
    n_ctx: ClassVar[str] = "0: no contexts"
    #: its settings: the sub-section ``label.<name>`` (None: it has none)
    settings: ClassVar[type[ContextualSettings] | None] = None

    def labels(self, ctx: StageContext, settings: Any, pairs: PairsToLabel) -> ContextualLabels:
        """Label ``pairs``; ``settings`` is this model's ``settings`` as the config set them
        (None when it has none)."""
        raise NotImplementedError


#: contextual model name -> its instance, in registration order
CONTEXTUAL: dict[str, ContextualModel] = {}


def register(cls: type[ContextualModel]) -> type[ContextualModel]:
    """Class decorator: make a contextual model known to ``label.contextual``. A class that
    breaks the contract (a name taken, columns the table lacks) is a TypeError: a bug in the
    class, not the user's input."""
    if cls.name in CONTEXTUAL and type(CONTEXTUAL[cls.name]) is not cls:
        raise TypeError(f"contextual model {cls.name!r} is registered twice")
    bad = [c for c in cls.columns if c not in LABEL_COLUMNS]
    if "label" not in cls.columns or bad:
        raise TypeError(
            f"contextual model {cls.name!r}: columns must include 'label' and be among "
            f"{', '.join(LABEL_COLUMNS)} (not {bad})"
        )
    CONTEXTUAL[cls.name] = cls()
    return cls


def get_contextual(name: str) -> ContextualModel:
    """The registered contextual model ``name``; an InputError (a ValueError, so a pydantic
    validator reports it as ``label.contextual``) naming the known ones otherwise."""
    try:
        return CONTEXTUAL[name]
    except KeyError:
        raise InputError(
            f"unknown contextual model {name!r}: one of {', '.join(CONTEXTUAL)}"
        ) from None
