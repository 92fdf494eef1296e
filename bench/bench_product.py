"""Benchmark for the dataset-as-product commands: export and explain cost on a run,
and the STS test-set contamination of corpus sentences.

* export: seconds per format (hf / parquet / jsonl) for the run's labelled pairs, with bytes;
* explain: seconds for a pair the run labelled (S from the score cache), for a pair of unseen
  sentences (the run's queries/retrieve/screen/select build their Cs, then S is computed), and
  the same unseen pair again (everything cached);
* contamination: distinct sentences of a run's queries (and, with ``--corpus``, of its whole
  shard artefact) matched against the STS test files of ``--sts-dir``: our exact n-gram Jaccard
  through an inverted index (product/contamination.py) against datasketch's MinHash LSH at the
  same threshold (the library one would otherwise pick): counts, agreement and seconds.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_product --run RUN [--books-run RUN]
--sts-dir ../shared/data/sts [--corpus]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import median, write_results
from ctxsim.flows.explain import explain_pair
from ctxsim.product.contamination import (
    ContaminationParams,
    check_contamination,
    load_test_sentences,
    ngrams,
    normalise,
)
from ctxsim.product.export import export_run
from ctxsim.store.artefacts import ArtefactStore

UNSEEN = [
    ("The kettle whistled while we argued about the rent.", "Rain fell on the market stalls."),
    ("Her bicycle had a flat tyre again.", "The choir practised the new hymn twice."),
    ("He forgot his umbrella at the bus stop.", "Our neighbour trimmed the tall hedge."),
]


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def bench_export(store: ArtefactStore, run_id: str, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for fmt in ("hf", "parquet", "jsonl"):
        times, size = [], 0
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                summary = export_run(store, run_id, Path(d) / "ds", fmt)
                times.append(time.perf_counter() - t0)
                size = _bytes(Path(d) / "ds")
        rows.append(
            {
                "what": f"export --format {fmt}",
                "pairs": sum(summary["splits"].values()),
                "seconds_median": round(median(times), 3),
                "seconds_all": [round(t, 3) for t in times],
                "bytes": size,
            }
        )
    return rows


def bench_explain(store: ArtefactStore, run_id: str, repeat: int) -> list[dict[str, Any]]:
    rec = store.read_run(run_id)
    label = store.require("label", rec["stages"]["label"]["fingerprint"]).read_table()
    row = label.to_pylist()[0]
    rows = []
    times, res = [], {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = explain_pair(store, run_id, row["s1"], row["s2"])
        times.append(time.perf_counter() - t0)
    rows.append(
        {
            "what": "explain, pair the run labelled",
            "contexts": len(res["contexts"]),
            "seconds_median": round(median(times), 3),
            "seconds_all": [round(t, 3) for t in times],
            "scoring_calls": sum(s["forward_calls"] for s in res["sentences"]),
            "label_matches_run": abs(res["label"] - row["label"]) < 1e-5,
        }
    )
    first, again = [], []
    calls_first, calls_again, n_ctx = 0, 0, 0
    for a, b in UNSEEN[:repeat]:
        t0 = time.perf_counter()
        r1 = explain_pair(store, run_id, a, b)
        first.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        r2 = explain_pair(store, run_id, a, b)
        again.append(time.perf_counter() - t0)
        calls_first += sum(s["forward_calls"] for s in r1["sentences"])
        calls_again += sum(s["forward_calls"] for s in r2["sentences"])
        n_ctx = len(r1["contexts"])
    rows.append(
        {
            "what": "explain, unseen pair (first call)",
            "contexts": n_ctx,
            "seconds_median": round(median(first), 3),
            "seconds_all": [round(t, 3) for t in first],
            "scoring_calls": calls_first,
        }
    )
    rows.append(
        {
            "what": "explain, same unseen pair again",
            "contexts": n_ctx,
            "seconds_median": round(median(again), 3),
            "seconds_all": [round(t, 3) for t in again],
            "scoring_calls": calls_again,
        }
    )
    return rows


def minhash_lsh(sentences: list[str], sts_dir: str, p: ContaminationParams) -> tuple[int, float]:
    """datasketch MinHash LSH at the same threshold: sentences with a candidate whose MinHash
    Jaccard estimate passes (exact normalised matches included, as they share every n-gram)."""
    from datasketch import MinHash, MinHashLSH

    t0 = time.perf_counter()
    tests, _ = load_test_sentences(sts_dir)
    lsh = MinHashLSH(threshold=p.threshold, num_perm=128)
    seen = set()

    def mh(norm: str) -> MinHash:
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([" ".join(g).encode() for g in ngrams(norm, p.ngram)])
        return m

    sigs = {}
    for k, text in enumerate(tests):
        norm = normalise(text)
        if norm and norm not in seen:
            seen.add(norm)
            sigs[str(k)] = m = mh(norm)
            lsh.insert(str(k), m)
    hits = 0
    for s in sorted(set(sentences)):
        norm = normalise(s)
        if not norm:
            continue
        m = mh(norm)
        if any(m.jaccard(sigs[c]) >= p.threshold for c in lsh.query(m)):
            hits += 1
    return hits, time.perf_counter() - t0


def bench_contamination(
    store: ArtefactStore, run_id: str, sts_dir: str, corpus: bool
) -> list[dict[str, Any]]:
    rec = store.read_run(run_id)
    p = ContaminationParams()
    sets = {
        "queries": store.require("queries", rec["stages"]["queries"]["fingerprint"])
        .read_table(["text"])
        .column("text")
        .to_pylist()
    }
    if corpus:
        sets["whole corpus (shard)"] = (
            store.require("shard", rec["stages"]["shard"]["fingerprint"])
            .read_table(["text"])
            .column("text")
            .to_pylist()
        )
    rows = []
    for name, texts in sets.items():
        t0 = time.perf_counter()
        rep = check_contamination(texts, sts_dir, p)
        ours = time.perf_counter() - t0
        lsh_hits, lsh_s = minhash_lsh(texts, sts_dir, p)
        rows.append(
            {
                "sentences": name,
                "distinct": rep["checked_sentences"],
                "test_files": len(rep["test_files"]),
                "test_sentences": rep["test_sentences"],
                "contaminated": rep["contaminated"],
                "exact": rep["exact"],
                "ngram": rep["ngram"],
                "by_test_set": rep["by_test_set"],
                "seconds_ours": round(ours, 2),
                "minhash_lsh_hits": lsh_hits,
                "seconds_minhash_lsh": round(lsh_s, 2),
                "examples": [
                    f"{e['kind']} {e['jaccard']} {e['test_set']}: {e['sentence'][:80]}"
                    for e in rep["examples"][:5]
                ],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default="data/artefacts")
    ap.add_argument("--run", required=True, help="a quickstart run through label")
    ap.add_argument("--books-run", help="a run whose queries (and shard) are checked")
    ap.add_argument("--sts-dir", default="../shared/data/sts")
    ap.add_argument("--corpus", action="store_true", help="also check every shard sentence")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--name", default="product")
    args = ap.parse_args(argv)
    store = ArtefactStore(args.root)
    rows = bench_export(store, args.run, args.repeat) + bench_explain(store, args.run, args.repeat)
    tables = {}
    if args.books_run:
        tables["contamination"] = bench_contamination(
            store, args.books_run, args.sts_dir, args.corpus
        )
    write_results(
        args.name,
        rows,
        meta={"command": " ".join(["python -m bench.bench_product", *sys.argv[1:]]), **vars(args)},
        tables=tables,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
