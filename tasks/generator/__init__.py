"""Stage `generator`: the generative context scorers of Sec. 3.2.2 (Eq. 2), trained on the corpus.

Training windows ``[c<, s, c>]`` come from the `contexts` artefact (w sentences per side, inside
one section); documents are split into train and held-out sets, so validation never sees a
training document. Each window gives one example per Eq. (3) direction (fwd, left, right).

``backbone``: ``tiny-random`` (a from-scratch model: WordPiece vocabulary learnt from the training
windows + a small BERT2BERT or Llama-style config sized by ``tiny_*``), or a registry short name /
path / hub id (models/registry.py): ``minilm`` warm-starts BERT2BERT, ``gemma-270m`` and
``smollm2-135m`` are causal prefix LMs. ``train_steps: 0`` packages a pretrained backbone as is.

Published files (``files/``): ``generator.json`` (backend, templates, limits, where the weights
are) and, unless a pretrained backbone is used untouched, the weights as safetensors
(``model/`` or ``model_<direction>/``) with the tokenizer. Training checkpoints live in the
stage's cache dir, so a crash resumes mid-epoch.

Rows: one per held-out evaluation sentence — its own context and a random held-out context of
similar length, each Eq. (3) generative term for both, and S_gen (lambda-weighted sum); the stats
say how often the own context wins, per term, for S_gen and for the left and right terms as
PMI (``score.pmi``: minus the target's log-prob without the sentence), and the validation
perplexity per direction.

Files: ``params.py`` (the config section), ``stage.py`` (the stage), ``scorers.py`` (building
the scorer: tiny, pretrained or a distilled student), ``data.py`` (the windows, their split, the
examples), ``training.py`` (the checkpointed training, the loss curve, the teacher's stats),
``evaluation.py`` (own vs random context on held-out sentences).
"""

from ctxsim.tasks.generator.params import GeneratorParams
from ctxsim.tasks.generator.stage import GeneratorStage

__all__ = ["GeneratorParams", "GeneratorStage"]
