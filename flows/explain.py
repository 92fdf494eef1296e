"""`ctxsim explain S1 S2`, the orchestration: read the run, give sentences it never labelled a
context set with the run's own stages, and hand the arithmetic to product/explain.py.

A sentence the run did not label has no Cs: it is given one by the run's own stages for new
queries (documented simplification): a small STS-style file with the pair goes through the run's
`queries` (source sts), `retrieve`, `screen` and `select` with the run's settings and artefacts
(index, discriminator, generator are reused by fingerprint); its artefacts are published on the
run's root like any other, keyed by the texts, so explaining the same pair again computes nothing.

Limits: a sentence the run did not label is held to the limit the run held its own query
sentences to (``queries.max_tokens``): a longer one is refused in one line (the scorer would
otherwise cut it silently at its sentence budget). A read-only artefact root is only read: what
explain would cache there (the new-query stages, the score cache's new terms) goes to a
temporary folder, dropped afterwards, and the result says so.

An encoder-route run (``label.contextual: encoder``) has no Cs: its closed-form label is a sum
over every context unit of the `embed` artefact, so explain encodes both sentences with the
run's embed encoder (its ``max_seq_length``; any pair works, no new-query stages) and lists the
units whose terms push the label up and pull it down most (product/explain_encoder.py: exact up
to ``EXACT_MAX`` units, faiss candidates with an index cached per embed artefact beyond). The
softmax and top-K forms are not such a sum: explain refuses them in one line
(:func:`explain_problem`, which the run summary asks too).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.product.explain import (
    context_info,
    context_sets,
    decompose,
    label_in_run,
    sentence_scores,
)
from ctxsim.store.artefacts import Artefact, ArtefactStore, sha256_file
from ctxsim.store.checked import move_aside
from ctxsim.store.errors import InputError


def new_query_stages() -> list[str]:
    """Stages run for sentences the run did not label (their inputs come from the run): the
    per-query stages that `select` reads, and `select` (contexts sampled for Eq. 4 labels by
    `gencontexts` are not among them)."""
    from ctxsim.tasks import STAGES, load_stage, upstream_of

    wanted = upstream_of("select") | {"select"}
    return [
        n for n in STAGES if n in wanted and load_stage(n).per_query and not load_stage(n).labelling
    ]


def root_writable(root: Path) -> bool:
    """Whether a file can be created in the artefact root (writing is the test: ``os.access``
    says yes to root on a read-only mount)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=root)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


@contextlib.contextmanager
def _work_store(store: ArtefactStore) -> Iterator[tuple[ArtefactStore, str | None]]:
    """Where explain writes what it computes: the run's root, or a temporary store when the
    root is read-only (then a note for the result)."""
    if root_writable(Path(store.root)):
        yield store, None
        return
    with tempfile.TemporaryDirectory(prefix="ctxsim-explain-root-") as tmp:
        yield (
            ArtefactStore(Path(tmp)),
            (
                f"artefact root {store.root} is read-only: S computed without its score cache and "
                "new-query stages in a temporary folder, nothing cached"
            ),
        )


def check_sentence_length(record: dict[str, Any], text: str, name: str) -> None:
    """Refuse a sentence longer than the run's own queries could be (``queries.max_tokens``,
    counted as the shard stage counts them)."""
    from ctxsim.models.corpus.sentences import count_tokens

    section = record.get("config", {}).get("queries")
    if section is None:
        return
    limit = _params(record, "queries").max_tokens
    n = count_tokens(text)
    if n > limit:
        raise InputError(
            f"{name} has {n:,} tokens, more than this run's queries.max_tokens={limit} (the "
            "limit its own sentences were held to; the scorer would cut it silently): explain "
            "a shorter sentence"
        )


def _params(record: dict[str, Any], stage: str) -> Any:
    from ctxsim.tasks import load_stage

    section = record.get("config", {}).get(stage)
    if section is None:
        raise InputError(f"run {record['run_id']} has no {stage!r} section in its config")
    return load_stage(stage).Params(**section)


