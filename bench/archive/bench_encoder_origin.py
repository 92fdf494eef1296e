"""Origin with an encoder as the contextual model: Eq. 4 three ways, on a corpus's dev tasks.

The fit score is S(c, s) = cos(E(c), E(s)) for a packaged sentence encoder E (models/registry.py),
the contexts are the corpus's own units (paragraph chunks of the `contexts` artefact, or its
[c<, c>] windows), and a pair's label is the correlation of its two profiles
(models/contextual/encoder_origin.py). Compared, in one run, on the domain dev tasks (pair
classification
AP, QA retrieval nDCG@10) with paired bootstrap intervals against the encoder's own cosine:

- (a) the closed form over all contexts, centred (Pearson) and uncentred (cosine) profiles, and
  the naive way (profiles written out) for its exactness and CPU cost;
- (b) the calibrated profile p(c | s) = softmax(cos / τ) over all contexts, exact and blocked;
- (c) the paper's C = Cs1 + Cs2: each sentence's top-K contexts by faiss, K 8 / 32 / 500;
- on QA, a per-question z-scored sum of the closed form and the cosine.

    python -m bench.archive.bench_encoder_origin --root /tmp/mq_ctx \
        --domain-dir ../shared/data/domain \
        --name encoder_origin_medquad

``--root`` holds a run through `contexts` of the corpus (``ctxsim run --until contexts``).
Context embeddings are cached under ``--cache`` by model, unit, length and the texts' digest.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import write_results
from ctxsim.models.contextual.encoder_origin import (
    ScatterStats,
    adapted_embeddings,
    closed_form_similarity,
    explicit_profile_similarity,
    softmax_profiles,
    topk_union_similarity,
    unit_rows,
)
from ctxsim.models.evaluation import domain_metrics as D


def cpu_s() -> float:
    return time.process_time()


def context_units(root: str, unit: str, min_words: int, max_contexts: int, seed: int) -> list[str]:
    """The `embed` stage's context texts (chunks or windows of >= ``min_words`` words) of the
    run under ``root``, optionally a seeded sample of them."""
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.tasks.embed import context_units as embed_units

    store = ArtefactStore(root, create=False)
    shard, contexts = store.latest("shard"), store.latest("contexts")
    if shard is None or contexts is None:
        raise SystemExit(f"{root}: no shard/contexts artefacts (ctxsim run --until contexts)")
    _, texts = embed_units(contexts, shard, unit, min_words)
    if max_contexts and len(texts) > max_contexts:
        keep = np.sort(np.random.default_rng(seed).choice(len(texts), max_contexts, replace=False))
        texts = [texts[i] for i in keep]
    return texts


def encode(model: Any, texts: list[str], max_seq: int, cache: Path | None, tag: str) -> np.ndarray:
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = cache / f"{tag}-{max_seq}-{digest}.npy" if cache else None
    if path is not None and path.exists():
        return np.load(path)
    old = model.max_seq_length
    model.max_seq_length = max_seq
    emb = model.encode(texts, batch_size=64, convert_to_numpy=True, show_progress_bar=True)
    model.max_seq_length = old
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, emb)
    return emb


def zscore_rows(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(axis=1, keepdims=True)) / np.maximum(x.std(axis=1, keepdims=True), 1e-12)


def prob_profile_matrix(q: np.ndarray, d: np.ndarray, ctx: np.ndarray, tau: float) -> np.ndarray:
    """(questions x answers) Pearson of softmax profiles: standardised profiles' product."""

    def standard(e: np.ndarray) -> np.ndarray:
        out = np.empty((len(e), len(ctx)), dtype=np.float32)
        for i in range(0, len(e), 512):
            out[i : i + 512] = zscore_rows(softmax_profiles(e[i : i + 512], ctx, tau))
        return out

    return (standard(q) @ standard(d).T) / len(ctx)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--domain-dir", default="../shared/data/domain")
    ap.add_argument("--model", default="minilm")
    ap.add_argument(
        "--units",
        nargs="*",
        default=None,
        help="encoded here (default chunk window; none with --embed-root)",
    )
    ap.add_argument("--max-seq", type=int, default=64)
    ap.add_argument("--eval-max-seq", type=int, default=256)
    ap.add_argument("--min-words", type=int, default=8)
    ap.add_argument("--max-contexts", type=int, default=0, help="seeded sample; 0 = all")
    ap.add_argument("--taus", nargs="+", type=float, default=[0.02, 0.05, 0.1])
    ap.add_argument("--qa-taus", nargs="*", type=float, default=None, help="default: the first tau")
    ap.add_argument("--ks", nargs="*", type=int, default=[8, 32, 500])
    ap.add_argument("--cache", default=None)
    ap.add_argument(
        "--embed-root",
        default=None,
        help="take the context embeddings of the latest `embed` artefact under this root "
        "(the stage's unit and length) instead of encoding --units here",
    )
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--name", default="encoder_origin_medquad")
    args = ap.parse_args(argv)

    from ctxsim.models.encoders import load_encoder
    from ctxsim.readers.domain import discover_domain

    cache = Path(args.cache) if args.cache else None
    model = load_encoder(args.model, None, "cpu", model_key="--model")
    pair_sets, qa_sets = discover_domain(args.domain_dir)
    rqe, qa = pair_sets[0], qa_sets[0]
    old = model.max_seq_length
    model.max_seq_length = args.eval_max_seq
    e1 = model.encode(rqe.s1, batch_size=64, convert_to_numpy=True)
    e2 = model.encode(rqe.s2, batch_size=64, convert_to_numpy=True)
    eq = model.encode(qa.questions, batch_size=64, convert_to_numpy=True)
    ed = encode(model, qa.answers, args.eval_max_seq, cache, f"{args.model}-answers")
    model.max_seq_length = old
    y = np.asarray(rqe.labels)
    cos_pairs = (unit_rows(e1) * unit_rows(e2)).sum(axis=1)
    cos_qa = unit_rows(eq) @ unit_rows(ed).T
    per_cos = D.retrieval_per_query(cos_qa, qa.relevant)

    rows: list[dict[str, Any]] = []
    cost: list[dict[str, Any]] = []

    def row(unit: str, n_ctx: int, method: str, pairs: np.ndarray, qa_sim: np.ndarray | None):
        r: dict[str, Any] = {"unit": unit, "contexts": n_ctx, "method": method}
        ap_ = D.pair_classification_scores(pairs, rqe.labels)["ap"]
        ci = D.ap_diff_ci(y, pairs, cos_pairs, args.resamples, 0.95, 0)
        r[f"{rqe.name} AP"] = round(ap_, 2)
        r["AP vs cosine"] = f"{ci['delta']:+.2f} [{ci['ci_low']:+.2f}, {ci['ci_high']:+.2f}]"
        if qa_sim is not None:
            per = D.retrieval_per_query(qa_sim, qa.relevant)
            nd = float(np.mean(per["ndcg_at_10"]))
            ci = D.mean_diff_ci(per["ndcg_at_10"], per_cos["ndcg_at_10"], args.resamples, 0.95, 0)
            r[f"{qa.name} nDCG@10"] = round(nd, 2)
            r["nDCG vs cosine"] = f"{ci['delta']:+.2f} [{ci['ci_low']:+.2f}, {ci['ci_high']:+.2f}]"
        else:
            r[f"{qa.name} nDCG@10"] = "-"
            r["nDCG vs cosine"] = "-"
        rows.append(r)
        print(r, flush=True)

    row("-", 0, f"{args.model} cosine", cos_pairs, cos_qa)
    for unit, ctx, enc_cpu in context_sets(args, model, cache):
        n = len(ctx)
        t0 = cpu_s()
        stats = ScatterStats.of(ctx)
        scatter_cpu = cpu_s() - t0
        for centred in (True, False):
            m = stats.matrix(centred=centred)
            t0 = cpu_s()
            closed = closed_form_similarity(e1, e2, m)
            closed_cpu = cpu_s() - t0
            t0 = cpu_s()
            naive = explicit_profile_similarity(e1, e2, ctx, centred=centred)
            naive_cpu = cpu_s() - t0
            aq, ad = adapted_embeddings(eq, m), adapted_embeddings(ed, m)
            tag = "centred" if centred else "uncentred"
            row(unit, n, f"(a) closed form, {tag}", closed, aq @ ad.T)
            cost.append(
                {
                    "unit": unit,
                    "profiles": tag,
                    "contexts": n,
                    "max |closed - explicit|": f"{np.abs(closed - naive).max():.1e}",
                    f"closed CPU-s ({len(y)} pairs)": round(closed_cpu, 4),
                    f"explicit CPU-s ({len(y)} pairs)": round(naive_cpu, 3),
                    "context encoding CPU-s": round(enc_cpu, 1),
                    "scatter CPU-s": round(scatter_cpu, 2),
                }
            )
            if centred:
                z = zscore_rows(aq @ ad.T) + zscore_rows(cos_qa)
                row(unit, n, "(a) closed + cosine, z-summed (QA only)", closed, z)
        for tau in args.taus:
            sim = np.concatenate(
                [
                    _prob_pairs(e1[i : i + 256], e2[i : i + 256], ctx, tau)
                    for i in range(0, len(e1), 256)
                ]
            )
            qa_taus = args.taus[:1] if args.qa_taus is None else args.qa_taus
            qa_sim = prob_profile_matrix(eq, ed, ctx, tau) if tau in qa_taus else None
            row(unit, n, f"(b) softmax p(c|s), tau {tau}", sim, qa_sim)
        for k in args.ks:
            row(
                unit,
                n,
                f"(c) top-{k} union (faiss), centred",
                topk_union_similarity(e1, e2, ctx, k),
                None,
            )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    write_results(
        args.name,
        rows,
        meta={
            "command": "python -m bench.archive.bench_encoder_origin "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "model": args.model,
            "pairs": f"{rqe.name} ({len(y)})",
            "qa": f"{qa.name} ({len(qa)} questions, {len(qa.answers)} answers)",
            "max_seq (contexts / eval)": f"{args.max_seq} / {args.eval_max_seq}",
            "min_words": args.min_words,
            "peak_rss_mb": round(peak),
            "note": "intervals: paired bootstrap (pairs / questions resampled), 95%, vs the "
            "encoder's own cosine; (b) on QA only at --qa-taus (cost); (c) on pairs only",
        },
        tables={"closed form vs profiles written out (exactness, CPU)": cost},
    )


