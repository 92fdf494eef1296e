"""Benchmark for the tiny models' vocabulary (models/training/wordpiece.py; `generator` and `train`
stages).

One run compares, on book sentences (the bundled sample corpus repeated when the books are absent):

- ``library``  what a user would pick: tokenizers' ``WordPieceTrainer`` as it is; fast, but it
               numbers continuing pieces in hash-map order, so the vocabulary changes per run;
- ``ours``     ``learn_wordpiece``: the same trainer after registering every ``##<char>``;
- ``naive``    the plain Python way to a fixed vocabulary: count words with ``collections.Counter``
               and keep the most frequent whole words plus every character piece (deterministic,
               but no subword merges: rarer words fall apart into characters).

Each method runs in fresh processes (tokenizers seeds its hash maps per process): median seconds,
peak RSS of the child, distinct vocabularies over the runs, and tokens per word on held-out
sentences (how well the vocabulary compresses text the model never saw), across input sizes.

Run: ``.venv/bin/python -m bench.bench_wordpiece [--quick]``.
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

from bench.common import CORPUS as BOOKS
from bench.harness import median, run_isolated, write_results
from ctxsim.models.training.wordpiece import BERT_SPECIALS as SPECIALS

REPO = Path(__file__).resolve().parents[1]


def load_paragraphs(n: int) -> list[str]:
    """The first ``n`` paragraphs of the books (alphabetical), else the sample corpus repeated."""
    out: list[str] = []
    files = sorted(BOOKS.glob("*.jsonl.gz"))
    if files:
        for path in files:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for line in f:
                    out.extend(json.loads(line)["paragraphs"])
                    if len(out) >= n:
                        return out[:n]
    sample = [
        p
        for line in (REPO / "data/sample/docs.jsonl").read_text().splitlines()
        for p in json.loads(line)["paragraphs"]
    ]
    while len(out) < n:
        out.extend(sample)
    return out[:n]


def _naive(texts: list[str], vocab_size: int):
    from tokenizers import models

    from ctxsim.models.training.wordpiece import bert_style, continuing_pieces

    probe = bert_style(models.WordPiece(unk_token="[UNK]"))
    counts: Counter[str] = Counter()
    chars: set[str] = set()
    for t in texts:
        for w, _ in probe.pre_tokenizer.pre_tokenize_str(probe.normalizer.normalize_str(t)):
            counts[w] += 1
            chars.update(w)
    base = [*SPECIALS, *sorted(chars), *continuing_pieces(probe, texts)]
    words = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    vocab = list(dict.fromkeys(base + words))[:vocab_size]
    return bert_style(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))


def _library(texts: list[str], vocab_size: int):
    from tokenizers import models, trainers

    from ctxsim.models.training.wordpiece import bert_style

    tok = bert_style(models.WordPiece(unk_token="[UNK]"))
    tok.train_from_iterator(
        texts,
        trainer=trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS)),
    )
    return tok


def _ours(texts: list[str], vocab_size: int):
    from ctxsim.models.training.wordpiece import learn_wordpiece

    return learn_wordpiece(texts, vocab_size, SPECIALS)


METHODS = {"library": _library, "ours": _ours, "naive": _naive}


def learn_once(method: str, n_train: int, n_heldout: int, vocab_size: int) -> dict:
    """One fresh-process run: seconds to learn, vocabulary digest, tokens per held-out word."""
    paras = load_paragraphs(n_train + n_heldout)
    train, heldout = paras[:n_train], paras[n_train:]
    t0 = time.perf_counter()
    tok = METHODS[method](train, vocab_size)
    seconds = time.perf_counter() - t0
    vocab = json.dumps(sorted(tok.get_vocab().items())).encode()
    encoded = [e.ids for e in tok.encode_batch(heldout)]
    unk = tok.token_to_id("[UNK]")
    assert tok.pre_tokenizer is not None
    n_words = sum(len(tok.pre_tokenizer.pre_tokenize_str(t)) for t in heldout)
    return {
        "seconds": seconds,
        "digest": hashlib.blake2b(vocab, digest_size=8).hexdigest(),
        "tokens_per_word": sum(map(len, encoded)) / max(n_words, 1),
        "n_unk": sum(ids.count(unk) for ids in encoded),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None, help="fresh processes per method and size")
    ap.add_argument("--vocab-size", type=int, default=4000)
    ap.add_argument("--name", default=None)
    args = ap.parse_args()
    sizes = [1000, 4000] if args.quick else [2000, 8000, 32000]
    runs = args.runs or (3 if args.quick else 5)
    n_heldout = 500
    rows = []
    for n in sizes:
        base = None
        for method in METHODS:
            res = [
                run_isolated(learn_once, method, n, n_heldout, args.vocab_size) for _ in range(runs)
            ]
            secs = [r[0]["seconds"] for r in res]
            row = {
                "paragraphs": n,
                "method": method,
                "median_s": median(secs),
                "peak_rss_mb": max(r[1] for r in res),
                "distinct_vocabularies": len({r[0]["digest"] for r in res}),
                "runs": runs,
                "tokens_per_word": res[0][0]["tokens_per_word"],
                "unk_tokens": res[0][0]["n_unk"],
            }
            if method == "library":
                base = row["median_s"]
            row["time_vs_library"] = row["median_s"] / base if base else None
            rows.append(row)
            print(json.dumps(row), flush=True)
    growth = []
    for method in METHODS:
        ts = [r["median_s"] for r in rows if r["method"] == method]
        growth.append(
            {
                "method": method,
                **{
                    f"x{sizes[i + 1] // sizes[i]} step {i + 1}": ts[i + 1] / ts[i]
                    for i in range(len(ts) - 1)
                },
            }
        )
    write_results(
        args.name or ("wordpiece_quick" if args.quick else "wordpiece"),
        rows,
        meta={
            "command": " ".join(
                [Path(sys.executable).name, "-m", "bench.bench_wordpiece", *sys.argv[1:]]
            ),
            "vocab_size": args.vocab_size,
            "heldout_paragraphs": n_heldout,
            "corpus": str(BOOKS) if any(BOOKS.glob("*.jsonl.gz")) else "data/sample (repeated)",
        },
        tables={"growth (time ratio per size step)": growth},
    )


if __name__ == "__main__":
    main()