def _new_query_sets(
    store: ArtefactStore,
    record: dict[str, Any],
    arts: dict[str, Artefact],
    texts: list[str],
) -> dict[str, Artefact]:
    """queries/retrieve/screen/select artefacts for sentences the run has not seen, built by the
    run's own stages and settings (see the module docstring)."""
    from ctxsim.readers.sts import write_tsv
    from ctxsim.store.stage import RunParams, get_logger, resolve_stage, run_stage_locally
    from ctxsim.tasks import load_stage

    key = hashlib.sha256("\x1f".join(texts).encode()).hexdigest()[:16]
    sts_dir = store.cache_dir("explain", key)
    a, b = texts[0], texts[-1]
    tsv = sts_dir / "EXPLAIN.pair.tsv"
    # its bytes follow from the texts: written fresh, and an existing copy that differs (a
    # corrupt cache file) is moved aside with a warning instead of being read as the pair
    tmp = Path(tempfile.mkstemp(dir=sts_dir, suffix=".tmp")[1])
    write_tsv(tmp, [a], [b], [0.0])
    if tsv.exists() and sha256_file(tsv) != sha256_file(tmp):
        dest = move_aside(tsv)
        get_logger("ctxsim.explain").warning(
            "explain input file %s: sha256 mismatch; moved to %s, written again", tsv, dest
        )
    if tsv.exists():
        tmp.unlink()
    else:
        tmp.replace(tsv)
    run = RunParams(**{**record["config"]["run"], "quiet": True})
    out = dict(arts)
    for name in new_query_stages():
        if name not in record["config"]:
            continue
        params = _params(record, name)
        if name == "queries":
            params = params.model_copy(
                update={
                    "source": "sts",
                    "sts_dir": str(sts_dir),
                    "sts_sets": ["EXPLAIN.pair"],
                    "max_pairs_per_set": None,
                    "n_shards": 1,
                }
            )
        stage = load_stage(name)
        upstream = {i: out[i] for i in stage.inputs_for(params)}
        upstream |= {i: out[i] for i in stage.optional_inputs_for(params) if i in out}
        out[name], _ = run_stage_locally(resolve_stage(stage, params, run, store, upstream))
    return out


def explain_pair(
    store: ArtefactStore, run_id: str, s1: str, s2: str, top: int = 5
) -> dict[str, Any]:
    """Both sentences' S over C = Cs1 + Cs2, the label, and each context's share of it."""
    if top < 1:
        raise InputError(f"top={top}: give at least 1 context per table")
    with _work_store(store) as (work, note):
        result = _explain(store, work, run_id, s1, s2, top)
    if note and result.get("route") == "encoder":
        note = None  # nothing computed but a faiss index (beyond EXACT_MAX): in the temp folder
        if result["search"]["path"] == "faiss":
            note = f"artefact root {store.root} is read-only: the faiss index built, not cached"
    if note:
        result["note"] = note
    return result


def _sentence_queries(
    work: ArtefactStore, record: dict[str, Any], arts: dict[str, Any], s1: str, s2: str
) -> tuple[dict[str, int], dict[str, Any]]:
    """({sentence: its query id}, {sentence: the artefacts holding its context set}): the run's
    for a sentence the run labelled, else those of the run's stages run in ``work`` for it as a
    new query (its length checked first)."""
    q = arts["queries"].read_table(["query_id", "text"])
    qid_of: dict[str, int] = {}
    for qid, text in zip(
        q.column("query_id").to_pylist(), q.column("text").to_pylist(), strict=True
    ):
        qid_of.setdefault(text, qid)
    texts = [s1, s2]
    unseen = [t for t in dict.fromkeys(texts) if t not in qid_of]
    for name, t in (("S1 (the first sentence)", s1), ("S2 (the second sentence)", s2)):
        if t in unseen:
            check_sentence_length(record, t, name)
    where = {t: arts for t in texts if t in qid_of}
    ids = {t: qid_of[t] for t in texts if t in qid_of}
    if unseen:
        new = _new_query_sets(work, record, arts, unseen)
        nq = new["queries"].read_table(["query_id", "text"])
        new_of = dict(
            zip(nq.column("text").to_pylist(), nq.column("query_id").to_pylist(), strict=True)
        )
        for t in unseen:
            if t not in new_of:
                raise InputError(f"the run's queries stage dropped the sentence {t!r}")
            ids[t], where[t] = new_of[t], new
    return ids, where


