"""Stage `train`: the Siamese surrogate of Sun et al. (2022), Sec. 3.4.

A transformers backbone with mean pooling over its last layer; predicted similarity = cosine of
the two sentence vectors; the objective is the L2 distance to the generated labels
(sentence-transformers' ``CosineSimilarityLoss``), optimised with Adam (lr 1e-4, betas 0.9/0.999,
Sec. 4.1 "Implementation Details"; AdamW with weight decay 0 is Adam). Optionally the CLRCMD
contrastive loss over RCMD similarities (Lee et al. 2022, Sec. 3.3) instead, or the rank-aware
``CoSENTLoss`` / ``AnglELoss``. ``objective`` swaps the labels for a peer on the same sentences,
steps, batch size and seed (models/training/objectives/): TF-IDF cosine labels, unsupervised SimCSE,
TSDAE, each sentence's real right context as its positive (``context``: reads `queries` and
`shard`), a larger encoder's cosine (``teacher``), or no training at all; ``train_cpu_seconds``
in the metrics is what each cost.

sentence-transformers' trainer brings evaluation on STSb dev every ``eval_steps`` (or the label
dev split when no STSb dev is found), keeping the best checkpoint, and mid-epoch resume from the
checkpoints in ``ctx.cache_dir`` (a checkpoint whose save was cut short is dropped; each complete
one is sealed with a sha256 of its files (store/checked.py) and checked before a resume loads it:
a mismatch is moved aside with a warning and the resume takes the latest good one, or starts
over; all of them are deleted once the model is saved). Output: ``files/model`` (a
sentence-transformers directory with a model card), ``files/metrics.json``, and a table with the
evaluation history.

Files: ``params.py`` (the config section), ``stage.py`` (the stage), ``data.py`` (the label
columns, the training pairs, the dev set), ``trainer.py`` (sentence-transformers' trainer:
arguments, checkpoints, resume, the fit), ``report.py`` (metrics, model card, history rows); the
tiny backbone is built by models/training/tiny_backbone.py, the objectives live in
models/training/objectives/.
"""

from ctxsim.tasks.train.params import TrainParams
from ctxsim.tasks.train.stage import TrainStage

__all__ = ["TrainParams", "TrainStage"]
