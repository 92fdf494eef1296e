"""`ctxsim explain S1 S2`, the arithmetic: which contexts decide the Origin label of a pair, and
where the two sentences part ways.

The label is a similarity of v_s1 and v_s2, the S(s, c) of Eq. 3 over C = Cs1 + Cs2 (Eq. 4).
Each context's share of it is exact: for the cosine, x_c y_c / (|x| |y|) sums to the label
(pearson: the same after centring; neg_rmse: -(x_c - y_c)^2 / |C| sums to minus the squared label;
cross_fit: each context's signed difference over its side's size sums to the label). Where the
two disagree most: the largest |x_c/|x| - y_c/|y||, or |x_c - y_c| for the difference-based
similarities.

Where S comes from: ``scores/eq3.py`` ``score_rows`` with the run's generator, contexts, screen
and score settings (``sentence_scores``); generative terms the run scored before are read from
the score cache, so for a labelled pair nothing is recomputed. Running the run's stages for
sentences it never saw is orchestration: flows/explain.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctxsim.models.contextual.origin import SIMILARITIES, similarity_by_group
from ctxsim.store.artefacts import Artefact, ArtefactStore
from ctxsim.store.errors import InputError


def decompose(
    x: np.ndarray, y: np.ndarray, from_first: np.ndarray, how: str = "cosine"
) -> tuple[float, np.ndarray, np.ndarray]:
    """(label, contribution per context, disagreement per context) of sim(x, y) over C."""
    if how not in SIMILARITIES:
        raise ValueError(f"similarity {how!r}: use one of {SIMILARITIES}")
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    first = np.asarray(from_first, bool)
    label = float(
        similarity_by_group(np.zeros(len(x), np.int64), x[:, None], y[:, None], 1, how, first)[0, 0]
    )
    if how in ("cosine", "pearson"):
        if how == "pearson":
            x, y = x - x.mean(), y - y.mean()
        nx, ny = np.linalg.norm(x), np.linalg.norm(y)
        if nx == 0 or ny == 0:
            return label, np.full(len(x), np.nan), np.full(len(x), np.nan)
        return label, x * y / (nx * ny), np.abs(x / nx - y / ny)
    d = y - x
    if how == "neg_rmse":
        return label, -(d**2) / len(d), np.abs(d)
    n1, n2 = max(int(first.sum()), 1), max(int((~first).sum()), 1)
    return label, np.where(first, d / n1, -d / n2), np.abs(d)


def context_sets(select: Artefact, qids: list[int]) -> dict[int, np.ndarray]:
    sel = select.read_table(["query_id", "context_id", "position"])
    sel = sel.filter(pc.is_in(sel.column("query_id"), pa.array(qids, pa.int64())))
    out = {}
    q = sel.column("query_id").to_numpy()
    c = sel.column("context_id").to_numpy()
    pos = sel.column("position").to_numpy()
    for qid in qids:
        m = q == qid
        out[qid] = c[m][np.argsort(pos[m], kind="stable")]
    return out


def sentence_scores(
    store: ArtefactStore,
    record: dict[str, Any],
    arts: dict[str, Artefact],
    qid: int,
    text: str,
    cids: np.ndarray,
) -> tuple[np.ndarray, dict[str, Any]]:
    """S(text, c) for each c of ``cids`` with the run's score settings (cache first)."""
    from ctxsim.scores import ScoreParams, score_with_artefacts
    from ctxsim.store.stage import RunParams

    p = ScoreParams(**record["config"].get("score", {}))
    upstream = {k: arts[k] for k in ("contexts", "shard", "generator") if k in arts}
    if p.lambda_disc != 0:
        upstream |= {k: arts[k] for k in ("screen", "discriminator") if k in arts}
    missing = {"contexts", "shard", "generator"} - set(upstream)
    if missing:
        raise InputError(f"run {record['run_id']} lacks {sorted(missing)}: cannot compute S")
    table, stats = score_with_artefacts(
        store,
        RunParams(**{**record["config"]["run"], "quiet": True}),
        p,
        upstream,
        np.full(len(cids), qid, np.int64),
        np.asarray(cids, np.int64),
        np.asarray([text] * len(cids), dtype=object),
    )
    return table.column("S").to_numpy(zero_copy_only=False).astype(np.float64), stats


