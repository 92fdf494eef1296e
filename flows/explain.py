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
        upstream = {i: out[i] for i in stage.inputs}
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
    if note:
        result["note"] = note
    return result


def _explain(
    store: ArtefactStore, work: ArtefactStore, run_id: str, s1: str, s2: str, top: int
) -> dict[str, Any]:
    """explain_pair, reading the run from ``store`` and writing what it computes to ``work``."""
    t0 = time.perf_counter()
    record = store.read_run(run_id)
    arts = {k: store.require(k, st["fingerprint"]) for k, st in record["stages"].items()}
    for need in ("queries", "select", "contexts", "shard", "generator"):
        if need not in arts:
            raise InputError(f"run {run_id} has no {need!r} stage; explain needs a run with Cs")
    label = record["config"].get("label", {})  # label.lm.similarity; flat in older records
    how = (label.get("lm") or {}).get("similarity", label.get("similarity", "cosine"))
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
