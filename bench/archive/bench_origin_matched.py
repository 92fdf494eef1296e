"""Origin of context sources at matched CPU-seconds: retrieved, generated and both,
each at several |Cs|, on the same pairs, with paired BCa 95% CIs against a reference row.

Every row is a finished `ctxsim origin` run on one root and a |Cs| = k (the first k of its
sets, which is the set a run with |Cs| k selects: selection is greedy). Its CPU-seconds per pair
are what that k costs at the run's measured unit costs (time.process_time, as the stages record
them), so runs that read samples or scores from the caches are still charged in full:

- retrieval (index, retrieve, discriminator, screen, and select for retrieved contexts): the
  stages' CPU as the run's artefacts recorded it, once per query set;
- sampling: k samples per sentence x (gencontexts CPU / samples it drew);
- scoring: the Eq. 3 terms the first k contexts need (each distinct (sentence, context) window
  x each scored direction whose target is not empty: a generated continuation has no c<), each
  priced by its kind: a term on a retrieved window (s between c< and c>: every term reads all
  three) at the CPU per term of a run that scored only retrieved contexts, a term on a generated
  one (s and one sampled side) at that of a run that scored only generated ones (score CPU /
  terms it computed, cache hits excluded); with PMI, each term's null pass per distinct context
  is one more term.

A run whose own stages read everything from a cache, or that scored both kinds (`both`), takes
its unit costs from ``--units-from`` (runs of the same sampler and scorer that computed them).
Usage::

    .venv/bin/python -m bench.archive.bench_origin_matched --root /tmp/i17/root \\
        --rows retrieved=retr-cs8-p500@8:raw generated=gen-right-k8-p500@1,2,4,8 \\
        --reference retrieved@8 --units-from gen-right-k16-pmi-p500
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import run_artefacts, write_results
from ctxsim.models.contextual.adaptive_cs import prefix_sets
from ctxsim.models.contextual.origin import (
    ContextSets,
    ScoreLookup,
    origin_labels,
    required_scores,
    spearman_x100,
)
from ctxsim.models.evaluation.metrics import bootstrap_diff_ci
from ctxsim.scores import ScoreParams
from ctxsim.tasks.gencontexts import GEN_CONTEXT_BASE

RETRIEVAL = ("index", "retrieve", "discriminator", "screen")


def s_view(rec: dict[str, Any], score: Any, view: str) -> np.ndarray:
    """S as scored, or ``raw``: with the PMI null terms added back (plain log-probabilities)."""
    S = score.column("S").to_numpy().astype(np.float64)
    if view == "S":
        return S
    p = rec["config"]["score"]
    for d in p.get("pmi", []):
        S = S + float(p.get(f"lambda_{d}", 1.0)) * np.nan_to_num(
            score.column(f"null_{d}").to_numpy().astype(np.float64)
        )
    return S


def side_sizes(arts: dict[str, Any], cids: np.ndarray) -> dict[str, np.ndarray]:
    """Whether each context has a left / right side (1 or 0), in the order of ``cids``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = ["context_id", "left_sent_ids", "right_sent_ids"]
    tables = [arts["contexts"].read_table(cols)]
    if "gencontexts" in arts:
        tables.append(arts["gencontexts"].read_table(cols))
    t = pa.concat_tables(tables)
    t = t.filter(pc.is_in(t.column("context_id"), pa.array(np.unique(cids)))).sort_by("context_id")
    row = np.searchsorted(t.column("context_id").to_numpy(), cids)
    return {
        d: (pc.list_value_length(t.column(f"{d}_sent_ids")).to_numpy() > 0).astype(int)[row]
        for d in ("left", "right")
    }


def term_counts(rec: dict[str, Any], arts: dict[str, Any], cids: np.ndarray) -> dict[str, int]:
    """Terms of the windows whose contexts are ``cids`` (one entry per window), by context kind,
    with each PMI direction's null term once per distinct context."""
    has = side_sizes(arts, cids)
    dirs = ScoreParams(**rec["config"]["score"]).directions()
    per_window = sum(np.ones(len(cids), int) if d == "fwd" else has[d] for d in dirs)
    generated = cids >= GEN_CONTEXT_BASE
    out = {
        "retrieved": int(per_window[~generated].sum()),
        "generated": int(per_window[generated].sum()),
    }
    u, first = np.unique(cids, return_index=True)
    gen_u = u >= GEN_CONTEXT_BASE
    for d in (d for d in rec["config"]["score"].get("pmi", []) if d in dirs):
        side = np.ones(len(u), int) if d == "fwd" else has[d][first]
        out["retrieved"] += int(side[~gen_u].sum())
        out["generated"] += int(side[gen_u].sum())
    return out


def unit_costs(rec: dict[str, Any], arts: dict[str, Any]) -> dict[str, float]:
    """CPU-s per drawn sample and per computed term of one context kind, where the run drew or
    computed any (a run that scored both kinds gives no term unit: their costs differ ~5x)."""
    out: dict[str, float] = {}
    g = arts.get("gencontexts")
    if g is not None and g.stats.get("sampled", 0) > 0:
        out["sample"] = g.stats["cpu_seconds"] / g.stats["sampled"]
    score = arts["score"]
    cids = score.read_table(["context_id"]).column("context_id").to_numpy()
    terms = term_counts(rec, arts, cids)
    kinds = [k for k, n in terms.items() if n > 0]
    computed = sum(terms.values()) - score.stats.get("cache_hits", 0)
    if len(kinds) == 1 and computed > 0:
        out[f"term_{kinds[0]}"] = score.stats["cpu_seconds"] / computed
    return out