def _explain(
    store: ArtefactStore, work: ArtefactStore, run_id: str, s1: str, s2: str, top: int
) -> dict[str, Any]:
    """explain_pair, reading the run from ``store`` and writing what it computes to ``work``."""
    t0 = time.perf_counter()
    record = store.read_run(run_id)
    arts = {k: store.require(k, st["fingerprint"]) for k, st in record["stages"].items()}
    problem = explain_problem(record)
    if problem:
        raise InputError(problem)
    if route_of(record) == "encoder":
        return _explain_encoder(work, record, arts, s1, s2, top)
    label = record["config"].get("label", {})  # label.lm.similarity; flat in older records
    how = (label.get("lm") or {}).get("similarity", label.get("similarity", "cosine"))
    texts = [s1, s2]
    ids, where = _sentence_queries(work, record, arts, s1, s2)
    cs = [context_sets(where[t]["select"], [ids[t]])[ids[t]] for t in texts]
    if not len(cs[0]) or not len(cs[1]):
        empty = [t for t, c in zip(texts, cs, strict=True) if not len(c)]
        raise InputError(f"no contexts were selected for {empty}: nothing to explain")
    c_all = np.concatenate(cs)
    first = np.r_[np.ones(len(cs[0]), bool), np.zeros(len(cs[1]), bool)]
    uniq = np.unique(c_all)
    vec, score_stats = [], []
    for t in texts:
        s, st = sentence_scores(work, record, where[t], ids[t], t, uniq)
        vec.append(s[np.searchsorted(uniq, c_all)])
        score_stats.append({"forward_calls": st["forward_calls"], "cache_hits": st["cache_hits"]})
    label, contrib, disagree = decompose(vec[0], vec[1], first, how)
    info = context_info(arts, c_all)
    rows = []
    for k, cid in enumerate(c_all.tolist()):
        rows.append(
            {
                "context_id": cid,
                "from": "Cs1" if first[k] else "Cs2",
                "S1": float(vec[0][k]),
                "S2": float(vec[1][k]),
                "contribution": round(float(contrib[k]), 6),
                "disagreement": round(float(disagree[k]), 6),
                **info.get(cid, {}),
            }
        )
    by_contrib = np.argsort(-np.nan_to_num(contrib, nan=-np.inf), kind="stable")
    by_disagree = np.argsort(-np.nan_to_num(disagree, nan=-np.inf), kind="stable")
    in_run = label_in_run(arts, ids, texts, where)
    return {
        "run_id": run_id,
        "s1": s1,
        "s2": s2,
        "similarity": how,
        "label": label,
        "label_in_run": in_run,
        "sentences": [
            {
                "text": t,
                "query_id": ids[t],
                "cs_from": "run" if where[t] is arts else "run stages for new queries",
                "n_ctx": int(len(c)),
                **score_stats[i],
            }
            for i, (t, c) in enumerate(zip(texts, cs, strict=True))
        ],
        "top_contributing": [rows[i] for i in by_contrib[:top]],
        "top_disagreeing": [rows[i] for i in by_disagree[:top]],
        "contexts": rows,
        "seconds": round(time.perf_counter() - t0, 3),
    }


#: stages an explained run must have, by route (``label.contextual``)
ROUTE_NEEDS = {
    "lm": ("queries", "select", "contexts", "shard", "generator"),
    "encoder": ("embed", "contexts", "shard"),
}


def explain_problem(record: dict[str, Any]) -> str | None:
    """Why ``ctxsim explain`` cannot explain this run's labels (one line), or None: an LM-route
    run needs Cs (select and the stages S comes from), an encoder-route run the embed artefact
    and the closed form (``label.encoder.form: closed``, the one form that is a sum over
    contexts). What the run summary suggests explain for (flows/run_summary.py)."""
    route = route_of(record)
    run_id = record.get("run_id")
    for need in ROUTE_NEEDS.get(route, ()):
        if need not in record.get("stages", {}):
            what = "a run with Cs" if route == "lm" else "the embed artefact and its corpus"
            return f"run {run_id} has no {need!r} stage; explain needs {what}"
    if route == "encoder":
        form = encoder_settings(record, {})[0]
        if form != "closed":
            return (
                f"run {run_id} labels with label.encoder.form={form}, which is not a sum over "
                "contexts: explain decomposes only the closed form (label.encoder.form: closed)"
            )
    elif route != "lm":
        return f"run {run_id} labels with label.contextual={route}: explain knows lm and encoder"
    return None


def route_of(record: dict[str, Any]) -> str:
    """The run's contextual model (``label.contextual``): ``lm`` (Cs, Eq. 3) or ``encoder``."""
    return str((record.get("config", {}).get("label") or {}).get("contextual", "lm"))