def context_sets(args: argparse.Namespace, model: Any, cache: Path | None):
    """(unit, context embeddings, CPU-s of their encoding) for each unit measured."""
    if args.embed_root:
        from ctxsim.store.artefacts import ArtefactStore
        from ctxsim.tasks.embed import read_embeddings

        art = ArtefactStore(args.embed_root, create=False).latest("embed")
        if art is None:
            raise SystemExit(f"{args.embed_root}: no published embed artefact")
        params = art.manifest.get("params", {})
        emb = read_embeddings(art)
        n_all = len(emb)
        if args.max_contexts and n_all > args.max_contexts:
            rng = np.random.default_rng(0)
            emb = emb[np.sort(rng.choice(n_all, args.max_contexts, replace=False))]
        unit = f"{params.get('unit', '?')} (embed {art.fingerprint})"
        yield unit, emb, float(art.cpu_seconds or 0.0) * len(emb) / n_all
    units = (
        args.units if args.units is not None else ([] if args.embed_root else ["chunk", "window"])
    )
    for unit in units:
        texts = context_units(args.root, unit, args.min_words, args.max_contexts, 0)
        t0 = cpu_s()
        ctx = encode(model, texts, args.max_seq, cache, f"{args.model}-{unit}")
        yield unit, ctx, cpu_s() - t0


def _prob_pairs(e1: np.ndarray, e2: np.ndarray, ctx: np.ndarray, tau: float) -> np.ndarray:
    from ctxsim.models.contextual.encoder_origin import softmax_profile_similarity

    return softmax_profile_similarity(e1, e2, ctx, tau, centred=True, space="prob")


if __name__ == "__main__":
    main()
