"""Generative context scorers of Sec. 3.2.2, Eq. (2), and the three terms of Eq. (3).

One protocol for every backend::

    log_prob(direction, sources, targets) -> np.ndarray   # mean log-prob per target token

``direction`` names which slot of a context window ``[c<, s, c>]`` is generated:

====== ======================== ==================== ==============================
name   Eq. (3) term             source (given)       target (generated)
====== ======================== ==================== ==============================
fwd    (1/|s|) log p(s|c<,c>)   (c<, None, c>)       s
left   (1/|c<|) log p(c<|s,c>)  (None, s, c>)        c<
right  (1/|c>|) log p(c>|c<,s)  (c<, s, None)        c>
====== ======================== ==================== ==============================

A *source* is the triple ``(c<, s, c>)`` with the generated slot set to ``None``
(:func:`eq3_example` builds it). Backends:

* :class:`Seq2SeqScorer` — transformers ``EncoderDecoderModel`` (BERT2BERT warm-started from a
  packaged BERT such as ``minilm``, or built from a config from scratch). The encoder reads
  ``[CLS] <ctrl> A [SEP] B [SEP] C [SEP]`` where the generated slot is ``[MASK]`` and ``<ctrl>`` is
  a per-direction control token; one shared model or one model per direction. The target is
  scored with its closing ``[SEP]`` (the model also says where the text ends).
* :class:`CausalPrefixScorer` — any ``AutoModelForCausalLM``; a prompt template per direction
  whose last placeholder is ``{target}``; only the target tokens are scored.

Every text is tokenised once, without special tokens (:meth:`tokenize`), and sources and targets
are assembled from token ids (:meth:`build_ids`), so the batched engine
(models/contextual/score_engine.py), the training loop (models/contextual/generator_training.py)
and this module's
plain :meth:`log_prob` all score exactly the same token sequences. Long parts are cut to the
config's limits: the left context keeps its last tokens (those next to the slot), the right
context and the sentence their first.

Files: ``protocol.py`` (directions, sources, limits, the base class), ``seq2seq.py`` and
``causal.py`` (the backends; ``prefix.py``: the causal one's shared prompt beginnings),
``build.py`` (tiny models, vocabularies, warm starts).
"""

from ctxsim.models.contextual.generator.build import (
    TinyConfig,
    add_control_tokens,
    tiny_causal,
    tiny_seq2seq,
    train_wordpiece_tokenizer,
    warm_start_seq2seq,
)
from ctxsim.models.contextual.generator.causal import CausalPrefixScorer
from ctxsim.models.contextual.generator.protocol import (
    CONTROL_TOKENS,
    DEFAULT_TEMPLATES,
    DIRECTIONS,
    TARGET_SLOT,
    GenerativeScorer,
    Ids,
    Limits,
    Source,
    check_direction,
    eq3_example,
)
from ctxsim.models.contextual.generator.seq2seq import Seq2SeqScorer

__all__ = [
    "CONTROL_TOKENS",
    "CausalPrefixScorer",
    "DEFAULT_TEMPLATES",
    "DIRECTIONS",
    "GenerativeScorer",
    "Ids",
    "Limits",
    "Seq2SeqScorer",
    "Source",
    "TARGET_SLOT",
    "TinyConfig",
    "add_control_tokens",
    "check_direction",
    "eq3_example",
    "tiny_causal",
    "tiny_seq2seq",
    "train_wordpiece_tokenizer",
    "warm_start_seq2seq",
]
