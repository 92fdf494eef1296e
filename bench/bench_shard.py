"""Benchmark for the ``shard`` stage: which sentence splitter, measured.

One run compares blingfire, syntok, pysbd and the naive regex baseline
(``(?<=[.!?])\\s+(?=[A-Z"“])`` in a single loop) on

1. accuracy against ``bench/splitter_gold.json`` (hand-checked boundaries of 64 tricky book
   paragraphs, 217 sentences: abbreviations, dialogue, ellipses; references only, the text is
   read from the shared corpus and checked by sha256): boundary precision / recall / F1 and
   paragraph exact match, overall and per kind;
2. speed on 10% and 100% of the books corpus (``--quick``: 2% and 10%): sentences/s, MB/s and
   peak RSS, each (method, size) in a fresh process so memory is its own; a measurement that
   would exceed ``--max-seconds`` stops there and reports the rate over what it processed;
3. scaling with the length of ONE paragraph (why ``models.sentences`` chunks long inputs).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_shard [--quick]``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import CORPUS
from bench.harness import current_rss_mb, median, run_isolated, write_results
from ctxsim.models.corpus.sentences import METHODS, split_sentences

GOLD = Path(__file__).resolve().parent / "splitter_gold.json"


def _norm(text: str, j: int) -> int:
    """Boundary offset -> first alphanumeric character at or after it (as in the gold file)."""
    while j < len(text) and not text[j].isalnum():
        j += 1
    return j


def boundaries(text: str, sents: list[str]) -> set[int]:
    """Normalised start offsets of every sentence but the first, found in order in ``text``."""
    cur, starts = 0, []
    for s in sents:
        j = text.find(s, cur)
        if j < 0:
            raise ValueError(f"sentence not found in paragraph after offset {cur}: {s[:60]!r}")
        starts.append(j)
        cur = j + len(s)
    return {_norm(text, j) for j in starts[1:]} - {len(text)}


def load_gold(corpus: Path) -> list[dict[str, Any]]:
    """Gold items with their paragraph text read from the corpus and checked by sha256."""
    gold = json.loads(GOLD.read_text(encoding="utf-8"))
    books: dict[str, dict[str, list[str]]] = {}
    items = []
    for n, it in enumerate(gold["items"]):
        if it["file"] not in books:
            path = corpus / it["file"]
            with gzip.open(path, "rt", encoding="utf-8") as f:
                books[it["file"]] = {
                    r["section"]: r["paragraphs"] for r in (json.loads(line) for line in f)
                }
        try:
            text = books[it["file"]][it["section"]][it["para_idx"]]
        except (KeyError, IndexError):
            raise ValueError(
                f"{GOLD}: item {n}: {it['file']} has no {it['section']}[{it['para_idx']}]"
            ) from None
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != it["sha256"]:
            raise ValueError(f"{GOLD}: item {n}: paragraph text differs from the annotated one")
        items.append({**it, "text": text})
    return items


def accuracy(items: list[dict[str, Any]], method: str) -> dict[str, Any]:
    """Boundary P/R/F1 and exact match of ``method`` on the gold items, overall and per kind."""
    tot: Counter = Counter()
    per_kind: dict[str, Counter] = {}
    errors = []
    for it in items:
        text, gold = it["text"], set(it["boundaries"])
        pred = boundaries(text, split_sentences(text, method))
        c = Counter(
            tp=len(pred & gold),
            fp=len(pred - gold),
            fn=len(gold - pred),
            exact=int(pred == gold),
            n=1,
            sents=len(gold) + 1,
        )
        tot.update(c)
        per_kind.setdefault(it["kind"], Counter()).update(c)
        for j in sorted(pred ^ gold):
            kind = "false split" if j in pred else "missed"
            errors.append(f"{kind}: …{text[max(0, j - 25) : j]}‖{text[j : j + 15]}…")

    def prf(c: Counter) -> tuple[float, float, float]:
        p = c["tp"] / max(1, c["tp"] + c["fp"])
        r = c["tp"] / max(1, c["tp"] + c["fn"])
        return p, r, 2 * p * r / max(1e-12, p + r)

    p, r, f = prf(tot)
    row = {
        "method": method,
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(f, 4),
        "exact_match": round(tot["exact"] / tot["n"], 4),
        "false_splits": tot["fp"],
        "missed": tot["fn"],
    }
    for kind, c in sorted(per_kind.items()):
        row[f"f1_{kind}"] = round(prf(c)[2], 4)
    return {"row": row, "errors": errors}


def sample_paragraphs(corpus: Path, fraction: float) -> list[str]:
    """Every k-th section of every book (k = 1/fraction): all styles, reading order kept."""
    step = max(1, round(1 / fraction))
    out, i = [], 0
    for path in sorted(corpus.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                if i % step == 0:
                    out.extend(json.loads(line)["paragraphs"])
                i += 1
    return out


def speed_child(corpus: str, fraction: float, method: str, max_seconds: float, repeat: int) -> dict:
    """In a fresh process: load the sample, split it ``repeat`` times (time permitting)."""
    paras = sample_paragraphs(Path(corpus), fraction)
    base = current_rss_mb()
    split_sentences("Warm up. Load the model.", method)
    times, n_sents, n_bytes, done = [], 0, 0, len(paras)
    for r in range(repeat):
        n_sents = n_bytes = 0
        t0 = time.perf_counter()
        for i, p in enumerate(paras):
            n_sents += len(split_sentences(p, method))
            n_bytes += len(p.encode("utf-8"))
            if i % 64 == 0 and time.perf_counter() - t0 > max_seconds:
                done = i + 1
                break
        times.append(time.perf_counter() - t0)
        if done < len(paras) or sum(times) * (r + 2) / (r + 1) > max_seconds:
            break
    total_bytes = sum(len(p.encode("utf-8")) for p in paras)
    return {
        "n_paragraphs": len(paras),
        "done_paragraphs": done,
        "n_sentences": n_sents,
        "bytes": n_bytes,
        "sample_mb": total_bytes / 1e6,
        "times": times,
        "base_rss_mb": base,
    }


def long_input(methods: list[str], text: str) -> list[dict[str, Any]]:
    """Seconds to split ONE paragraph of growing length, chunking disabled."""
    rows = []
    for m in methods:
        split_sentences("Warm up.", m)
        for n in (5_000, 20_000, 80_000):
            t0 = time.perf_counter()
            split_sentences(text[:n], m, max_chars=10**9)
            dt = time.perf_counter() - t0
            rows.append(
                {
                    "method": m,
                    "chars": n,
                    "seconds": round(dt, 4),
                    "us_per_char": round(dt / n * 1e6, 3),
                }
            )
            if dt > 5:  # super-linear: the next size would take minutes
                break
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2%% and 10%% instead of 10%% and 100%%")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="cap per (method, size) timing; default 60 quick, 150 full",
    )
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    fractions = (0.02, 0.10) if args.quick else (0.10, 1.0)
    cap = args.max_seconds or (60.0 if args.quick else 150.0)
    if not args.corpus.is_dir():
        sys.exit(f"corpus folder not found: {args.corpus} (set CTXSIM_BOOKS or --corpus)")
    t_start = time.perf_counter()

    items = load_gold(args.corpus)
    acc = {m: accuracy(items, m) for m in args.methods}
    acc_rows = sorted((a["row"] for a in acc.values()), key=lambda r: -r["f1"])
    for r in acc_rows:
        print("accuracy", r, flush=True)

    speed_rows = []
    for frac in fractions:
        for m in args.methods:
            res, peak, _ = run_isolated(
                speed_child, str(args.corpus), frac, m, cap, args.repeat if frac < 1 else 1
            )
            sec = median(res["times"])
            complete = res["done_paragraphs"] == res["n_paragraphs"]
            row = {
                "corpus_fraction": frac,
                "method": m,
                "sample_mb": round(res["sample_mb"], 1),
                "processed_mb": round(res["bytes"] / 1e6, 2),
                "complete": complete,
                "sentences": res["n_sentences"],
                "seconds_median": round(sec, 2),
                "runs": len(res["times"]),
                "sentences_per_s": round(res["n_sentences"] / sec),
                "mb_per_s": round(res["bytes"] / 1e6 / sec, 3),
                "peak_rss_mb": round(peak, 1),
                "rss_over_loaded_text_mb": round(peak - res["base_rss_mb"], 1),
            }
            speed_rows.append(row)
            print("speed", row, flush=True)
    for frac in fractions:  # ratio to the naive baseline at the same size
        rows = [r for r in speed_rows if r["corpus_fraction"] == frac]
        base = next((r["mb_per_s"] for r in rows if r["method"] == "regex"), None)
        for r in rows:
            r["speed_vs_regex"] = round(r["mb_per_s"] / base, 3) if base else None

    sample_text = " ".join(sample_paragraphs(args.corpus, 0.01))[:80_000]
    long_rows = long_input(args.methods, sample_text)

    winner = acc_rows[0]["method"]
    meta = {
        "command": "python -m bench.bench_shard "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "corpus": str(args.corpus),
        "gold": f"{GOLD.name}: {len(items)} paragraphs, "
        f"{sum(len(i['boundaries']) + 1 for i in items)} sentences",
        "fractions": list(fractions),
        "max_seconds_per_measurement": cap,
        "most_accurate": winner,
        "wall_seconds": round(time.perf_counter() - t_start, 1),
        "note": "complete=False: the timing cap stopped the pass; rates are over processed_mb. "
        "peak_rss_mb is the child process (corpus sample text + splitter).",
    }
    tables = {
        "Accuracy on the hand-checked gold set": acc_rows,
        "One long paragraph (chunking disabled)": long_rows,
        "Errors of the most accurate splitter": [{"error": e} for e in acc[winner]["errors"]],
    }
    paths = write_results("shard", speed_rows, meta, tables=tables)
    print("wrote", *paths)


if __name__ == "__main__":
    main()
