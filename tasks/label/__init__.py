"""Stage `label`: the Origin similarity of every pair (Sec. 3.3, Eq. 4), from the contextual
model ``label.contextual`` names (``contextual/``: ``lm``, the paper's Eq. 3 scores over the
context sets; ``encoder``, a sentence encoder over every context unit of the corpus).

Files: ``stage.py`` (the stage, its table), ``params.py`` (the config section, a sub-section per
contextual model), ``contextual/`` (the registry and one module per contextual model),
``report.py`` (stats, the Origin report, the histogram), ``diagnostics.py`` (can the labels be
trusted, the contamination check).
"""

from ctxsim.tasks.label.params import LabelParams
from ctxsim.tasks.label.stage import LabelStage

__all__ = ["LabelParams", "LabelStage"]
