"""Stage `evaluate` and ``evaluate_model``: STS, hard splits and iSTS for a trained surrogate.

* STS (Sun et al. 2022, Sec. 4.3, Table 2): every set found in ``eval_dir`` (readers/sts.py);
  Spearman and Pearson x100 in the "all" (subsets of a year concatenated) and "mean" conventions;
  the surrogate against its untrained backbone, all-MiniLM-L6-v2 (when installed) and the
  model-free DynaMax-Jaccard (Zhelezniak et al. 2019); paired BCa bootstrap intervals for the
  surrogate's difference to each baseline.
* Similarities: cosine of mean-pooled embeddings and RCMD (Lee et al. 2022, Eq. 4 + Sec. 3.3).
* Hard splits of Wieting et al. (2020) over the pooled STS12-16 pairs.
* iSTS 2016 alignment F1 (Lee et al. Sec. 4.3) from RCMD token contributions, scored with the
  re-implemented organisers' F1 against CLRCMD's filtered gold (``*.wa.equi``) and the raw gold.
* Report: ``report.md`` (the 7-set table in the paper's layout), ``scatter.png`` (predicted vs gold
  per set), ``heatmaps.png`` (token-pair contributions of a positive, a neutral and a negative
  pair, as CLRCMD's Fig. 2) and ``results.json`` in ``ctx.files_dir``.

* Every other task format of readers/evaluators found in ``eval_dir`` (pair classification AP,
  question-to-answer retrieval nDCG@10, and any format registered there): a table per format
  and paired intervals of the surrogate against each system (``domain.py``).

Files: ``params.py`` (the config section), ``stage.py`` (the stage), ``evaluate_model.py``
(sets, systems, intervals, hard splits), ``domain.py`` (the registry's formats beside STS),
``encoders.py`` (sentence/token vectors, DynaMax), ``encoding_cache.py`` (the baselines'
vectors of the domain tasks kept under ROOT/_cache/evaluate),
``ists.py`` (alignments), ``report.py`` (Markdown and plots). Paired BCa bootstraps and
Spearman live in models/evaluation/metrics.py, the similarities in
models/evaluation/similarity.py.
"""

from ctxsim.tasks.evaluate.encoders import encode_sentences, load_st, pair_similarities
from ctxsim.tasks.evaluate.evaluate_model import DATA_HINT, evaluate_model
from ctxsim.tasks.evaluate.params import EvaluateParams
from ctxsim.tasks.evaluate.report import SEVEN
from ctxsim.tasks.evaluate.stage import ROW_SCHEMA, EvaluateStage

__all__ = [
    "DATA_HINT",
    "ROW_SCHEMA",
    "SEVEN",
    "EvaluateParams",
    "EvaluateStage",
    "encode_sentences",
    "evaluate_model",
    "load_st",
    "pair_similarities",
]