def evaluate_row(
    root: Path, run: str, k: int, view: str, units: dict[str, float]
) -> dict[str, Any]:
    rec, arts = run_artefacts(root, run)
    sel = arts["select"].read_table(["query_id", "context_id", "position"])
    cs = prefix_sets(
        ContextSets.from_rows(
            sel.column("query_id").to_numpy(),
            sel.column("context_id").to_numpy(),
            sel.column("position").to_numpy(),
        ),
        k,
    )
    score = arts["score"].read_table()
    lookup = ScoreLookup(
        score.column("query_id").to_numpy(),
        score.column("context_id").to_numpy(),
        s_view(rec, score, view)[:, None],
    )
    lab = arts["label"].read_table(["pair_id", "s1_id", "s2_id", "gold"]).sort_by("pair_id")
    s1, s2 = lab.column("s1_id").to_numpy(), lab.column("s2_id").to_numpy()
    pred = origin_labels(cs, s1, s2, lookup)[:, 0]
    n_pairs = len(s1)
    # what k costs
    u = {**units, **unit_costs(rec, arts)}
    _, c = required_scores(cs, s1, s2)
    terms = term_counts(rec, arts, c)
    n_queries = len(np.unique(np.concatenate([s1, s2])))
    gen = arts.get("gencontexts")
    samples = 0
    if gen is not None and rec["config"]["select"].get("source", "retrieve") != "retrieve":
        g = rec["config"]["gencontexts"]
        per_query = int(g.get("k_right", 0)) + int(g.get("k_left", 0))
        # the samples the first k contexts use (each generated slot is one sample)
        samples = min(int((cs.context_ids >= GEN_CONTEXT_BASE).sum()), n_queries * per_query)
    retrieval = sum(float(arts[n].stats.get("cpu_seconds", 0.0)) for n in RETRIEVAL if n in arts)
    cost = {
        "retrieval_cpu_s": round(retrieval, 1),
        "samples": samples,
        "windows": len(c),
        "terms_retrieved": terms["retrieved"],
        "terms_generated": terms["generated"],
        "cpu_s_per_pair": round(
            (
                retrieval
                + samples * u.get("sample", np.nan)
                + sum(n * u.get(f"term_{k}", np.nan) for k, n in terms.items() if n)
            )
            / n_pairs,
            3,
        ),
    }
    return {
        "pair_ids": lab.column("pair_id").to_numpy(),
        "gold": lab.column("gold").to_numpy(),
        "pred": pred,
        "row": {"origin": round(spearman_x100(pred, lab.column("gold").to_numpy()), 2), **cost},
        "units": u,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument(
        "--rows", nargs="+", required=True, help="NAME=RUN@K1,K2[:S|raw] (view S by default)"
    )
    ap.add_argument("--reference", required=True, help="NAME@K: the row the CIs compare with")
    ap.add_argument("--units-from", nargs="*", default=[], help="runs giving unit costs")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--name", default="origin_matched")
    ap.add_argument("--note", default="")
    a = ap.parse_args(argv)
    units: dict[str, float] = {}
    for run in a.units_from:
        units |= unit_costs(*run_artefacts(a.root, run))
    results = {}
    for spec in a.rows:
        name, rest = spec.split("=", 1)
        run, rest = rest.split("@", 1)
        ks, _, view = rest.partition(":")
        for k in (int(x) for x in ks.split(",")):
            r = evaluate_row(a.root, run, k, view or "S", units)
            results[f"{name}@{k}"] = (name, run, k, view or "S", r)
    ref = results[a.reference][4]
    rows = []
    for key, (name, run, k, view, r) in results.items():
        if not np.array_equal(r["pair_ids"], ref["pair_ids"]):
            raise SystemExit(f"{run}: not the reference run's pairs")
        row = {"contexts": name, "run": run, "k": k, "view": view, **r["row"]}
        if key != a.reference:
            d = bootstrap_diff_ci(r["gold"], r["pred"], ref["pred"], n_resamples=a.resamples)
            row[f"minus_{a.reference}"] = round(d["delta"], 2)
            row["ci"] = [round(d["ci_low"], 2), round(d["ci_high"], 2)]
        print(row, flush=True)
        rows.append(row)
    write_results(
        a.name,
        rows,
        meta={
            "command": "python -m bench.archive.bench_origin_matched "
            + " ".join(argv or sys.argv[1:]),
            "what": "Spearman x100 of Eq. 4 (cosine) at |Cs| = k; CPU-s per pair = retrieval "
            "stages + samples x CPU per sample + terms x CPU per term of their context kind "
            "(module doc); CI: "
            "paired BCa 95% of the row minus the reference on the same pairs",
            "unit_costs": {
                key: {u: round(v, 4) for u, v in r["units"].items()}
                for key, (_, _, _, _, r) in results.items()
            },
            "note": a.note,
        },
    )


if __name__ == "__main__":
    main()
