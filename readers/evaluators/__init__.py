"""Evaluation task formats: one evaluator class per format and file, and their registry.

``base.py`` holds the shape (``Evaluator``: reads its files, scores a system through
``__call__``, names its ``primary_metric``, computes paired intervals) and ``EVALUATORS``. The
formats:

- ``sts`` (``sts.py``): STS sets, Spearman x100 against gold;
- ``pairs`` (``pairs.py``): pair classification (``*.pairs.tsv``), AP;
- ``qa`` (``qa.py``): question-to-answer retrieval (``*_qa.jsonl``), nDCG@10;
- ``ists`` (``ists.py``): iSTS 2016 alignment F1.

They live in readers/ because a format is first a file format: the class reads its files and
calls models/evaluation for the maths (pure, no files), so a new format is one file here and the
layering holds (flows -> tasks -> readers -> models). Every module of this package is imported
(``MODULES``), in name order, so a new one registers itself and the `evaluate` stage finds its
sets under ``evaluate.eval_dir`` with no other file changed.
"""

from ctxsim.models.plugins import import_modules
from ctxsim.readers.evaluators.base import (
    EVALUATORS,
    Evaluator,
    Similarity,
    discover_eval_dir,
    eval_dir_formats,
    register,
    set_name,
)

#: the modules of this package, every one imported
MODULES = import_modules(__name__, __path__)

from ctxsim.readers.evaluators.ists import IstsEvaluator  # noqa: E402
from ctxsim.readers.evaluators.pairs import PairsEvaluator  # noqa: E402
from ctxsim.readers.evaluators.qa import QaEvaluator  # noqa: E402
from ctxsim.readers.evaluators.sts import StsEvaluator  # noqa: E402

__all__ = [
    "EVALUATORS",
    "MODULES",
    "Evaluator",
    "IstsEvaluator",
    "PairsEvaluator",
    "QaEvaluator",
    "Similarity",
    "StsEvaluator",
    "discover_eval_dir",
    "eval_dir_formats",
    "register",
    "set_name",
]
