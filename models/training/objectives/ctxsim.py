"""``ctxsim``: the label artefact's pairs and Eq. 4 labels (Sun et al. 2022, Sec. 3.4): the
paper's objective."""

from __future__ import annotations

from ctxsim.models.training.objectives.base import LabelledObjective, register


@register
class CtxsimObjective(LabelledObjective):
    name = "ctxsim"
    eq4_labels = True
