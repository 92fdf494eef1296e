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

import importlib
import pkgutil

from ctxsim.tasks.label.contextual.base import (
    CONTEXTUAL,
    LABEL_COLUMNS,
    ContextualLabels,
    ContextualModel,
    PairsToLabel,
    get_contextual,
    register,
)


def _import_all() -> tuple[str, ...]:
    """Import every module of this package (the models register themselves); their names."""
    names = [f"{__name__}.{m.name}" for m in sorted(pkgutil.iter_modules(__path__))]
    for name in names:
        importlib.import_module(name)
    return tuple(names)


#: the modules of this package, every one imported
MODULES = _import_all()

__all__ = [
    "CONTEXTUAL",
    "LABEL_COLUMNS",
    "MODULES",
    "ContextualLabels",
    "ContextualModel",
    "PairsToLabel",
    "get_contextual",
    "register",
]
