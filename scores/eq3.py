"""S(s, c) of Eq. (3) for (sentence, context) rows, with its persistent cache.

One place computes the score every stage that needs S calls: `score` (the pairs labelling
needs), `select` (candidates in Eq. 3 order) and therefore Origin (the pipeline on STS queries).
Terms (Sec. 3.3, Eq. 3): ``gen_fwd`` = (1/|s|) log p(s|c<,c>), ``gen_left`` = (1/|c<|) log
p(c<|s,c>), ``gen_right`` = (1/|c>|) log p(c>|c<,s) from the `generator` artefact through the
batched engine (models/contextual/score_engine.py); ``disc_logprob`` = log sigmoid of the Eq. (1)
logit, taken
from `screen` where it ranked that (query, context) and otherwise computed with the
`discriminator` artefact's model; ``disc_source`` records which (screen / model / missing: 0.0).
S = lambda_disc * disc + lambda_fwd * fwd + lambda_left * left + lambda_right * right.
With ``pmi: [d, ...]`` those terms are taken as pointwise mutual information (the term minus the
same target scored without the other side, recorded in ``null_<d>``; see ScoreParams.pmi).
Generated contexts (tasks/gencontexts.py) are one-sided slots: a term whose target side is
absent (c< of a continuation, c> of a preceding sentence) is 0.0 and never computed, and so is its
disc term (the discriminator reads both sides).
Generative terms already scored on the artefact root are read from ``ROOT/_cache/scores``
(store/score_cache.py) instead of recomputed.

The terms come from scorers (``scores/scorers/``: a class each, with its name, the inputs it needs
and its per-window values): ``discriminator`` gives the disc term, ``generator`` the generative
ones; this module builds the windows and combines the terms into S.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator, model_validator

from ctxsim.models.contextual.eq3_combine import Lambdas, combine_eq3
from ctxsim.models.contextual.generator import DIRECTIONS
from ctxsim.scores.scorers import INT8_FLOAT_LAYERS, Windows, get_scorer
from ctxsim.scores.scorers.generator import _generate_rows
from ctxsim.scores.slots import contexts_with_generated, sentences_with_generated
from ctxsim.store.artefacts import Artefact, ArtefactStore
from ctxsim.store.stage import RunParams, StageContext, StageParams, knob
from ctxsim.store.tables import rows_of

__all__ = [
    "INT8_FLOAT_LAYERS",
    "SCORE_SCHEMA",
    "ScoreParams",
    "_generate_rows",
    "query_texts",
    "score_rows",
    "score_with_artefacts",
]

SCORE_SCHEMA = pa.schema(
    [
        ("query_id", pa.int64()),
        ("context_id", pa.int64()),
        ("disc_logprob", pa.float32()),
        ("gen_fwd", pa.float32()),
        ("gen_left", pa.float32()),
        ("gen_right", pa.float32()),
        ("S", pa.float32()),
        ("disc_source", pa.string()),  # screen | model | missing (disc_logprob 0.0) | off
        # the null term subtracted from gen_<d> when `pmi` names d (NaN otherwise)
        ("null_fwd", pa.float32()),
        ("null_left", pa.float32()),
        ("null_right", pa.float32()),
    ]
)


class ScoreParams(StageParams):
    lambda_disc: float = Field(
        1.0,
        description=(
            "Weight of the discriminative term log D(s, c) in Eq. 3 (the paper does not publish its"
            " values); 0 leaves it out."
        ),
    )
    lambda_fwd: float = Field(
        1.0,
        description="Weight of the forward generative term log p(s | c<, c>) in Eq. 3.",
    )
    lambda_left: float = Field(
        1.0,
        description="Weight of the left generative term log p(c< | s, c>) in Eq. 3.",
    )
    lambda_right: float = Field(
        1.0,
        description="Weight of the right generative term log p(c> | c<, s) in Eq. 3.",
    )
    token_budget: int = knob(
        8192,
        ge=1,
        description=(
            "Padded source + target tokens per forward call of the scoring engine. Raise it on a "
            "GPU (docs/operations.md: 65536 to 262144 on 80 GB); speed and memory only, out of the "
            "fingerprint and the score cache key."
        ),
    )
    max_batch: int = knob(
        256,
        ge=1,
        description=(
            "Windows per forward call at most. Speed and memory only: out of the fingerprint."
        ),
    )
    max_logit_elems: int = knob(
        1 << 27,
        ge=1,
        description=(
            "Bound on batch x target positions x vocabulary of the float32 logits of one call "
            "(memory). Speed and memory only: out of the fingerprint."
        ),
    )
    compile_blocks: bool = knob(
        False,
        description=(
            "torch.compile each layer's MLP and RMSNorms of a causal scorer (the layers share one "
            "small graph: seconds to compile), fusing the element-wise work around the products:"
            " books_generated's right term 1.33x on one CPU thread, 99.5 MB of peak memory "
            "growth against 522.6, float32 agreement Spearman 0.99977 (bf16 eager 0.99980; "
            "bench/results/score_lm_route_blocks.md). Scores move by float rounding, as with a "
            "token budget; eager with a warning where nothing can compile. Speed only: out of "
            "the fingerprint."
        ),
    )
    bf16_on_cuda: bool = Field(
        True,
        description=(
            "Score in bfloat16 autocast on CUDA: 1.42x float32 on an H200 with the same ranks "
            "(Spearman 0.99994, bench/results/gpu_h200.md); values differ slightly, so it is part "
            "of the fingerprint."
        ),
    )
    bf16_on_cpu: bool = Field(
        False,
        description=(
            "Score in bfloat16 on CPU: about 2x on CPUs with AVX512-BF16/AMX; ranks unchanged "
            "(measured), values differ slightly."
        ),
    )
    int8_on_cpu: bool = Field(
        False,
        description=(
            "Causal scorer's linear layers in int8 on CPU (torch dynamic quantisation, per channel;"
            " the head and the MLP down projections, where the activation outliers are, stay "
            "float32): 2.1x fewer CPU-s per window with SmolLM2, Spearman with float32 0.96 (left) "
            "/ 0.75 (PMI left) on 60 windows (bench/results/cheaper_scoring.md); wins over "
            "bf16_on_cpu; its own score-cache namespace."
        ),
    )
    bf16_weights_on_cpu: bool = Field(
        False,
        description=(
            "Causal scorer's weights cast to bfloat16 on CPU (no autocast; log-softmax in float32)"
            " and its prompts grouped: on CPUs with AMX (Sapphire Rapids and later) 3-4x float32 "
            "and faster than int8_on_cpu (bench/results/score_lm_route_bf16.md); on CPUs without "
            "bf16 units slower than float32. Not with int8_on_cpu; its own score-cache namespace."
        ),
    )
    w8a8_on_cpu: bool = Field(
        False,
        description=(
            "With bf16_weights_on_cpu: the causal scorer's linear layers but the vocabulary head "
            "as int8 products (SmoothQuant: weights per output channel, activations per token, "
            "smoothed from a bundled calibration text; models/contextual/quantize.py Int8Linear):"
            " VNNI/AMX-INT8 run twice bf16's rate. Scores close to bf16's, not equal: its own "
            "score-cache namespace (docs/scoring.md#cheaper-scoring)."
        ),
    )
    w8a8_bf16_layers: list[str] = Field(
        default_factory=list,
        description=(
            "With w8a8_on_cpu: the linear layers (by name ending, e.g. down_proj) that stay bf16 "
            "products. On SmolLM2 the MLP down projections hold most of int8's distance from "
            "float32: kept, Spearman with float32 0.99899 instead of 0.99829 on books windows at "
            "1.12x bf16's engine instead of 1.31x (bench/results/score_lm_route_w8a8_bf16down.md;"
            " python -m bench.bench_w8a8_layers ranks another model's layers). Its own "
            "score-cache namespace."
        ),
    )
    disc_batch: int = knob(
        256,
        ge=1,
        description=(
            "Windows per discriminator forward pass (for the pairs the screen did not score). Speed"
            " and memory only: out of the fingerprint."
        ),
    )
    disc_scorer: Literal["discriminator", "encoder"] = Field(
        "discriminator",
        description=(
            "The scorer of the discriminative term (scores/scorers/): the BiLSTM discriminator, or "
            "encoder: the cosine of a sentence encoder's embeddings of s and [c<, c>] (disc_encoder"
            " names it)."
        ),
    )
    disc_encoder: str = Field(
        "minilm",
        json_schema_extra={"names_model": []},
        description="disc_scorer encoder: the sentence encoder, a registry name or path.",
    )
    added_defaults: ClassVar[dict[str, Any]] = {
        "disc_scorer": "discriminator",
        "disc_encoder": "minilm",
        "bf16_weights_on_cpu": False,
        "w8a8_on_cpu": False,
        "w8a8_bf16_layers": [],
    }
    skip_zero_lambda: bool = Field(
        True,
        description=(
            "Do not score a generative term whose lambda is 0 (a third of the scoring time each); "
            "its column is NaN, so its ablation label is absent. false: score it anyway for the "
            "ablation table."
        ),
    )
    cache: bool = Field(
        True,
        description=(
            "Reuse generative terms scored by earlier runs on this root (ROOT/_cache/scores): "
            "growing |Cs|, adding a term or relabelling other pairs pays only for windows not "
            "scored before. false rescores everything."
        ),
    )
    pmi: list[Literal["fwd", "left", "right"]] = Field(
        default_factory=list,
        description=(
            "Generative terms taken as pointwise mutual information between s and c: the term minus"
            " the same target scored with the other side left out (left/right: the sentence, giving"
            " log p(c<|c>) / log p(c>|c<); fwd: both contexts, giving log p(s)). A context's own "
            "likelihood otherwise dominates v_s and Eq. 4's cosine; one extra pass per distinct "
            "context (or sentence), cached. Not in the paper (Eq. 3 as printed is []); measured on "
            "STSb dev in configs/books.yaml."
        ),
    )
    adaptive_rounds: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=list,
        description=(
            "Adaptive |Cs| (models/contextual/adaptive_cs.py): score each pair's contexts in "
            "rounds of these "
            "|Cs| prefixes (the full Cs is always the last round) and stop a pair once its Eq. 4 "
            "label moved by at most adaptive_tol between two rounds; the label stage labels it with"
            " the |Cs| it stopped at. Empty: off. On, the score stage runs as one shard."
        ),
    )
    adaptive_tol: float = Field(
        0.05,
        ge=0.0,
        description=(
            "adaptive_rounds: the largest change of a pair's label between two rounds, in standard "
            "deviations of the first round's labels, that stops it. Smaller is closer to the full "
            "Cs and costs more."
        ),
    )

    @field_validator("w8a8_bf16_layers")
    @classmethod
    def _layers_as_a_set(cls, v: list[str]) -> list[str]:
        """Sorted and once each: the same layers kept give the same fingerprint."""
        return sorted(set(v))

    @model_validator(mode="after")
    def _one_cpu_precision(self) -> ScoreParams:
        if self.int8_on_cpu and self.bf16_weights_on_cpu:
            raise ValueError(
                "score.int8_on_cpu and score.bf16_weights_on_cpu are exclusive: pick one CPU "
                "precision for the causal scorer"
            )
        if self.w8a8_on_cpu and not self.bf16_weights_on_cpu:
            raise ValueError(
                "score.w8a8_on_cpu runs on bf16 weights: set score.bf16_weights_on_cpu too"
            )
        if self.w8a8_bf16_layers and not self.w8a8_on_cpu:
            raise ValueError(
                "score.w8a8_bf16_layers names layers kept out of score.w8a8_on_cpu's int8 "
                "products: set score.w8a8_on_cpu too"
            )
        return self

    def directions(self) -> list[str]:
        lam = {"fwd": self.lambda_fwd, "left": self.lambda_left, "right": self.lambda_right}
        return [d for d in DIRECTIONS if lam[d] != 0.0 or not self.skip_zero_lambda]


def _lookup(keys_sorted: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    return rows_of(keys_sorted, wanted, f"score: {what} ids")


def query_texts(queries: pa.Table, qid: np.ndarray) -> np.ndarray:
    """The text of each query id (object array), from a table with query_id and text."""
    qt = queries.select(["query_id", "text"]).sort_by("query_id")
    q_text = np.asarray(qt.column("text").to_pylist(), dtype=object)
    return q_text[_lookup(qt.column("query_id").to_numpy(), qid, "query")]


def score_rows(
    ctx: StageContext,
    p: ScoreParams,
    qid: np.ndarray,
    cid: np.ndarray,
    sents: np.ndarray,
    disc: str | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    """Eq. 3 terms and S for (query, context) rows whose query texts are ``sents``: the score
    stage's computation, also used by `select` to order candidates by S (``order_by: score``).
    Needs the inputs `contexts`, `shard` and `generator`, and those of the scorer ``disc`` that
    gives the disc term (scores/scorers/; the `discriminator` one reads `screen` /
    `discriminator`)."""
    t0 = time.perf_counter()
    u_ctx = np.unique(cid)
    co = contexts_with_generated(ctx).select(["context_id", "left_sent_ids", "right_sent_ids"])
    co = co.filter(pc.is_in(co.column("context_id"), pa.array(u_ctx))).sort_by("context_id")
    c_keys = co.column("context_id").to_numpy()
    _lookup(c_keys, u_ctx, "context")
    left_ids = co.column("left_sent_ids").to_pylist()
    right_ids = co.column("right_sent_ids").to_pylist()
    need = np.unique(np.asarray([s for x in left_ids + right_ids for s in x], np.int64))
    sh = sentences_with_generated(ctx)
    sh = sh.filter(pc.is_in(sh.column("sent_id"), pa.array(need))).sort_by("sent_id")
    s_keys = sh.column("sent_id").to_numpy()
    s_text = np.asarray(sh.column("text").to_pylist(), dtype=object)
    _lookup(s_keys, need, "sentence")

    def side(rows: list[list[int]]) -> np.ndarray:
        return np.asarray(
            [" ".join(s_text[np.searchsorted(s_keys, r)]) for r in rows], dtype=object
        )

    crow = np.searchsorted(c_keys, cid)
    lefts, rights = side(left_ids)[crow], side(right_ids)[crow]
    windows = Windows(qid, cid, sents, lefts, rights, left_ids, right_ids, crow, s_keys, s_text)

    gen = get_scorer("generator", "gen").score(ctx, p, windows)
    dterm = get_scorer(disc or p.disc_scorer, "disc").score(ctx, p, windows)
    return _score_table(p, windows, gen.columns | dterm.columns), _stats(
        windows, u_ctx, t0, gen.stats, dterm.columns["disc_source"]
    )


def score_with_artefacts(
    store: ArtefactStore,
    run: RunParams,
    p: ScoreParams,
    upstream: dict[str, Artefact],
    qid: np.ndarray,
    cid: np.ndarray,
    sents: np.ndarray,
    disc: str | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    """``score_rows`` outside a stage (``ctxsim explain``, for sentences a run never labelled):
    the stage context it needs, on ``store`` with these ``upstream`` artefacts, in a scratch
    folder removed afterwards; generative terms scored before on the root come from its cache."""
    with tempfile.TemporaryDirectory(prefix="ctxsim-score-") as work:
        ctx = StageContext(
            stage="score",
            params=p,
            run=run,
            fingerprint="outside-a-stage",
            upstream=upstream,
            store=store,
            workdir=Path(work),
        )
        return score_rows(ctx, p, qid, cid, sents, disc)


def _score_table(p: ScoreParams, w: Windows, terms: dict[str, np.ndarray]) -> pa.Table:
    """The scorers' columns and S = their Eq. 3 combination, in ``SCORE_SCHEMA``'s order."""
    lam = Lambdas(p.lambda_disc, p.lambda_fwd, p.lambda_left, p.lambda_right)
    disc = terms["disc_logprob"]
    S = combine_eq3(disc, terms["gen_fwd"], terms["gen_left"], terms["gen_right"], lam)
    return pa.table(
        {
            "query_id": w.qid,
            "context_id": w.cid,
            "disc_logprob": disc,
            "gen_fwd": terms["gen_fwd"],
            "gen_left": terms["gen_left"],
            "gen_right": terms["gen_right"],
            "S": S,
            "disc_source": terms["disc_source"],
            **{f"null_{d}": terms[f"null_{d}"] for d in DIRECTIONS},
        },
        schema=SCORE_SCHEMA,
    )


def _stats(
    w: Windows, u_ctx: np.ndarray, t0: float, gen: dict[str, Any], source: np.ndarray
) -> dict[str, Any]:
    return {
        "pairs": len(w),
        "queries": len(np.unique(w.qid)),
        "contexts": len(u_ctx),
        "gen_seconds": gen["gen_seconds"],
        "seconds": round(time.perf_counter() - t0, 3),
        "forward_calls": gen["forward_calls"],
        "encoder_sources": gen["encoder_sources"],
        "target_tokens": gen["target_tokens"],
        "padded_tokens": gen["padded_tokens"],
        "oom_retries": gen["oom_retries"],
        "disc_from_screen": int(np.sum(source == "screen")),
        "disc_from_model": int(np.sum(source == "model")),
        "disc_missing": int(np.sum(source == "missing")),
        "cache_hits": gen["cache_hits"],  # generative terms read from the score cache
        "backend": gen["backend"],
    }
