"""Can the `label` stage's labels be trusted: the diagnostics of product/diagnostics.py (how
concentrated the labels are, mined vs random pairs, agreement with a reference encoder, the
upstream yields per query) and the contamination check against STS test sets
(product/contamination.py), written to ``files/`` and returned as flat stats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

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
from ctxsim.store.stage import StageContext

if TYPE_CHECKING:
    from ctxsim.tasks.label.params import LabelParams


def diagnostics(ctx: StageContext, p: LabelParams, table: pa.Table, given: bool) -> dict[str, Any]:
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
    out = _flat_stats(conc, warnings, sep, diag)
    cont = diag["contamination"]
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


def _flat_stats(
    conc: dict[str, Any], warnings: list[str], sep: dict[str, Any] | None, diag: dict[str, Any]
) -> dict[str, Any]:
    """The diagnostics as the stage's flat stats (``diag_*``, ``yield_*``, ``contamination*``)."""
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
    return out


def contamination_files(c: ContaminationParams) -> list[list[Any]]:
    """[path, size, sha256] of the test files the contamination check reads ([] when off)."""
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
