"""An encoder as the discriminative term of Eq. 3: the fit of a sentence in a context is the
cosine of their sentence-encoder embeddings, cos(E(c< + c>), E(s)), in place of the BiLSTM's
log p(y=1 | s, c). The paper's contextual model may be discriminative (Sec. 3, step 1); this lets a
config mix the encoder's fit with the generative terms (``lambda_disc`` weighs it) over a context
set small enough for the LM. Over all corpus contexts the encoder alone has a closed form
(models/contextual/encoder_origin.py, the `embed` stage and ``label.contextual: encoder``).

``score.disc_scorer: encoder`` selects it, ``score.disc_encoder`` names the model (registry name
or a model directory). It reads no artefact; ``disc_source`` is ``encoder`` (or ``off``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxsim.models.contextual.encoder_origin import unit_rows
from ctxsim.scores.scorers.base import ContextScorer, Scored, Windows, register_scorer


@register_scorer
class EncoderScorer(ContextScorer):
    """cos(E(c< c>), E(s)) per window, each distinct sentence and context encoded once."""

    name = "encoder"
    role = "disc"
    columns = ("disc_logprob", "disc_source")

    def inputs(self, params: Any) -> tuple[str, ...]:
        return ()

    def score(self, ctx: Any, params: Any, windows: Windows) -> Scored:
        n = len(windows)
        if params.lambda_disc == 0.0 or n == 0:
            src = np.full(n, "off" if params.lambda_disc == 0.0 else "encoder", dtype=object)
            return Scored({"disc_logprob": np.zeros(n, np.float32), "disc_source": src})
        from ctxsim.models.encoders import load_encoder

        model = load_encoder(params.disc_encoder, None, ctx.device, model_key="score.disc_encoder")
        texts = np.asarray(
            [f"{a} {b}".strip() for a, b in zip(windows.lefts, windows.rights, strict=True)],
            dtype=object,
        )
        u_sent, s_idx = np.unique(windows.sents.astype(str), return_inverse=True)
        u_ctx, c_idx = np.unique(texts.astype(str), return_inverse=True)
        kw = {"batch_size": params.disc_batch, "convert_to_numpy": True}
        es = unit_rows(model.encode(u_sent.tolist(), **kw))
        ec = unit_rows(model.encode(u_ctx.tolist(), **kw))
        cos = (es[s_idx] * ec[c_idx]).sum(axis=1).astype(np.float32)
        return Scored(
            {"disc_logprob": cos, "disc_source": np.full(n, "encoder", dtype=object)},
            {"encoder_sentences": len(u_sent), "encoder_contexts": len(u_ctx)},
        )
