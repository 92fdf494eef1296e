"""The encoder route (``contextual: encoder``): a sentence encoder as the contextual model,
S(c, s) = cos(E(c), E(s)) over every context unit of the `embed` artefact, and the label the
correlation of the two sentences' profiles (models/contextual/encoder_origin.py): in closed form
from the scatter matrix (``label.encoder.form: closed``), with the softmax fit score p(c | s)
(``softmax``), or over the union of the two sentences' top-K contexts (``topk``). The sentences
are encoded by the encoder the `embed` artefact names; `select` and `score` are not read."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import Field, ValidationError

from ctxsim.models.contextual.encoder_origin import (
    closed_form_similarity,
    softmax_profile_similarity,
    topk_union_similarity,
)
from ctxsim.models.encoders import EncoderInputError, encode, encoder_identity, load_encoder
from ctxsim.store.artefacts import Artefact
from ctxsim.store.errors import InputError
from ctxsim.tasks.embed import (
    SCATTER_FILE,
    EmbedParams,
    load_scatter,
    read_embeddings,
    use_bf16,
)
from ctxsim.tasks.label.contextual.base import (
    ContextualLabels,
    ContextualModel,
    ContextualSettings,
    PairsToLabel,
    register,
)

if TYPE_CHECKING:
    from ctxsim.store.stage import StageContext


def embed_params(art: Artefact) -> EmbedParams:
    """The `embed` artefact's settings, read back typed from its manifest; an artefact whose
    settings no longer validate (its encoder gone, keys of an older version) is refused in one
    line."""
    try:
        return EmbedParams(**art.manifest["params"])
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "params"
        raise EncoderInputError(
            f"label: the embed artefact {art.path} has settings this version cannot read "
            f"(embed.{where}: {first.get('msg')}): rerun embed"
        ) from None


class EncoderSettings(ContextualSettings):
    """`label.encoder`: the encoder route (the `embed` artefact's encoder, cosine fit scores over
    every context unit of the corpus)."""

    form: Literal["closed", "softmax", "topk"] = Field(
        "closed",
        description=(
            "closed = Origin over all contexts through the scatter matrix; softmax = the fit score "
            "p(c | s) = softmax of cos / tau over all contexts (exact, blocked); topk = over the "
            "union of the two sentences' k nearest contexts"
        ),
    )
    tau: float = Field(0.05, gt=0, description="form softmax: the temperature")
    k: int = Field(32, ge=1, description="form topk: contexts per sentence")
    centred: bool = Field(
        True,
        description=(
            "compare the profiles by Pearson correlation (centred) or by cosine (uncentred)"
        ),
    )

    flat_keys: ClassVar[dict[str, str]] = {
        "form": "encoder_form",
        "tau": "tau",
        "k": "k",
        "centred": "centred",
    }


@register
class EncoderContextual(ContextualModel):
    """The `embed` artefact's encoder over every context unit (``label.encoder``: the form, its
    temperature or K, centred or not)."""

    name = "encoder"
    inputs = ("embed",)
    columns = ("label",)
    n_ctx = (
        "the corpus context units its profiles run over, the same for both sentences: every "
        "unit of the embed artefact (forms closed and softmax), k (form topk)"
    )

    settings = EncoderSettings

    def labels(
        self, ctx: StageContext, settings: EncoderSettings, pairs: PairsToLabel
    ) -> ContextualLabels:
        """Origin with the `embed` artefact's encoder as the contextual model. The sentences are
        encoded by the encoder that encoded the contexts, refused if its files changed since."""
        enc = settings
        art = ctx.input("embed")
        ep = embed_params(art)
        recorded = art.manifest.get("fingerprint_payload", {}).get("extra", {}).get("scorer")
        current = encoder_identity(ep.model)
        if recorded != current:
            raise EncoderInputError(
                f"label: the embed artefact {art.path} was encoded by {recorded}, but "
                f"embed.model {ep.model!r} is now {current}: rerun embed"
            )
        s1, s2, text_of = pairs.s1, pairs.s2, pairs.text_of
        qids = np.unique(np.r_[s1, s2])
        missing = [int(q) for q in qids if text_of.get(int(q)) is None]
        if missing:
            raise InputError(f"label: pairs name query ids without a text, e.g. {missing[:3]}")
        model = load_encoder(ep.model, ep.max_seq_length, ctx.device)
        t0 = time.perf_counter()
        texts = [text_of[int(q)] for q in qids]
        emb = encode(model, texts, ep.batch_size, bf16=use_bf16(ep, ctx.device))
        t_encode = time.perf_counter() - t0
        e1, e2 = emb[np.searchsorted(qids, s1)], emb[np.searchsorted(qids, s2)]
        n_contexts = int(art.stats.get("contexts", art.num_rows))
        if enc.form == "closed":
            m = load_scatter(art.files_dir / SCATTER_FILE).matrix(centred=enc.centred)
            lab = closed_form_similarity(e1, e2, m)
            n_ctx = n_contexts
        elif enc.form == "softmax":
            lab = softmax_profile_similarity(
                e1, e2, read_embeddings(art), enc.tau, centred=enc.centred, block=256
            )
            n_ctx = n_contexts
        else:
            lab = topk_union_similarity(e1, e2, read_embeddings(art), enc.k, centred=enc.centred)
            n_ctx = min(enc.k, n_contexts)
        sizes = np.full(len(s1), n_ctx, dtype=np.int64)
        return ContextualLabels(
            columns={"label": lab},
            n_ctx1=sizes,
            n_ctx2=sizes,
            # the encoder's own cosine of the two sentences: what the contexts add over it
            views={"scorer_cosine": (e1.astype(np.float64) * e2).sum(axis=1)},
            stats={
                "encoder_form": enc.form,
                "encoder_contexts": n_contexts,
                "encoder_sentences": len(qids),
                "encoder_encode_seconds": round(t_encode, 3),
            },
        )
