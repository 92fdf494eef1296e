"""What the surrogate learns from: one training objective per module, and their registry.

``train.objective`` names one of ``OBJECTIVES`` (``base.py``: the shape of an objective and the
registry). The peers of ctxsim's Eq. 4 labels on the same sentences, steps, batch size and seed:

- ``ctxsim`` (``ctxsim.py``): the label artefact's pairs and labels (the paper);
- ``simcse`` (``simcse.py``): unsupervised SimCSE, each sentence its own positive;
- ``tfidf`` (``tfidf.py``): the same pairs labelled by their TF-IDF cosine;
- ``tsdae`` (``tsdae.py``): TSDAE, rebuild each sentence from its damaged copy's vector;
- ``joint`` (``joint.py``): ctxsim's pairs and SimCSE's positives in one training;
- ``context`` (``context.py``): each corpus sentence with its real right context as positive;
- ``teacher`` (``teacher.py``): the same pairs labelled by a larger encoder's cosine;
- ``none`` (``none.py``): the untrained backbone.

Labelled objectives take one of sentence-transformers' regression/ranking losses (``train.loss``):
``cosine`` is the paper's L2 on the cosine (``CosineSimilarityLoss``); ``cosent`` and ``angle``
(``CoSENTLoss``, ``AnglELoss``) use only the order of the labels inside a batch, so a band of 1e-6
teaches as much as a band of 1; ``clrcmd`` is the contrastive RCMD loss
(models/training/losses/clrcmd_loss.py).

Adding an objective: one module here with a ``TrainObjective`` subclass under ``@register``, and
its test. Every module of this package is imported (``MODULES``), so the new one registers itself;
the `train` stage lists them as its sources, so an edit to any of them fires the stage-version
guard (tests/stage_versions.py) like an imported module would.
"""

from ctxsim.models.plugins import import_modules
from ctxsim.models.training.objectives.base import (
    OBJECTIVES,
    SIMCSE_SCALE,
    Examples,
    LabelledObjective,
    LossName,
    ObjectiveContext,
    TrainingPairs,
    TrainObjective,
    get_objective,
    has_dropout,
    register,
    sentence_pool,
    steps_for,
)
from ctxsim.models.training.objectives.context import (
    ContextObjective,
    context_pair_rows,
    context_pairs,
    document_batch_order,
    right_contexts,
    sample_with_context,
)
from ctxsim.models.training.objectives.ctxsim import CtxsimObjective
from ctxsim.models.training.objectives.joint import JointObjective
from ctxsim.models.training.objectives.none import NoTraining
from ctxsim.models.training.objectives.simcse import SimcseObjective
from ctxsim.models.training.objectives.teacher import TeacherObjective, teacher_cosine
from ctxsim.models.training.objectives.tfidf import TfidfObjective, tfidf_cosine
from ctxsim.models.training.objectives.tsdae import (
    TSDAE_DELETE_RATIO,
    TsdaeObjective,
    delete_words,
    tsdae_columns,
)
from ctxsim.models.training.sentence_encoder import dropout_config

#: the modules of this package, every one imported
MODULES = import_modules(__name__, __path__)

__all__ = [
    "MODULES",
    "OBJECTIVES",
    "SIMCSE_SCALE",
    "TSDAE_DELETE_RATIO",
    "ContextObjective",
    "CtxsimObjective",
    "Examples",
    "JointObjective",
    "LabelledObjective",
    "LossName",
    "NoTraining",
    "ObjectiveContext",
    "SimcseObjective",
    "TeacherObjective",
    "TfidfObjective",
    "TrainObjective",
    "TrainingPairs",
    "TsdaeObjective",
    "context_pair_rows",
    "context_pairs",
    "document_batch_order",
    "delete_words",
    "dropout_config",
    "get_objective",
    "has_dropout",
    "register",
    "right_contexts",
    "sample_with_context",
    "sentence_pool",
    "steps_for",
    "teacher_cosine",
    "tfidf_cosine",
    "tsdae_columns",
]