def context_info(arts: dict[str, Artefact], cids: np.ndarray) -> dict[int, dict[str, Any]]:
    """Text and provenance of each context: its document, section and chunk in the corpus."""
    co = arts["contexts"].read_table()
    co = co.filter(pc.is_in(co.column("context_id"), pa.array(np.unique(cids))))
    need = set(co.column("centre_sent_id").to_pylist())
    for ids in co.column("left_sent_ids").to_pylist() + co.column("right_sent_ids").to_pylist():
        need.update(ids)
    sh = arts["shard"].read_table(["sent_id", "text", "doc_name", "doc_id", "section_id"])
    sh = sh.filter(pc.is_in(sh.column("sent_id"), pa.array(sorted(need), pa.int64())))
    sent = {r["sent_id"]: r for r in sh.to_pylist()}
    out = {}
    for r in co.to_pylist():
        centre = sent.get(r["centre_sent_id"], {})
        left = " ".join(sent[i]["text"] for i in r["left_sent_ids"] if i in sent)
        right = " ".join(sent[i]["text"] for i in r["right_sent_ids"] if i in sent)
        out[r["context_id"]] = {
            "left": left,
            "right": right,
            "source": {
                "kind": "corpus",  # the run's contexts are corpus windows, none generated
                "document": centre.get("doc_name"),
                "doc_id": centre.get("doc_id"),
                "section_id": r["section_id"],
                "chunk_id": r["chunk_id"],
                "centre_sent_id": r["centre_sent_id"],
            },
        }
    return out


def label_in_run(
    arts: dict[str, Artefact], ids: dict[str, int], texts: list[str], where: dict[str, Any]
) -> float | None:
    """The run's own label of this pair, when it labelled it (either order)."""
    if "label" not in arts or any(where[t] is not arts for t in texts):
        return None
    t = arts["label"].read_table(["s1_id", "s2_id", "label"])
    a, b = ids[texts[0]], ids[texts[1]]
    s1 = t.column("s1_id").to_numpy()
    s2 = t.column("s2_id").to_numpy()
    m = np.flatnonzero(((s1 == a) & (s2 == b)) | ((s1 == b) & (s2 == a)))
    return float(t.column("label")[int(m[0])].as_py()) if len(m) else None


def render_table(result: dict[str, Any], width: int = 70) -> str:
    """The explanation as plain-text tables (rich is not needed for a pipe); an encoder-route
    run's by product/explain_encoder.py."""
    if result.get("route") == "encoder":
        from ctxsim.product.explain_encoder import render_encoder_table

        return render_encoder_table(result, width)

    def cut(s: str, n: int) -> str:
        return s if len(s) <= n else s[: n - 1] + "…"

    lines = [
        f"run {result['run_id']}  similarity={result['similarity']}  "
        f"label={result['label']:.6f}"
        + (
            f"  (run's label {result['label_in_run']:.6f})"
            if result["label_in_run"] is not None
            else ""
        ),
    ]
    for k, s in enumerate(result["sentences"], 1):
        lines.append(
            f"s{k}: {cut(s['text'], width)}  |Cs|={s['n_ctx']} ({s['cs_from']}; "
            f"{s['forward_calls']} scoring calls, {s['cache_hits']} terms from the cache)"
        )
    for title, key in (
        ("contexts contributing most to the similarity", "top_contributing"),
        ("contexts where the two sentences disagree most", "top_disagreeing"),
    ):
        lines += ["", title + ":"]
        lines.append(
            f"  {'ctx':>7} {'from':<4} {'S1':>9} {'S2':>9} {'share':>9} {'diff':>8}  source / text"
        )
        for r in result[key]:
            src = r.get("source", {})
            lines.append(
                f"  {r['context_id']:>7} {r['from']:<4} {r['S1']:>9.3g} {r['S2']:>9.3g} "
                f"{r['contribution']:>9.4f} {r['disagreement']:>8.4f}  "
                f"{src.get('document')} §{src.get('section_id')}"
            )
            lines.append(f"{'':>52}{cut(r.get('left', '') + ' ___ ' + r.get('right', ''), width)}")
    if result.get("note"):
        lines += ["", f"note: {result['note']}"]
    return "\n".join(lines)
