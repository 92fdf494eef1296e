"""End-to-end cost of a finished `ctxsim run`: labelled pairs per CPU-hour, per-stage breakdown.

Reads run records (``ROOT/runs/<id>.json``) and the manifests they point to, so it measures the
real pipeline, not a model of it. Per stage: wall seconds of the shards computed in that run,
CPU seconds (``cpu_seconds`` in the manifest's stats; absent for artefacts published before it
was recorded), rows, and whether the stage was computed or reused. Two rates are reported,
because corpus-side stages (shard, contexts, index, discriminator) are paid once per corpus and
then reused by every labelling run:

- ``pairs_per_cpu_hour_all``: labelled pairs / CPU time of every stage computed for them;
- ``pairs_per_cpu_hour_marginal``: labelled pairs / CPU time of the per-query stages only
  (queries, retrieve, screen, gencontexts, select, pairs, score, label) - the cost of more
  pairs.

Several runs of one config at different corpus sizes give the growth with corpus size (``--runs
a b c``). Usage::

    .venv/bin/python -m bench.bench_pipeline --root data/artefacts --runs books-label
    .venv/bin/python -m bench.bench_pipeline --runs ROOT_A:run-a ROOT_B:run-b   # several roots

A run given as ``ROOT:RUN`` is read from that root (two runs whose artefacts share
fingerprints, e.g. a speed knob on and off, need roots of their own); the results name it by
its run id.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.common import stage_rows, stages_to_label
from bench.harness import write_results


def per_query_stages() -> tuple[str, ...]:
    """The stages whose work follows the queries (`Stage.per_query`): the marginal cost."""
    from ctxsim.tasks import STAGES, load_stage

    return tuple(n for n in STAGES if load_stage(n).per_query)


def summarise(rows: list[dict[str, Any]], rec: dict[str, Any]) -> dict[str, Any]:
    label = next((r for r in rows if r["stage"] == "label"), None)
    if label is None:
        raise ValueError(f"run {rec['run_id']!r} has no label stage (run it with --until label)")
    pairs = int(label["rows"] or 0)
    shard = next((r for r in rows if r["stage"] == "shard"), None)

    def cost(keep: tuple[str, ...] | None) -> float:
        sel = [r for r in rows if keep is None or r["stage"] in keep]
        # CPU seconds where recorded, else wall seconds x torch threads (an upper bound)
        threads = max(int(rec.get("config", {}).get("run", {}).get("torch_threads", 1)), 1)
        return sum(r["cpu_s"] if r["cpu_s"] is not None else r["wall_s"] * threads for r in sel)

    to_label = stages_to_label()
    pre_label = tuple(r["stage"] for r in rows if r["stage"] in to_label)
    all_s, marginal_s = cost(pre_label), cost(per_query_stages())
    return {
        "run": rec["run_id"],
        "config": rec.get("config_source"),
        "corpus_sentences": shard["rows"] if shard else None,
        "labelled_pairs": pairs,
        "cpu_s_to_label": round(all_s, 1),
        "cpu_s_per_query_stages": round(marginal_s, 1),
        "pairs_per_cpu_hour_all": round(3600 * pairs / max(all_s, 1e-9), 1),
        "pairs_per_cpu_hour_marginal": round(3600 * pairs / max(marginal_s, 1e-9), 1),
        "score_share_of_marginal": round(cost(("score",)) / max(marginal_s, 1e-9), 3),
    }


def growth(rows: list[dict[str, Any]], runs: list[str]) -> list[dict[str, Any]]:
    """Per stage, CPU seconds of each run divided by the first run's (several corpus sizes of
    one config: which stages grow with the corpus, and how fast), next to the corpus growth."""
    cpu = {(r["run"], r["stage"]): r["cpu_s"] for r in rows}
    sent = {r["run"]: r["rows"] for r in rows if r["stage"] == "shard"}
    out = []
    for stage in dict.fromkeys(r["stage"] for r in rows):
        base = cpu.get((runs[0], stage))
        row: dict[str, Any] = {"stage": stage, f"cpu_s_{runs[0]}": base}
        for run in runs[1:]:
            v = cpu.get((run, stage))
            row[f"x_{run}"] = round(v / base, 2) if v is not None and base else None
        out.append(row)
    row = {"stage": "(corpus sentences)", f"cpu_s_{runs[0]}": sent.get(runs[0])}
    for run in runs[1:]:
        ok = sent.get(run) and sent.get(runs[0])
        row[f"x_{run}"] = round(sent[run] / sent[runs[0]], 2) if ok else None
    return [*out, row]


def root_and_run(given: str, default_root: Path) -> tuple[Path, str]:
    """``RUN`` (in ``default_root``) or ``ROOT:RUN``."""
    root, _, run_id = given.rpartition(":")
    return (Path(root) if root else default_root), run_id


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="data/artefacts")
    ap.add_argument(
        "--runs",
        nargs="+",
        required=True,
        help="run ids (ctxsim runs), or ROOT:RUN for another root",
    )
    ap.add_argument("--name", default="pipeline", help="results file name")
    a = ap.parse_args(argv)
    all_rows, summaries = [], []
    run_ids = []
    for given in a.runs:
        root, run_id = root_and_run(given, Path(a.root))
        run_ids.append(run_id)
        rows, rec = stage_rows(root, run_id)
        all_rows += rows
        summaries.append(summarise(rows, rec))
    meta = {
        "command": "python -m bench.bench_pipeline --runs " + " ".join(run_ids),
        "note": "cpu_s from each manifest's stats (time.process_time per shard); stages reused "
        "from earlier runs keep the CPU time of the run that computed them",
    }
    tables = {"stages": all_rows}
    if len(run_ids) > 1:
        tables["growth_vs_first_run"] = growth(all_rows, run_ids)
    _, md = write_results(a.name, summaries, meta, tables=tables)
    print(md.read_text())


if __name__ == "__main__":
    main()
