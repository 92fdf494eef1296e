"""Stage `label`: the Origin similarity of every pair (Sec. 3.3, Eq. 4) — the product's output.

For a pair (s1, s2): C = Cs1 + Cs2 (from `select`), v_s = [S(s, c) for c in C], label =
cosine(v_s1, v_s2). S and its Eq. 3 terms come from the `score` artefact, which holds each needed
(s, c) once (``label_lm.required_score_table`` says which); here they are only looked up, vectorised
over blocks of pairs (models/contextual/origin.py). The label is also computed from each term alone
(label_disc, label_fwd, label_left, label_right) so that ablations need no rescoring.

With ``contextual: encoder`` the contextual model is a sentence encoder instead: S(c, s) =
cos(E(c), E(s)) over every context unit of the corpus (the `embed` artefact), and the label is the
correlation of the two profiles (models/contextual/encoder_origin.py): in closed form from the
scatter matrix (``encoder_form: closed``), with the softmax fit score p(c | s) (``softmax``), or
over the union of the two sentences' top-K contexts (``topk``). The sentences are encoded by
the scorer the `embed` artefact names; `select` and `score` are not read.

Splits: a seeded hash of the unordered pair assigns train/dev/test (paper 98/1/1, Sec. 3.4);
given pairs (the Origin evaluation on STS) get split "eval".

For given pairs the stats also hold Spearman x100 per evaluation set under the "all" convention
(subsets of a year concatenated) and the "mean" convention (mean over subsets), per Eq. 3 term
alone, without each term (Table 9; λ recovered from the score rows), and for two baselines on
the same pairs: the TF-IDF cosine of the two sentences and the generator backbone's mean-pooled
cosine; ``files/origin.json`` holds the same as a nested report.

Files: ``label_lm.py`` (the LM route: the scores each pair needs, Eq. 4 over them, the ablation
views), ``label_encoder.py`` (the encoder route), ``label_report.py`` (stats, the Origin report,
the histogram), ``label_diagnostics.py`` (can the labels be trusted, the contamination check).
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator

from ctxsim.models.contextual.origin import pair_split
from ctxsim.product.contamination import ContaminationParams
from ctxsim.store.cost_model import PerQueryRows
from ctxsim.store.errors import InputError
from ctxsim.store.stage import Stage, StageContext, StageParams, knob
from ctxsim.tasks.label_diagnostics import contamination_files, diagnostics
from ctxsim.tasks.label_encoder import encoder_labels
from ctxsim.tasks.label_lm import lm_labels
from ctxsim.tasks.label_report import (
    SPLITS,
    label_stats,
    origin_report,
    origin_stats,
    plot_labels,
)


class LabelParams(StageParams):
    contextual: Literal["lm", "encoder"] = Field(
        "lm",
        description=(
            "the contextual model: lm = Eq. 3 scores (score stage) over the context sets of select;"
            " encoder = the embed stage's scorer, cosine fit scores over every context unit of the "
            "corpus"
        ),
    )
    encoder_form: Literal["closed", "softmax", "topk"] = Field(
        "closed",
        description=(
            "encoder only: closed = Origin over all contexts through the scatter matrix; softmax = "
            "the fit score p(c | s) = softmax of cos / tau over all contexts (exact, blocked); topk"
            " = over the union of the two sentences' k nearest contexts"
        ),
    )
    tau: float = Field(0.05, gt=0, description="encoder_form softmax: the temperature")
    k: int = Field(32, ge=1, description="encoder_form topk: contexts per sentence")
    centred: bool = Field(
        True,
        description=(
            "encoder only: compare the profiles by Pearson correlation (centred) or by cosine "
            "(uncentred)"
        ),
    )
    split_ratios: list[float] = Field(
        default_factory=lambda: [98.0, 1.0, 1.0],
        description=(
            "Relative sizes of the train, dev and test splits the labelled pairs are assigned to "
            "(seeded)."
        ),
    )
    similarity: Literal["cosine", "pearson", "neg_rmse", "cross_fit"] = Field(
        "cosine",
        description=(
            "How the context vectors v_s1 and v_s2 are compared (models/contextual/origin.py "
            "SIMILARITIES); "
            "the paper's Eq. 4 is cosine."
        ),
    )
    block_pairs: int = knob(
        20_000,
        ge=1,
        description=(
            "Pairs labelled per vectorised block; bounds memory, each pair's label does not depend "
            "on it. Out of the fingerprint."
        ),
    )
    hist_bins: int = Field(
        20,
        ge=2,
        description="Bins of the label histogram in the stats and the report.",
    )
    ablations: bool = Field(
        True,
        description=(
            "For given pairs, also report each Eq. 3 term's labels alone and without it (Spearman "
            "against gold)."
        ),
    )
    reference_encoder: str = Field(
        "none",
        description=(
            "Diagnostics (product/diagnostics.py): labels compared against a reference encoder's "
            "similarity: none, tfidf (word TF-IDF cosine) or a sentence-transformers registry name "
            "or path (its weights must be installed)."
        ),
    )
    near_one_tol: float = Field(
        1e-4,
        gt=0,
        description=(
            "Diagnostics: the share of labels within this distance of 1.0 is reported (Eq. 4 "
            "cosines crowd near 1)."
        ),
    )
    warn_band_width: float = Field(
        0.05,
        ge=0,
        description=(
            "Diagnostics: warn when most labels sit in a band narrower than this (labels that "
            "barely vary teach little)."
        ),
    )
    contamination: ContaminationParams = Field(
        default_factory=ContaminationParams,
        description=(
            "The STS test-set contamination check of the mined pairs (product/contamination.py)."
        ),
    )
    max_nonfinite_fraction: float = Field(
        0.01,
        ge=0.0,
        le=1.0,
        exclude=True,
        description=(
            "Fail the stage when more than this share of the labels is NaN or infinite (a pair "
            "whose context sets share no scored context); all of them always fails. A check, not an"
            " input of the output: kept out of the fingerprint. `ctxsim export` refuses any "
            "non-finite label."
        ),
    )

    #: the encoder route's keys, out of the fingerprint at their defaults: LM-route configs
    #: keep their label artefacts
    added_defaults: ClassVar[dict[str, Any]] = {
        "contextual": "lm",
        "encoder_form": "closed",
        "tau": 0.05,
        "k": 32,
        "centred": True,
    }

    def link(self, sections: dict[str, StageParams]) -> None:
        c = self.contamination
        if c.enabled and c.sts_dir is None:
            for name in ("train", "evaluate"):
                sts_dir = getattr(sections.get(name), "sts_dir", None)
                if sts_dir:
                    c.sts_dir = sts_dir
                    break

    @field_validator("split_ratios")
    @classmethod
    def _three(cls, v: list[float]) -> list[float]:
        if len(v) != 3 or min(v) < 0 or sum(v) <= 0:
            raise ValueError("label.split_ratios needs three non-negative numbers (train/dev/test)")
        return v


LABEL_SCHEMA = pa.schema(
    [
        ("pair_id", pa.int64()),
        ("s1_id", pa.int64()),
        ("s2_id", pa.int64()),
        ("s1", pa.string()),
        ("s2", pa.string()),
        ("label", pa.float32()),
        ("label_disc", pa.float32()),
        ("label_fwd", pa.float32()),
        ("label_left", pa.float32()),
        ("label_right", pa.float32()),
        ("n_ctx1", pa.int32()),
        ("n_ctx2", pa.int32()),
        ("source", pa.string()),
        ("split", pa.string()),
        ("dataset", pa.string()),
        ("subset", pa.string()),
        ("gold", pa.float64()),
    ]
)


class NonFiniteLabelsError(InputError):
    """Too many labels are NaN or infinite: the settings left pairs without scored contexts."""


def check_finite(stats: dict[str, Any], max_fraction: float, queries_empty: Any = None) -> None:
    """Raise when all labels, or more than ``max_fraction`` of them, are not finite (from the
    stage's ``pairs`` and ``pairs_nan``); ``queries_empty``, the select stage's count of
    queries without any context, is the usual cause and is named."""
    n, bad = int(stats.get("pairs", 0)), int(stats.get("pairs_nan", 0))
    if n == 0 or bad == 0 or (bad < n and bad <= max_fraction * n):
        return
    cause = (
        f"select left {queries_empty} queries without any context (queries_empty)"
        if queries_empty
        else "a pair whose two sentences have no context gets NaN"
    )
    raise NonFiniteLabelsError(
        f"label: {bad} of {n} labels are not finite (NaN or inf), more than "
        f"label.max_nonfinite_fraction={max_fraction}; {cause}: widen what select can take "
        "(select.source, gencontexts.k_right/k_left, retrieve.top_k, screen.keep)"
    )


class LabelStage(Stage):
    name = "label"
    # 2: backbone_cosine baseline; 3: similarity choice, sim_* report views; 4: diagnostics,
    # contamination check; 5: adaptive |Cs| (each pair over the contexts it stopped at);
    # 6: the trust warnings (mined vs random separation, reference agreement) and diag_separation
    version = "6"
    Params = LabelParams
    inputs = ("queries", "pairs")
    #: the LM route reads select and score; the generator's backbone gives the mean-pooled-cosine
    #: baseline of the Origin report; retrieve and screen give the per-query yields of the
    #: diagnostics. The encoder route reads embed alone.
    optional_inputs = ("select", "score", "embed", "generator", "retrieve", "screen")
    cost = PerQueryRows()  # labelled pairs per query
    per_query = True
    labelling = True
    #: what each route must have (a config without it fails with one line naming the section)
    route_inputs: ClassVar[dict[str, tuple[str, ...]]] = {
        "lm": ("select", "score"),
        "encoder": ("embed",),
    }

    def optional_inputs_for(self, params: LabelParams) -> tuple[str, ...]:
        """The encoder route reads only `embed`; the LM route everything else it reads."""
        if params.contextual == "encoder":
            return ("embed",)
        return tuple(i for i in self.optional_inputs if i != "embed")

    def fingerprint_extra(self, params: LabelParams) -> dict[str, Any]:
        """The STS test files the contamination check reads, by content."""
        return {"contamination_files": contamination_files(params.contamination)}

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: LabelParams = ctx.params
        t0 = time.perf_counter()
        missing = [i for i in self.route_inputs[p.contextual] if i not in ctx.upstream]
        if missing:
            raise InputError(
                f"label.contextual {p.contextual!r} needs the {' and '.join(missing)} stage(s), "
                "which this config does not run: add their sections"
            )
        pairs = ctx.input("pairs").read_table()
        if pairs.num_rows == 0:
            raise InputError(f"label: the pairs artefact {ctx.input('pairs').path} has no pairs")
        queries = ctx.input("queries").read_table(["query_id", "text"])
        text_of = dict(
            zip(
                queries.column("query_id").to_pylist(),
                queries.column("text").to_pylist(),
                strict=True,
            )
        )
        s1 = pairs.column("s1_query_id").to_numpy()
        s2 = pairs.column("s2_query_id").to_numpy()
        given = (
            "source" in pairs.column_names
            and pairs.num_rows > 0
            and bool(np.all(pairs.column("source").to_numpy(zero_copy_only=False) == "given"))
        )
        if p.contextual == "encoder":
            labels, n1, n2, other, enc_stats = encoder_labels(ctx, p, s1, s2, text_of)
            names, lam, n_lookups = ["S"], None, 0
        else:
            labels, n1, n2, names, lam, other, n_lookups = lm_labels(ctx, p, pairs, given)
            enc_stats = {}
        t_label = time.perf_counter() - t0
        if given:
            split = np.full(pairs.num_rows, "eval", dtype=object)
        else:
            split = np.asarray(SPLITS, dtype=object)[
                pair_split(s1, s2, ctx.run.seed, p.split_ratios)
            ]
        table = label_table(pairs, s1, s2, text_of, labels, n1, n2, split)
        stats = label_stats(ctx, p, table, n1, n2, t_label, n_lookups)
        stats.update(enc_stats)
        if given:
            report = origin_report(ctx, p, table, names, labels, lam, other)
            (ctx.files_dir / "origin.json").write_text(json.dumps(report, indent=2))
            stats.update(origin_stats(report))
        plot_labels(ctx, table, given)
        stats.update(diagnostics(ctx, p, table, given))
        return table, stats

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        """The shards' stats; fails (nothing published) on too many non-finite labels. Here, not
        in the shard task: the threshold is kept out of the fingerprint and of the params a
        shard task gets, and the written shard is reused when only the threshold changes."""
        total = super().summarize(ctx, shard_stats)
        select = ctx.upstream.get("select")
        empty = select.stats.get("queries_empty") if select is not None else None
        check_finite(total, ctx.params.max_nonfinite_fraction, empty)
        return total


def label_table(
    pairs: pa.Table,
    s1: np.ndarray,
    s2: np.ndarray,
    text_of: dict[int, str],
    labels: np.ndarray,
    n1: np.ndarray,
    n2: np.ndarray,
    split: np.ndarray,
) -> pa.Table:
    """The stage's table (LABEL_SCHEMA): each pair with its texts, its label from S and from each
    Eq. 3 term alone, its context-set sizes and split, and the pairs artefact's source and gold
    (null where it has none)."""
    n = pairs.num_rows

    def col(name: str, typ: pa.DataType) -> pa.Array:
        if name in pairs.column_names:
            return pairs.column(name).cast(typ)
        return pa.nulls(n, typ)

    return pa.table(
        {
            "pair_id": pairs.column("pair_id").cast(pa.int64()),
            "s1_id": s1,
            "s2_id": s2,
            "s1": [text_of.get(int(x)) for x in s1],
            "s2": [text_of.get(int(x)) for x in s2],
            "label": labels[:, 0].astype(np.float32),
            "label_disc": labels[:, 1].astype(np.float32),
            "label_fwd": labels[:, 2].astype(np.float32),
            "label_left": labels[:, 3].astype(np.float32),
            "label_right": labels[:, 4].astype(np.float32),
            "n_ctx1": n1.astype(np.int32),
            "n_ctx2": n2.astype(np.int32),
            "source": col("source", pa.string()),
            "split": pa.array(split.tolist(), pa.string()),
            "dataset": col("dataset", pa.string()),
            "subset": col("subset", pa.string()),
            "gold": col("gold", pa.float64()),
        },
        schema=LABEL_SCHEMA,
    )
