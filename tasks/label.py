"""Stage `label`: the Origin similarity of every pair (Sec. 3.3, Eq. 4) — the product's output.

For a pair (s1, s2): C = Cs1 + Cs2 (from `select`), v_s = [S(s, c) for c in C], label =
cosine(v_s1, v_s2). S and its Eq. 3 terms come from the `score` artefact, which holds each needed
(s, c) once (:func:`required_score_table` says which); here they are only looked up, vectorised
over blocks of pairs (models/contextual/origin.py). The label is also computed from each term alone
(label_disc, label_fwd, label_left, label_right) so that ablations need no rescoring.

With ``contextual: encoder`` the contextual model is a sentence encoder instead: S(c, s) =
cos(E(c), E(s)) over every context unit of the corpus (the `embed` artefact), and the label is the
correlation of the two profiles (models/contextual/encoder_origin.py): in closed form from the
scatter
matrix (``encoder_form: closed``), with the softmax fit score p(c | s) (``softmax``), or over the
union of the two sentences' top-K contexts (``topk``). The sentences are encoded by the scorer the
`embed` artefact names; `select` and `score` are not read.

Splits: a seeded hash of the unordered pair assigns train/dev/test (paper 98/1/1, Sec. 3.4);
given pairs (the Origin evaluation on STS) get split "eval".

For given pairs the stats also hold Spearman x100 per evaluation set under the "all" convention
(subsets of a year concatenated) and the "mean" convention (mean over subsets), per Eq. 3 term
alone, without each term (Table 9; λ recovered from the score rows), and for two baselines on
the same pairs: the TF-IDF cosine of the two sentences and the generator backbone's mean-pooled
cosine; ``files/origin.json`` holds the same as a nested report.
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator

from ctxsim.models.contextual.encoder_origin import (
    closed_form_similarity,
    softmax_profile_similarity,
    topk_union_similarity,
)
from ctxsim.models.contextual.origin import (
    SIMILARITIES,
    TERMS,
    ContextSets,
    ScoreLookup,
    pair_split,
    recover_lambdas,
    required_scores,
    spearman_conventions,
)
from ctxsim.models.training.objectives import tfidf_cosine
from ctxsim.product.contamination import (
    ContaminationParams,
    check_contamination,
    is_test_subset,
    raise_if_contaminated,
)
from ctxsim.product.diagnostics import (
    agreement,
    concentration,
    histograms_by_mode,
    per_query_counts,
    plot_diagnostics,
    reference_similarity,
    report_markdown,
    separation,
    warnings_for,
)
from ctxsim.scores.views import labels_at, read_cs_sizes, score_views
from ctxsim.store.cost_model import PerQueryRows
from ctxsim.store.errors import InputError
from ctxsim.store.stage import Stage, StageContext, StageParams, knob
from ctxsim.tasks.embed import (
    SCATTER_FILE,
    EncoderInputError,
    encode,
    load_encoder,
    load_scatter,
    read_embeddings,
    scorer_identity,
)

SPLITS = ("train", "dev", "test")
#: subset names that are separate evaluation sets rather than parts of one year's set
SPLIT_SUBSETS = {"train", "dev", "test", "trial"}


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


def required_score_table(select: pa.Table, pairs: pa.Table) -> pa.Table:
    """The (query_id, context_id) pairs whose S the `score` stage must compute so that every
    pair can be labelled: {s1, s2} x (Cs1 ∪ Cs2), each once, sorted."""
    cs = ContextSets.from_rows(
        select.column("query_id").to_numpy(),
        select.column("context_id").to_numpy(),
        select.column("position").to_numpy() if "position" in select.column_names else None,
    )
    q, c = required_scores(
        cs, pairs.column("s1_query_id").to_numpy(), pairs.column("s2_query_id").to_numpy()
    )
    return pa.table({"query_id": q, "context_id": c})


def ablation_views(
    score: pa.Table, ablations: bool
) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """Score views, plus S without each term (Table 9) and without both context terms when
    ``ablations`` and the λ of Eq. 3 can be recovered from the rows; returns (names, values, λ)."""
    names, values = score_views(score)
    if not ablations:
        return names, values, None
    lam = recover_lambdas(values[:20000, 0], values[:20000, 1:])
    if lam is None:
        return names, values, None
    tiny = 1e-4 * max(1.0, float(np.nanmax(np.abs(values[:, 0]), initial=0.0)))

    def without(col: np.ndarray) -> np.ndarray:
        # S had no other term: what is left is float rounding of λ, not a score (NaN, no view)
        return np.full_like(col, np.nan) if np.nanmax(np.abs(col), initial=0.0) <= tiny else col

    for k, term in enumerate(TERMS):
        if lam[k] != 0 and not np.all(np.isnan(values[:, 1 + k])):
            names.append(f"wo_{term}")
            rest = without(values[:, 0] - lam[k] * values[:, 1 + k])
            values = np.column_stack([values, rest])
    both = lam[2] * np.nan_to_num(values[:, 3]) + lam[3] * np.nan_to_num(values[:, 4])
    names.append("wo_both_contexts")
    return names, np.column_stack([values, without(values[:, 0] - both)]), lam


def report_name(dataset: str, subset: str) -> str:
    """Evaluation-set name: a year's subsets form one set (STS12), splits are sets of their own
    (STSb.dev, SICK-R.trial)."""
    return f"{dataset}.{subset}" if subset in SPLIT_SUBSETS else dataset


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
            labels, n1, n2, other, enc_stats = self._encoder_labels(ctx, p, s1, s2, text_of)
            names, lam, n_lookups = ["S"], None, 0
        else:
            labels, n1, n2, names, lam, other, n_lookups = self._lm_labels(ctx, p, pairs, given)
            enc_stats = {}
        t_label = time.perf_counter() - t0
        n = pairs.num_rows
        if given:
            split = np.full(n, "eval", dtype=object)
        else:
            split = np.asarray(SPLITS, dtype=object)[
                pair_split(s1, s2, ctx.run.seed, p.split_ratios)
            ]

        def col(name: str, typ: pa.DataType) -> pa.Array:
            if name in pairs.column_names:
                return pairs.column(name).cast(typ)
            return pa.nulls(n, typ)

        table = pa.table(
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
        stats = self._stats(ctx, p, table, n1, n2, t_label, n_lookups)
        stats.update(enc_stats)
        if given:
            report = self._origin_report(ctx, p, table, names, labels, lam, other)
            (ctx.files_dir / "origin.json").write_text(json.dumps(report, indent=2))
            for ds, r in report["datasets"].items():
                stats[f"spearman_all.{ds}"] = r["spearman_all"]
                stats[f"spearman_mean.{ds}"] = r["spearman_mean"]
                stats[f"n_pairs.{ds}"] = r["n_pairs"]
                for view, v in r.get("views", {}).items():
                    stats[f"spearman_all.{ds}.{view}"] = v["spearman_all"]
        self._plot(ctx, table, given)
        stats.update(self._diagnostics(ctx, p, table, given))
        return table, stats

    def _lm_labels(
        self, ctx: StageContext, p: LabelParams, pairs: pa.Table, given: bool
    ) -> tuple[Any, ...]:
        """Eq. 4 over the context sets of `select` with the Eq. 3 scores of `score`: (labels
        [n, 5] of S and each term, n_ctx1, n_ctx2, view names, λ, other similarities, lookups)."""
        sel = ctx.input("select").read_table(["query_id", "context_id", "position"])
        score = ctx.input("score").read_table()
        cs = ContextSets.from_rows(
            sel.column("query_id").to_numpy(),
            sel.column("context_id").to_numpy(),
            sel.column("position").to_numpy(),
        )
        s1 = pairs.column("s1_query_id").to_numpy()
        s2 = pairs.column("s2_query_id").to_numpy()
        names, values, lam = ablation_views(score, given and p.ablations)
        lookup = ScoreLookup(
            score.column("query_id").to_numpy(), score.column("context_id").to_numpy(), values
        )
        # adaptive |Cs| (score.adaptive_rounds): each pair over the contexts it stopped at
        cs_size = read_cs_sizes(
            ctx.input("score").files_dir, pairs.column("pair_id").to_numpy().astype(np.int64)
        )
        labels = labels_at(cs, s1, s2, lookup, cs_size, p.block_pairs, p.similarity)
        # S under every other vector similarity, for given pairs (the S column only)
        other: dict[str, np.ndarray] = {}
        if given:
            s_only = ScoreLookup(
                score.column("query_id").to_numpy(),
                score.column("context_id").to_numpy(),
                values[:, :1],
            )
            other = {
                f"sim_{how}": labels_at(cs, s1, s2, s_only, cs_size, p.block_pairs, how)[:, 0]
                for how in SIMILARITIES
                if how != p.similarity
            }

        n1, n2 = cs.sizes(s1), cs.sizes(s2)
        if cs_size is not None:
            n1, n2 = np.minimum(n1, cs_size), np.minimum(n2, cs_size)
        return labels, n1, n2, names, lam, other, lookup.n_lookups

    def _encoder_labels(
        self,
        ctx: StageContext,
        p: LabelParams,
        s1: np.ndarray,
        s2: np.ndarray,
        text_of: dict[int, str],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, Any]]:
        """Origin with the `embed` artefact's encoder as the contextual model: (labels [n, 5],
        S in column 0 and no Eq. 3 terms, n_ctx1, n_ctx2, other views, stats). The sentences are
        encoded by the scorer that encoded the contexts, refused if its files changed since."""
        art = ctx.input("embed")
        ep = art.manifest["params"]
        recorded = art.manifest.get("fingerprint_payload", {}).get("extra", {}).get("scorer")
        current = scorer_identity(ep["model"])
        if recorded != current:
            raise EncoderInputError(
                f"label: the embed artefact {art.path} was encoded by {recorded}, but "
                f"embed.model {ep['model']!r} is now {current}: rerun embed"
            )
        qids = np.unique(np.r_[s1, s2])
        missing = [int(q) for q in qids if text_of.get(int(q)) is None]
        if missing:
            raise InputError(f"label: pairs name query ids without a text, e.g. {missing[:3]}")
        model = load_encoder(ep["model"], int(ep["max_seq_length"]), ctx.device)
        t0 = time.perf_counter()
        emb = encode(model, [text_of[int(q)] for q in qids], int(ep.get("batch_size", 64)))
        t_encode = time.perf_counter() - t0
        e1, e2 = emb[np.searchsorted(qids, s1)], emb[np.searchsorted(qids, s2)]
        n_contexts = int(art.stats.get("contexts", art.num_rows))
        if p.encoder_form == "closed":
            m = load_scatter(art.files_dir / SCATTER_FILE).matrix(centred=p.centred)
            lab = closed_form_similarity(e1, e2, m)
            n_ctx = n_contexts
        elif p.encoder_form == "softmax":
            lab = softmax_profile_similarity(
                e1, e2, read_embeddings(art), p.tau, centred=p.centred, block=256
            )
            n_ctx = n_contexts
        else:
            lab = topk_union_similarity(e1, e2, read_embeddings(art), p.k, centred=p.centred)
            n_ctx = min(p.k, n_contexts)
        labels = np.full((len(s1), 1 + len(TERMS)), np.nan)
        labels[:, 0] = lab
        sizes = np.full(len(s1), n_ctx, dtype=np.int64)
        # the scorer's own cosine of the two sentences: what the contexts add over it
        other = {"scorer_cosine": (e1.astype(np.float64) * e2).sum(axis=1)}
        stats = {
            "encoder_form": p.encoder_form,
            "encoder_contexts": n_contexts,
            "encoder_sentences": len(qids),
            "encoder_encode_seconds": round(t_encode, 3),
        }
        return labels, sizes, sizes, other, stats

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        """The shards' stats; fails (nothing published) on too many non-finite labels. Here, not
        in the shard task: the threshold is kept out of the fingerprint and of the params a
        shard task gets, and the written shard is reused when only the threshold changes."""
        total = super().summarize(ctx, shard_stats)
        select = ctx.upstream.get("select")
        empty = select.stats.get("queries_empty") if select is not None else None
        check_finite(total, ctx.params.max_nonfinite_fraction, empty)
        return total

    # ---- reporting ----------------------------------------------------------------------------
    def _stats(
        self,
        ctx: StageContext,
        p: LabelParams,
        table: pa.Table,
        n1: np.ndarray,
        n2: np.ndarray,
        t_label: float,
        n_lookups: int,
    ) -> dict[str, Any]:
        lab = table.column("label").to_numpy(zero_copy_only=False).astype(np.float64)
        ok = np.isfinite(lab)
        n = table.num_rows
        stats: dict[str, Any] = {
            "pairs": n,
            "pairs_nan": int((~ok).sum()),
            "mean_cs": round(float(np.mean(np.r_[n1, n2])) if n else 0.0, 3),
            "score_lookups": int(n_lookups),
            "label_seconds": round(t_label, 4),
            "label_seconds_per_pair": t_label / max(1, n),
        }
        if ok.any():
            q = np.percentile(lab[ok], [5, 50, 95])
            counts, edges = np.histogram(lab[ok], bins=p.hist_bins)
            stats.update(
                label_mean=round(float(lab[ok].mean()), 5),
                label_std=round(float(lab[ok].std()), 5),
                label_p05=round(float(q[0]), 5),
                label_p50=round(float(q[1]), 5),
                label_p95=round(float(q[2]), 5),
                label_hist_counts=counts.tolist(),
                label_hist_edges=[round(float(e), 5) for e in edges],
            )
        split = table.column("split").to_numpy(zero_copy_only=False)
        for s in (*SPLITS, "eval"):
            stats[f"split_{s}"] = int((split == s).sum())
        src = table.column("source").to_numpy(zero_copy_only=False)
        for s in sorted({x for x in src if x is not None}):
            stats[f"pairs_{s}"] = int((src == s).sum())
            m = (src == s) & ok
            if m.any():
                stats[f"label_mean_{s}"] = round(float(lab[m].mean()), 5)
        for stage in ("select", "pairs", "score", "embed"):  # seconds per labelled pair, by stage
            if stage not in ctx.upstream:
                continue
            secs = ctx.upstream[stage].manifest.get("timings", {}).get("total_seconds")
            if secs is not None and n:
                stats[f"{stage}_seconds_per_pair"] = float(secs) / n
        return stats

    def _origin_report(
        self,
        ctx: StageContext,
        p: LabelParams,
        table: pa.Table,
        names: list[str],
        labels: np.ndarray,
        lam: np.ndarray | None,
        other: dict[str, np.ndarray],
    ) -> dict[str, Any]:
        ds = table.column("dataset").to_pylist()
        sub = table.column("subset").to_pylist()
        gold = table.column("gold").to_numpy(zero_copy_only=False).astype(np.float64)
        sets = np.asarray([report_name(d, s) for d, s in zip(ds, sub, strict=True)], dtype=object)
        subs = np.asarray(sub, dtype=object)
        base = tfidf_cosine(table.column("s1").to_pylist(), table.column("s2").to_pylist())
        views = {names[k]: labels[:, k] for k in range(1, len(names)) if p.ablations}
        views.update(other)
        views["tfidf_cosine"] = base
        if "generator" in ctx.upstream:
            views["backbone_cosine"] = _backbone_cosine(
                ctx, table.column("s1").to_pylist(), table.column("s2").to_pylist()
            )
        out: dict[str, Any] = {}
        for name in sorted(set(sets)):
            m = sets == name
            s_all, s_mean = spearman_conventions(labels[m, 0], gold[m], subs[m])
            r: dict[str, Any] = {
                "spearman_all": _r(s_all),
                "spearman_mean": _r(s_mean),
                "n_pairs": int(m.sum()),
                "n_nan": int(np.isnan(labels[m, 0]).sum()),
                "views": {},
            }
            for view, pred in views.items():
                if np.all(np.isnan(pred[m])):
                    continue
                a, b = spearman_conventions(pred[m], gold[m], subs[m])
                r["views"][view] = {"spearman_all": _r(a), "spearman_mean": _r(b)}
            out[name] = r
        return {
            "datasets": out,
            "lambdas": None if lam is None else dict(zip(TERMS, map(float, lam), strict=True)),
            "config": {"label": p.model_dump(mode="json"), **ctx.all_params},
        }

    def _plot(self, ctx: StageContext, table: pa.Table, given: bool) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        lab = table.column("label").to_numpy(zero_copy_only=False).astype(np.float64)
        src = table.column("source").to_numpy(zero_copy_only=False)
        ok = np.isfinite(lab)
        ncols = 2 if given else 1
        fig, axes = plt.subplots(1, ncols, figsize=(6 * ncols, 4), squeeze=False)
        ax = axes[0, 0]
        for s in sorted({x for x in src if x is not None}):
            m = ok & (src == s)
            if m.any():
                ax.hist(lab[m], bins=30, alpha=0.6, label=f"{s} ({int(m.sum())})")
        ax.set_xlabel("Origin label (Eq. 4 cosine)")
        ax.set_ylabel("pairs")
        ax.legend()
        if given:
            gold = table.column("gold").to_numpy(zero_copy_only=False).astype(np.float64)
            axes[0, 1].scatter(gold[ok], lab[ok], s=4, alpha=0.4)
            axes[0, 1].set_xlabel("gold similarity")
            axes[0, 1].set_ylabel("Origin label")
        fig.tight_layout()
        fig.savefig(ctx.files_dir / "label_hist.png", dpi=100)
        plt.close(fig)

    # ---- diagnostics and contamination (product/) -------------------------------------------
    def _diagnostics(
        self, ctx: StageContext, p: LabelParams, table: pa.Table, given: bool
    ) -> dict[str, Any]:
        """Label diagnostics and the contamination check: files/diagnostics.json, report.md
        (a Prefect artifact in a flow), plots, warnings logged; returns flat stats. Fails when
        ``contamination.error`` is set and a dataset sentence is in a test set."""
        lab = table.column("label").to_numpy(zero_copy_only=False).astype(np.float64)
        modes = np.asarray(table.column("source").to_pylist(), dtype=object)
        conc, warnings = concentration(lab, p.near_one_tol, p.warn_band_width)
        diag: dict[str, Any] = {
            "concentration": conc,
            "by_mode": histograms_by_mode(lab, modes, p.hist_bins),
            "reference": {"encoder": p.reference_encoder},
            "yields": _yields(ctx),
        }
        ref = None
        if p.reference_encoder != "none" and table.num_rows:
            ref = reference_similarity(
                p.reference_encoder,
                table.column("s1").to_pylist(),
                table.column("s2").to_pylist(),
                ctx.device,
            )
            diag["reference"].update(agreement(lab, ref))
        diag["contamination"] = _contamination(ctx, p, table, given)
        # can the labels be trusted: mined pairs above random ones, agreement with the reference
        sep = separation(lab, modes, ctx.run.seed)
        diag["separation"] = sep
        warnings += warnings_for(sep, diag["reference"].get("spearman"))
        diag["warnings"] = warnings
        for w in warnings:
            ctx.logger.warning("label: %s", w)
        if np.isfinite(lab).any():
            diag["plots"] = plot_diagnostics(
                ctx.files_dir, lab, modes, ref, p.reference_encoder, p.hist_bins
            )
        (ctx.files_dir / "diagnostics.json").write_text(json.dumps(diag, indent=2))
        (ctx.files_dir / "report.md").write_text(report_markdown(diag))
        out: dict[str, Any] = {f"diag_{k}": v for k, v in conc.items()}
        out["diag_warnings"] = warnings
        # {} when there are too few mined or random pairs to compare (given pairs)
        out["diag_separation"] = {
            k: round(v, 4) if isinstance(v, float) and np.isfinite(v) else v
            for k, v in (sep or {}).items()
        }
        if "spearman" in diag["reference"]:
            out["diag_reference_spearman"] = diag["reference"]["spearman"]
        for stage, y in diag["yields"].items():
            out[f"yield_{stage}_per_query"] = y["mean"]
        cont = diag["contamination"]
        out["contamination"] = cont.get("contaminated")  # None: not checked
        if cont.get("contaminated") is not None:
            out["contamination_exact"] = cont["exact"]
            out["contamination_ngram"] = cont["ngram"]
        if p.contamination.error and cont.get("contaminated"):
            raise_if_contaminated(cont, "label.contamination.error")
        if cont.get("contaminated"):
            ctx.logger.warning(
                "label: %d dataset sentences occur in STS test sets (%s); see %s",
                cont["contaminated"],
                cont["by_test_set"],
                ctx.files_dir / "diagnostics.json",
            )
        return out


def contamination_files(c: ContaminationParams) -> list[list[Any]]:
    """[path, size, sha256] of the test files the contamination check reads ([] when off)."""
    from pathlib import Path

    from ctxsim.store.artefacts import content_digest

    if not c.enabled or not c.sts_dir or not Path(c.sts_dir).is_dir():
        return []
    from ctxsim.readers.sts import discover

    files = sorted({s.path for s in discover(c.sts_dir) if is_test_subset(s.subset)})
    return [[f, Path(f).stat().st_size, content_digest(Path(f))] for f in files]


def _contamination(
    ctx: StageContext, p: LabelParams, table: pa.Table, given: bool
) -> dict[str, Any]:
    """The check over the labelled sentences and every query sentence of the run."""
    from pathlib import Path

    c = p.contamination
    if not c.enabled:
        return {"skipped": "label.contamination.enabled is false"}
    if given:
        return {"skipped": "given pairs are evaluation pairs (Origin), not a dataset"}
    if not c.sts_dir or not Path(c.sts_dir).is_dir():
        return {"skipped": f"no STS directory (label.contamination.sts_dir={c.sts_dir!r})"}
    texts = table.column("s1").to_pylist() + table.column("s2").to_pylist()
    texts += ctx.input("queries").read_table(["text"]).column("text").to_pylist()
    return check_contamination(texts, c.sts_dir, c)


def _yields(ctx: StageContext) -> dict[str, dict[str, float]]:
    """Rows per query of retrieve (chunks), screen (contexts kept) and select (Cs)."""
    qids = ctx.input("queries").read_table(["query_id"]).column("query_id").to_numpy()
    out = {}
    for stage in ("retrieve", "screen", "select"):
        if stage in ctx.upstream:
            q = ctx.input(stage).read_table(["query_id"]).column("query_id").to_numpy()
            out[stage] = per_query_counts(q, qids)
    return out


def _r(x: float) -> float | None:
    return None if not np.isfinite(x) else round(float(x), 2)


def _backbone_cosine(ctx: StageContext, a: list[str | None], b: list[str | None]) -> np.ndarray:
    """Cosine of the generator backbone's mean-pooled sentence states: how much the contexts add
    over the model's own view of the two sentences."""
    from ctxsim.scores.loading import load_scorer

    scorer, _ = load_scorer(ctx.input("generator").files_dir, ctx.device)
    texts = sorted({t for t in (*a, *b) if t})
    emb = scorer.embed(texts)
    emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    row = {t: i for i, t in enumerate(texts)}
    out = np.full(len(a), np.nan)
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        if x and y:
            out[k] = float(emb[row[x]] @ emb[row[y]])
    return out
