"""The contextual models of the `label` stage: one per module, and their registry.

``label.contextual`` names one of ``CONTEXTUAL`` (``base.py``: the shape of a contextual model
and the registry):

- ``lm`` (``lm.py``): Eq. 3 scores of the `score` stage over the context sets Cs of `select`,
  Eq. 4 over them (the paper), with a label from each Eq. 3 term alone;
- ``encoder`` (``encoder.py``): the `embed` artefact's sentence encoder, S(c, s) = cos(E(c), E(s))
  over every context unit of the corpus, the label the correlation of the two profiles.

Adding one: a module here with a ``ContextualModel`` subclass under ``@register``, and its test.
Every module of this package is imported (``MODULES``), so the new one registers itself; the
`label` stage is this package's parent, so an edit to any of them fires the stage-version guard.
"""

from ctxsim.models.plugins import import_modules
from ctxsim.tasks.label.contextual.base import (
    CONTEXTUAL,
    LABEL_COLUMNS,
    ContextualLabels,
    ContextualModel,
    ContextualSettings,
    PairsToLabel,
    get_contextual,
    register,
)

#: the modules of this package, every one imported
MODULES = import_modules(__name__, __path__)

__all__ = [
    "CONTEXTUAL",
    "LABEL_COLUMNS",
    "MODULES",
    "ContextualLabels",
    "ContextualModel",
    "ContextualSettings",
    "PairsToLabel",
    "get_contextual",
    "register",
]