def encoder_settings(record: dict[str, Any], arts: dict[str, Artefact]) -> tuple[str, bool]:
    """(form, centred) of an encoder-route run: the label artefact's recorded form, else the
    config's ``label.encoder`` (or the flat keys of older records)."""
    section = record.get("config", {}).get("label") or {}
    sub = section.get("encoder") or {}
    form = sub.get("form", section.get("encoder_form", "closed"))
    if "label" in arts:
        form = arts["label"].stats.get("encoder_form", form)
    return str(form), bool(sub.get("centred", section.get("centred", True)))


def _embed_encoder(record: dict[str, Any], art: Artefact) -> Any:
    """The run's `embed` settings (typed) once its encoder is the one that encoded the
    contexts; refused in one line otherwise."""
    from pydantic import ValidationError

    from ctxsim.models.encoders import encoder_identity
    from ctxsim.tasks.embed import EmbedParams

    try:
        ep = EmbedParams(**art.manifest["params"])
    except ValidationError as e:
        raise InputError(
            f"run {record['run_id']}: the embed artefact {art.path} has settings this version "
            f"cannot read ({e.errors()[0].get('msg')}): rerun embed"
        ) from None
    recorded = art.manifest.get("fingerprint_payload", {}).get("extra", {}).get("scorer")
    if recorded is not None and recorded != encoder_identity(ep.model):
        raise InputError(
            f"run {record['run_id']}: embed.model {ep.model!r} changed since it encoded the "
            f"contexts of {art.path}: rerun embed"
        )
    return ep


def _explain_encoder(
    work: ArtefactStore,
    record: dict[str, Any],
    arts: dict[str, Artefact],
    s1: str,
    s2: str,
    top: int,
) -> dict[str, Any]:
    """explain_pair on an encoder-route run: the closed-form label as a sum over the corpus's
    context units, the units pushing it up and pulling it down most (product/explain_encoder.py).
    Both sentences are encoded by the run's embed encoder, so any pair works."""
    from ctxsim.models.encoders import bf16_available, encode, load_encoder
    from ctxsim.product import explain_encoder as ex
    from ctxsim.tasks.embed import SCATTER_FILE, load_scatter

    t0 = time.perf_counter()
    run_id = record["run_id"]
    form, centred = encoder_settings(record, arts)
    if form != "closed":  # the label artefact's own record (explain_problem read the config)
        raise InputError(
            f"run {run_id} labels with label.encoder.form={form}, which is not a sum over "
            "contexts: explain decomposes only the closed form (label.encoder.form: closed)"
        )
    art = arts["embed"]
    ep = _embed_encoder(record, art)
    model = load_encoder(ep.model, ep.max_seq_length, "cpu")
    e = encode(model, [s1, s2], ep.batch_size, bf16=ep.bf16 and bf16_available("cpu"))  # as label
    a, b, cbar, label = ex.term_weights(
        e[0], e[1], load_scatter(art.files_dir / SCATTER_FILE), centred
    )
    emb = ex.EmbeddingRows(sorted(art.files_dir.glob("emb-*.npy")))
    if emb.n != art.num_rows:
        raise InputError(f"{art.files_dir}: {emb.n} embeddings for {art.num_rows} units")
    cache = work.cache_dir("explain-faiss", art.fingerprint, create=False)
    up, down, search = ex.find_top(
        emb, a, b, cbar, top, index=lambda: ex.cached_ivf_index(emb, cache)
    )
    ids = art.read_table(["context_id"]).column("context_id").to_numpy()
    info = ex.unit_info(arts, ep.unit, ids[np.r_[up, down]])
    abs_total = search.pop("abs_total", None)
    rows = [ex.term_rows(emb, ids, r, a, b, cbar, label, abs_total, e, info) for r in (up, down)]
    return {
        "run_id": run_id,
        "route": "encoder",
        "form": form,
        "centred": centred,
        "encoder": ep.model,
        "unit": ep.unit,
        "s1": s1,
        "s2": s2,
        "label": label,
        "label_in_run": ex.pair_label_in_run(arts["label"], s1, s2) if "label" in arts else None,
        "contexts": emb.n,
        "abs_total": abs_total,
        "search": search,
        "sentences": [
            {"text": t, "encoded_by": f"embed encoder {ep.model}, {ep.max_seq_length} tokens"}
            for t in (s1, s2)
        ],
        "top_up": rows[0],
        "top_down": rows[1],
        "seconds": round(time.perf_counter() - t0, 3),
    }
