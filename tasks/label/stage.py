"""Stage `label`: the Origin similarity of every pair (Sec. 3.3, Eq. 4) — the product's output.

For a pair (s1, s2), the contextual model ``label.contextual`` names (tasks/label/contextual/)
gives each sentence a vector of fit scores over contexts and the label compares the two. ``lm``
(the paper): C = Cs1 + Cs2 (from `select`), v_s = [S(s, c) for c in C] looked up in the `score`
artefact, label = cosine(v_s1, v_s2), and the label from each Eq. 3 term alone (label_disc,
label_fwd, label_left, label_right) so that ablations need no rescoring. ``encoder``: S(c, s) =
cos(E(c), E(s)) over every context unit of the corpus (the `embed` artefact), the label the
correlation of the two profiles; it fills ``label`` only. Each model's settings are the
sub-section of its name (``label.lm``, ``label.encoder``).

Splits: a seeded hash of the unordered pair assigns train/dev/test (paper 98/1/1, Sec. 3.4);
given pairs (the Origin evaluation on STS) get split "eval".

For given pairs the stats also hold Spearman x100 per evaluation set under the "all" convention
(subsets of a year concatenated) and the "mean" convention (mean over subsets), for the
contextual model's views (LM: per Eq. 3 term alone, without each term (Table 9; λ recovered
from the score rows), under the other vector similarities; encoder: its own cosine) and for two
baselines on the same pairs: the TF-IDF cosine of the two sentences and the generator
backbone's mean-pooled cosine; ``files/origin.json`` holds the same as a nested report.

Files: ``params.py`` (the config section and its sub-sections), ``contextual/`` (the registry
and one module per contextual model), ``report.py`` (stats, the Origin report, the histogram),
``diagnostics.py`` (can the labels be trusted, the contamination check).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pyarrow as pa

from ctxsim.models.contextual.origin import pair_split_names
from ctxsim.store.cost_model import PerQueryRows
from ctxsim.store.errors import InputError
from ctxsim.store.stage import Stage, StageContext
from ctxsim.tasks.label.contextual import (
    CONTEXTUAL,
    LABEL_COLUMNS,
    ContextualLabels,
    PairsToLabel,
    get_contextual,
)
from ctxsim.tasks.label.diagnostics import contamination_files, diagnostics
from ctxsim.tasks.label.params import LabelParams
from ctxsim.tasks.label.report import (
    label_stats,
    origin_report,
    origin_stats,
    plot_labels,
)
from ctxsim.tasks.pairs import given_pairs

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


def _column_notes() -> dict[str, str]:
    """What each column holds, from the registered contextual models' declarations (their
    ``columns`` and ``n_ctx``); docs/stages.md prints these under the schema."""
    fills = "; ".join(f"{m.name}: {', '.join(m.columns)}" for m in CONTEXTUAL.values())
    n_ctx = "; ".join(f"{m.name}: {m.n_ctx}" for m in CONTEXTUAL.values())
    return {
        "label": "the pair's label (Eq. 4 with the contextual model of label.contextual)",
        "label_disc": (
            "label_disc / label_fwd / label_left / label_right: the label from one Eq. 3 term "
            "alone (NaN where the term was not scored); NaN by design where the contextual model "
            f"does not fill them (each fills its `columns`: {fills})"
        ),
        "n_ctx1": (
            "n_ctx1 / n_ctx2: what each sentence's context vector runs over, by contextual model "
            f"({n_ctx})"
        ),
        "split": (
            "train / dev / test (seeded hash of the pair, label.split_ratios); eval for given pairs"
        ),
    }


#: what each column holds (docs/stages.md prints these under the schema)
COLUMN_NOTES = _column_notes()


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
    #: what the registered contextual models read (``ContextualModel.inputs`` and
    #: ``optional_inputs``: lm select, score, generator, retrieve, screen; encoder embed); only
    #: the chosen model's enter the fingerprint
    optional_inputs = tuple(
        dict.fromkeys(
            i
            for m in CONTEXTUAL.values()
            for i in (*m.inputs, *m.optional_inputs)
            if i not in ("queries", "pairs")
        )
    )
    cost = PerQueryRows()  # labelled pairs per query
    per_query = True
    labelling = True

    def optional_inputs_for(self, params: LabelParams) -> tuple[str, ...]:
        """What the chosen contextual model reads besides queries and pairs."""
        m = get_contextual(params.contextual)
        return tuple(i for i in (*m.inputs, *m.optional_inputs) if i not in self.inputs)

    def fingerprint_extra(self, params: LabelParams) -> dict[str, Any]:
        """The STS test files the contamination check reads, by content."""
        return {"contamination_files": contamination_files(params.contamination)}

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: LabelParams = ctx.params
        t0 = time.perf_counter()
        model = get_contextual(p.contextual)
        missing = [i for i in model.inputs if i not in ctx.upstream]
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
        given = given_pairs(pairs)
        out = model.labels(ctx, p.settings(), PairsToLabel(pairs, s1, s2, text_of, given))
        check_answer(p.contextual, model.columns, out, pairs.num_rows)
        t_label = time.perf_counter() - t0
        split = pair_split_names(s1, s2, ctx.run.seed, p.split_ratios, given)
        table = label_table(pairs, s1, s2, text_of, out, split)
        stats = label_stats(ctx, p, table, out.n_ctx1, out.n_ctx2, t_label, out.score_lookups)
        stats.update(out.stats)
        if given:
            label = np.asarray(out.columns["label"], dtype=np.float64)
            report = origin_report(ctx, p, table, label, out.views, out.lambdas)
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


def check_answer(name: str, declared: tuple[str, ...], out: ContextualLabels, n: int) -> None:
    """A contextual model answered with exactly the columns it declared, one value per pair;
    else a TypeError (a bug in the model, not the user's input)."""
    if set(out.columns) != set(declared):
        raise TypeError(
            f"contextual model {name!r} filled {sorted(out.columns)}, but declares {declared}"
        )
    for what, arr in (*out.columns.items(), ("n_ctx1", out.n_ctx1), ("n_ctx2", out.n_ctx2)):
        if len(arr) != n:
            raise TypeError(
                f"contextual model {name!r}: {what} has {len(arr)} values for {n} pairs"
            )


def label_table(
    pairs: pa.Table,
    s1: np.ndarray,
    s2: np.ndarray,
    text_of: dict[int, str],
    out: ContextualLabels,
    split: np.ndarray,
) -> pa.Table:
    """The stage's table (LABEL_SCHEMA): each pair with its texts, the label columns the
    contextual model filled (the others NaN), its n_ctx and split, and the pairs artefact's
    source and gold (null where it has none)."""
    n = pairs.num_rows

    def col(name: str, typ: pa.DataType) -> pa.Array:
        if name in pairs.column_names:
            return pairs.column(name).cast(typ)
        return pa.nulls(n, typ)

    nan = np.full(n, np.nan)
    labels = {
        c: np.asarray(out.columns.get(c, nan), dtype=np.float64).astype(np.float32)
        for c in LABEL_COLUMNS
    }
    return pa.table(
        {
            "pair_id": pairs.column("pair_id").cast(pa.int64()),
            "s1_id": s1,
            "s2_id": s2,
            "s1": [text_of.get(int(x)) for x in s1],
            "s2": [text_of.get(int(x)) for x in s2],
            **labels,
            "n_ctx1": np.asarray(out.n_ctx1).astype(np.int32),
            "n_ctx2": np.asarray(out.n_ctx2).astype(np.int32),
            "source": col("source", pa.string()),
            "split": pa.array(split.tolist(), pa.string()),
            "dataset": col("dataset", pa.string()),
            "subset": col("subset", pa.string()),
            "gold": col("gold", pa.float64()),
        },
        schema=LABEL_SCHEMA,
    )
