"""Stage `evaluate` and ``evaluate_model``: STS, hard splits and iSTS for a trained surrogate.

* STS (Sun et al. 2022, Sec. 4.3, Table 2): every set found in ``sts_dir`` (readers/sts.py);
  Spearman and Pearson x100 in the "all" (subsets of a year concatenated) and "mean" conventions;
  the surrogate against its untrained backbone, all-MiniLM-L6-v2 (when installed) and the
  model-free DynaMax-Jaccard (Zhelezniak et al. 2019); paired BCa bootstrap intervals for the
  surrogate's difference to each baseline.
* Similarities: cosine of mean-pooled embeddings and RCMD (Lee et al. 2022, Eq. 4 + Sec. 3.3).
* Hard splits of Wieting et al. (2020) over the pooled STS12-16 pairs.
* iSTS 2016 alignment F1 (Lee et al. Sec. 4.3) from RCMD token contributions, scored with the
  re-implemented organisers' F1 against CLRCMD's filtered gold (``*.wa.equi``) and the raw gold.
* Report: ``report.md`` (the 7-set table in the paper's layout), ``scatter.png`` (predicted vs gold
  per set), ``heatmaps.png`` (token-pair contributions of a positive, a neutral and a negative
  pair, as CLRCMD's Fig. 2) and ``results.json`` in ``ctx.files_dir``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from ctxsim.models import metrics as M
from ctxsim.models.dynamax import dynamax_pairs
from ctxsim.models.ists import (
    WaAlignment,
    WaPair,
    chunk_word_ids,
    equi_filter,
    ists_f1,
    mutual_argmax,
    pool_chunks,
)
from ctxsim.models.similarity import (
    avg_contributions,
    cosine_paired,
    rcmd_contributions,
    rcmd_paired,
)
from ctxsim.readers.sts import StsSet, dataset_key, discover, sample_pairs
from ctxsim.store.artefacts import content_digest
from ctxsim.store.stage import Stage, StageContext, StageParams

SEVEN = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSb.test", "SICK-R.test"]
SEVEN_LABELS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSb", "SICK-R"]
ROW_SCHEMA = pa.schema(
    [
        ("dataset", pa.string()),
        ("subset", pa.string()),
        ("similarity", pa.string()),
        ("system", pa.string()),
        ("spearman_all", pa.float64()),
        ("spearman_mean", pa.float64()),
        ("pearson", pa.float64()),
        ("n_pairs", pa.int64()),
    ]
)
DATA_HINT = (
    "no STS data found at {where}: put the STS sets there (uniform TSV "
    "<DATASET>.<subset>.tsv or the organisers' files; `ctxsim data download sts DIR` fetches "
    "them on a connected machine) and set evaluate.sts_dir"
)


class EvaluateParams(StageParams):
    """The `evaluate` config section."""

    sts_dir: str | None = None
    ists_dir: str | None = None
    similarities: list[Literal["cosine", "rcmd"]] = Field(
        default_factory=lambda: ["cosine", "rcmd"]
    )
    baselines: list[Literal["backbone", "minilm", "dynamax"]] = Field(
        default_factory=lambda: ["backbone", "minilm", "dynamax"]
    )
    dynamax_vectors: Literal["auto", "wordllama", "backbone"] = "auto"
    batch_size: int = 64
    max_seq_length: int = 128
    max_pairs_per_subset: int | None = None  # seeded sample for quick runs; None = every pair
    bootstrap_resamples: int = 1000  # DynaMax paper: 10000
    confidence: float = 0.95
    hard_quantile: float = 0.2
    hard_high_gold: tuple[float, float] = (4.0, 5.0)
    hard_low_gold: tuple[float, float] = (0.0, 1.0)
    ists_remove_oppo: bool = False
    plots: bool = True


# ---- encoding --------------------------------------------------------------------------------


def load_st(path: str | Path, device: str = "cpu", max_seq_length: int | None = None):
    """A SentenceTransformer from a saved directory (or a plain transformers dir, mean-pooled)."""
    from ctxsim.tasks.train import build_model

    model = build_model(str(path), max_seq_length or 128, device)
    if max_seq_length:
        model.max_seq_length = max_seq_length
    # Never ask for more positions than the backbone has (tiny models are trained short).
    config = getattr(model[0], "auto_model", None) and model[0].auto_model.config
    limit = getattr(config, "max_position_embeddings", None) if config is not None else None
    if limit and model.max_seq_length and model.max_seq_length > limit - 2:
        model.max_seq_length = limit - 2
    model.eval()
    return model


def _token_lengths(model, texts: Sequence[str]) -> np.ndarray:
    enc = model.tokenizer(
        list(texts), add_special_tokens=True, truncation=True, max_length=model.max_seq_length
    )
    return np.array([len(x) for x in enc["input_ids"]])


def _forward(model, texts: list[str]) -> dict[str, Any]:
    import torch

    feats = model.preprocess(texts)
    dev = model.device
    feats = {k: (v.to(dev) if hasattr(v, "to") else v) for k, v in feats.items()}
    use_bf16 = dev.type == "cuda" and torch.cuda.is_bf16_supported()
    with torch.inference_mode(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=use_bf16):
        return model(feats)


def encode_sentences(model, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Sentence embeddings with length bucketing on true token lengths (Sun et al. Sec. 4.2)."""
    order = np.argsort(-_token_lengths(model, texts), kind="stable")
    out: list[np.ndarray] = []
    for i in range(0, len(order), batch_size):
        batch = [texts[j] for j in order[i : i + batch_size]]
        out.append(_forward(model, batch)["sentence_embedding"].float().cpu().numpy())
    emb = np.concatenate(out) if out else np.zeros((0, 0), np.float32)
    res = np.empty_like(emb)
    res[order] = emb
    return res


def score_pairs(
    model,
    s1: Sequence[str],
    s2: Sequence[str],
    batch_size: int = 64,
    similarities: Sequence[str] = ("cosine", "rcmd"),
) -> dict[str, np.ndarray]:
    """Cosine and/or RCMD for every pair, pairs bucketed by length, one forward per batch."""
    if len(s1) != len(s2):
        raise ValueError(f"{len(s1)} first sentences but {len(s2)} second sentences")
    lens = np.maximum(_token_lengths(model, s1), _token_lengths(model, s2))
    order = np.argsort(-lens, kind="stable")
    res = {s: np.zeros(len(s1)) for s in similarities}
    half = max(1, batch_size // 2)
    for i in range(0, len(order), half):
        idx = order[i : i + half]
        out = _forward(model, [s1[j] for j in idx] + [s2[j] for j in idx])
        b = len(idx)
        if "cosine" in res:
            e = out["sentence_embedding"].float()
            res["cosine"][idx] = cosine_paired(e[:b], e[b:]).cpu().numpy()
        if "rcmd" in res:
            t, m = out["token_embeddings"].float(), out["attention_mask"].bool()
            res["rcmd"][idx] = rcmd_paired(t[:b], m[:b], t[b:], m[b:]).cpu().numpy()
    return res


def token_vectors(model, text: str) -> tuple[np.ndarray, list[str], list[tuple[int, int]]]:
    """Last-layer vectors of the non-special tokens of one text, with tokens and char offsets."""
    import torch

    tok = model.tokenizer
    enc = tok(
        [text],
        return_offsets_mapping=True,
        truncation=True,
        max_length=model.max_seq_length,
        return_tensors="pt",
    )
    offsets = [tuple(map(int, o)) for o in enc.pop("offset_mapping")[0].tolist()]
    special = set(tok.all_special_ids)
    ids = enc["input_ids"][0].tolist()
    keep = [
        k
        for k, (i, o) in enumerate(zip(ids, offsets, strict=True))
        if i not in special and o[1] > o[0]
    ]
    feats = {k: v.to(model.device) for k, v in enc.items()}
    with torch.inference_mode():
        te = model(feats)["token_embeddings"][0].float().cpu().numpy()
    return te[keep], [tok.convert_ids_to_tokens(ids[k]) for k in keep], [offsets[k] for k in keep]


# ---- DynaMax ---------------------------------------------------------------------------------


def wordllama_vectors() -> tuple[Callable[[str], list[int]], np.ndarray]:
    """WordLlama's packaged 256-d vectors and tokenizer (loaded from the wheel, no download)."""
    import wordllama
    from safetensors import safe_open
    from wordllama import WordLlama

    root = Path(wordllama.__file__).parent
    tok = WordLlama.load_tokenizer(root / "tokenizers" / "l2_supercat_tokenizer_config.json")
    with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), framework="np") as f:
        vec = f.get_tensor("embedding.weight").astype(np.float32)
    return (lambda s: tok.encode(s, add_special_tokens=False).ids), vec


def backbone_vectors(model) -> tuple[Callable[[str], list[int]], np.ndarray]:
    """The backbone's input embedding table and tokenizer (no special tokens)."""
    vec = model[0].auto_model.get_input_embeddings().weight.detach().float().cpu().numpy()
    tok = model.tokenizer
    return (lambda s: tok(s, add_special_tokens=False)["input_ids"]), vec


def dynamax_scores(s1, s2, tokenize: Callable[[str], list[int]], vectors: np.ndarray) -> np.ndarray:
    return dynamax_pairs([tokenize(a) for a in s1], [tokenize(b) for b in s2], vectors)


# ---- iSTS ------------------------------------------------------------------------------------


def _char_spans(chunks: list[list[str]]) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for ch in chunks:
        text = " ".join(ch)
        spans.append((pos, pos + len(text)))
        pos += len(text) + 1
    return spans


def _token_chunks(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[list[int]]:
    """Token rows overlapping each chunk's character span (CLRCMD's is_overlap)."""
    return [[k for k, (a, b) in enumerate(offsets) if a < e and s < b] for s, e in spans]


def align_pair(
    model, chunks1, chunks2, similarity: str = "rcmd"
) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Mutual-argmax chunk alignment of one pair and its token contribution matrix."""
    import torch

    x, _, off1 = token_vectors(model, " ".join(w for ch in chunks1 for w in ch))
    y, _, off2 = token_vectors(model, " ".join(w for ch in chunks2 for w in ch))
    fn = rcmd_contributions if similarity == "rcmd" else avg_contributions
    contrib = fn(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    c = pool_chunks(
        contrib,
        _token_chunks(off1, _char_spans(chunks1)),
        _token_chunks(off2, _char_spans(chunks2)),
    )
    return mutual_argmax(c), contrib


def ists_system(model, domain, similarity: str = "rcmd") -> list[WaPair]:
    """System alignments (EQUI, 5) of every pair of an iSTS domain."""
    out = []
    for gold, ch1, ch2 in zip(domain.gold, domain.chunks1, domain.chunks2, strict=True):
        pairs, _ = align_pair(model, ch1, ch2, similarity)
        w1, w2 = chunk_word_ids(ch1), chunk_word_ids(ch2)
        alis = [WaAlignment(w1[i], w2[j], ("EQUI",), 5.0, "") for i, j in pairs]
        out.append(WaPair(gold.id, gold.tokens1, gold.tokens2, alis))
    return out


# ---- evaluation --------------------------------------------------------------------------------


def _nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_nan_to_none(v) for v in x]
    return x


def _group_scores(sets: list[StsSet], preds: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    groups: dict[str, dict[str, tuple]] = {}
    for s in sets:
        groups.setdefault(dataset_key(s), {})[s.subset] = (preds[s.name], s.gold)
    return {k: M.sts_scores(v) for k, v in groups.items()}


def _avg7(per: dict[str, dict[str, float]]) -> dict[str, Any]:
    have = [k for k in SEVEN if k in per]
    if not have:
        return {}
    return {
        "spearman_all": float(np.mean([per[k]["spearman_all"] for k in have])),
        "spearman_mean": float(np.mean([per[k]["spearman_mean"] for k in have])),
        "n_sets": len(have),
        "sets": have,
    }


def _systems(model_path: str, baselines: dict[str, str | None]) -> dict[str, str | None]:
    return {"surrogate": model_path, **baselines}


def evaluate_model(
    model_path: str | Path,
    sts_dir: str | Path | None,
    ists_dir: str | Path | None = None,
    *,
    baselines: dict[str, str | None] | None = None,
    similarities: Sequence[str] = ("cosine", "rcmd"),
    device: str = "cpu",
    batch_size: int = 64,
    max_seq_length: int = 128,
    max_pairs_per_subset: int | None = None,
    bootstrap_resamples: int = 1000,
    confidence: float = 0.95,
    hard_quantile: float = 0.2,
    hard_high_gold: tuple[float, float] = (4.0, 5.0),
    hard_low_gold: tuple[float, float] = (0.0, 1.0),
    ists_remove_oppo: bool = False,
    out_dir: str | Path | None = None,
    seed: int = 0,
    logger: Any = None,
    paths_relative_to: str | Path | None = None,
) -> dict[str, Any]:
    """Evaluate a sentence-transformers model directory; returns the JSON-able result.

    ``baselines`` maps a system name to a model path (cosine/RCMD like the surrogate), or to None
    for ``dynamax`` (value None: word vectors from wordllama when installed, else the surrogate's
    input embeddings; "backbone" value: that model's input embeddings). With ``out_dir``, plots,
    ``report.md`` and ``results.json`` are written there. Model paths under
    ``paths_relative_to`` (the artefact root, inside a run) are reported relative to it, so the
    same run on another root writes the same report.
    """
    import logging

    log = logger or logging.getLogger("ctxsim.evaluate")
    baselines = dict(baselines or {})
    model_path = str(model_path)

    def shown(path: str) -> str:
        if paths_relative_to is not None:
            try:
                return str(Path(path).resolve().relative_to(Path(paths_relative_to).resolve()))
            except ValueError:
                pass
        return path

    result: dict[str, Any] = {
        "model": shown(model_path),
        "conventions": {
            "spearman_all": "x100, subsets of a year concatenated (SimCSE/CLRCMD)",
            "spearman_mean": "x100, mean over subsets (SentEval/DynaMax)",
        },
        "datasets": {},
        "rcmd": {},
        "ists": {},
        "hard": {},
        "baselines": {},
        "bootstrap": {},
    }
    sets: list[StsSet] = []
    if sts_dir is not None and Path(sts_dir).expanduser().is_dir():
        sets = [
            sample_pairs(s, max_pairs_per_subset, seed)
            for s in discover(Path(sts_dir).expanduser())
        ]
    if not sets:
        msg = DATA_HINT.format(where=sts_dir)
        log.warning(msg)
        result["warnings"] = [msg]

    surrogate = load_st(model_path, device, max_seq_length)
    preds: dict[tuple[str, str], dict[str, np.ndarray]] = {}  # (system, similarity) -> set -> pred
    for system, path in _systems(model_path, baselines).items():
        if system == "dynamax":
            continue
        model = surrogate if system == "surrogate" else load_st(path, device, max_seq_length)
        for s in sets:
            sc = score_pairs(model, s.s1, s.s2, batch_size, similarities)
            for sim, v in sc.items():
                preds.setdefault((system, sim), {})[s.name] = v
        log.info("evaluate: scored %d sets with %s", len(sets), system)
    if "dynamax" in baselines and sets:
        src = baselines["dynamax"]
        try:
            tokenize, vec = (
                wordllama_vectors()
                if src in (None, "wordllama")
                else backbone_vectors(load_st(src, device, max_seq_length))
            )
            result["dynamax_vectors"] = "wordllama" if src in (None, "wordllama") else shown(src)
        except ImportError:
            tokenize, vec = backbone_vectors(surrogate)
            result["dynamax_vectors"] = "surrogate input embeddings (wordllama not installed)"
        preds[("dynamax", "dynamax")] = {
            s.name: dynamax_scores(s.s1, s.s2, tokenize, vec) for s in sets
        }

    rows: list[dict[str, Any]] = []
    per_system: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for (system, sim), p in preds.items():
        per = _group_scores(sets, p)
        per_system[(system, sim)] = per
        for key, sc in per.items():
            rows.append(
                {
                    "dataset": key,
                    "subset": "all",
                    "similarity": sim,
                    "system": system,
                    "spearman_all": sc["spearman_all"],
                    "spearman_mean": sc["spearman_mean"],
                    "pearson": sc["pearson_all"],
                    "n_pairs": sc["n_pairs"],
                }
            )
        for s in sets:
            rho, r = M.spearman(p[s.name], s.gold), M.pearson(p[s.name], s.gold)
            rows.append(
                {
                    "dataset": dataset_key(s),
                    "subset": s.subset,
                    "similarity": sim,
                    "system": system,
                    "spearman_all": rho,
                    "spearman_mean": rho,
                    "pearson": r,
                    "n_pairs": len(s),
                }
            )

    # hard splits over the pooled STS12-16 pairs (all sets when no STS12-16 is present)
    pool = [s for s in sets if s.dataset in ("STS12", "STS13", "STS14", "STS15", "STS16")] or sets
    hard_idx: dict[str, np.ndarray] = {}
    if pool:
        a1 = [x for s in pool for x in s.s1]
        a2 = [x for s in pool for x in s.s2]
        gold = np.array([x for s in pool for x in s.gold])
        hard_idx = M.hard_splits(a1, a2, gold, hard_quantile, hard_high_gold, hard_low_gold)
        for (system, sim), p in preds.items():
            pp = np.concatenate([p[s.name] for s in pool])
            hs = {}
            for split, ix in hard_idx.items():
                hs[split] = {
                    "spearman": M.spearman(pp[ix], gold[ix]),
                    "pearson": M.pearson(pp[ix], gold[ix]),
                    "n_pairs": int(len(ix)),
                }
                rows.append(
                    {
                        "dataset": "hard",
                        "subset": split,
                        "similarity": sim,
                        "system": system,
                        "spearman_all": hs[split]["spearman"],
                        "spearman_mean": hs[split]["spearman"],
                        "pearson": hs[split]["pearson"],
                        "n_pairs": int(len(ix)),
                    }
                )
            if system == "surrogate" and sim == "cosine":
                result["hard"] = hs
            elif system != "surrogate":
                result["baselines"].setdefault(system, {}).setdefault("hard", {})[sim] = hs

    for (system, sim), per in per_system.items():
        block = {k: {**v, "similarity": sim} for k, v in per.items()}
        if system == "surrogate":
            result["datasets" if sim == "cosine" else "rcmd"] = block
            result.setdefault("avg7", {})[sim] = _avg7(per)
        else:
            b = result["baselines"].setdefault(system, {})
            b.setdefault("datasets", {})[sim] = block
            b.setdefault("avg7", {})[sim] = _avg7(per)

    # paired bootstrap: surrogate (cosine) minus each baseline, per dataset
    if ("surrogate", "cosine") in preds and bootstrap_resamples > 0:
        ref = preds[("surrogate", "cosine")]
        gold_by_key: dict[str, list[StsSet]] = {}
        for s in sets:
            gold_by_key.setdefault(dataset_key(s), []).append(s)
        for (system, sim), p in preds.items():
            if system == "surrogate":
                continue
            cis = {}
            for key, ss in gold_by_key.items():
                g = np.concatenate([s.gold for s in ss])
                a = np.concatenate([ref[s.name] for s in ss])
                b = np.concatenate([p[s.name] for s in ss])
                cis[key] = M.bootstrap_diff_ci(
                    g, a, b, "spearman", bootstrap_resamples, confidence, seed
                )
            result["bootstrap"][f"surrogate.cosine-vs-{system}.{sim}"] = cis

    # iSTS
    if ists_dir is not None and Path(ists_dir).expanduser().is_dir():
        from ctxsim.readers.ists import discover_ists, write_wa

        for dom in discover_ists(Path(ists_dir).expanduser()):
            gold_eq = equi_filter(dom.gold, remove_oppo=ists_remove_oppo)
            entry = {}
            for sim in similarities:
                sysp = ists_system(surrogate, dom, sim)
                f_eq = ists_f1(gold_eq, sysp, ("ali",))["ali"]
                f_raw = ists_f1(dom.gold, sysp, ("ali",))["ali"]
                entry[sim] = {
                    "f1_ali_equi": f_eq["f1"] * 100,
                    "precision_equi": f_eq["precision"] * 100,
                    "recall_equi": f_eq["recall"] * 100,
                    "f1_ali": f_raw["f1"] * 100,
                    "n_pairs": len(dom.gold),
                }
                if out_dir is not None:
                    write_wa(sysp, Path(out_dir) / f"ists.{dom.name}.{sim}.wa")
            result["ists"][dom.name] = entry
    elif ists_dir is not None:
        log.warning("evaluate: ists_dir %s does not exist; iSTS skipped", ists_dir)

    result["n_sets"] = len(sets)
    result = _nan_to_none(result)
    result["rows"] = _nan_to_none(rows)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(
            json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2)
        )
        (out / "report.md").write_text(render_report(result, per_system, hard_idx))
        if sets:
            try:
                _plots(out, surrogate, sets, preds.get(("surrogate", "cosine"), {}))
            except Exception as e:  # noqa: BLE001 - a plot must not sink an evaluation
                log.warning("evaluate: plotting failed: %s", e)
    return result


def _fmt(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def render_report(result: dict[str, Any], per_system: dict, hard_idx: dict) -> str:
    """Markdown: the 7-set table (Sun et al. Table 2 layout), hard splits, iSTS, bootstrap."""
    lines = [f"# Evaluation of `{result['model']}`", ""]
    for w in result.get("warnings", []):
        lines += [f"> {w}", ""]
    for conv in ("spearman_all", "spearman_mean"):
        lines += [
            f"## STS, Spearman x100 ({conv.replace('_', ' ')})",
            "",
            "| system | similarity | " + " | ".join(SEVEN_LABELS) + " | Avg |",
            "|" + " --- |" * (len(SEVEN_LABELS) + 3),
        ]
        for (system, sim), per in per_system.items():
            vals = [per.get(k, {}).get(conv) for k in SEVEN]
            have = [v for v in vals if v is not None and not math.isnan(v)]
            avg = float(np.mean(have)) if have else None
            lines.append(
                f"| {system} | {sim} | " + " | ".join(_fmt(v) for v in vals) + f" | {_fmt(avg)} |"
            )
        lines.append("")
    others = sorted({k for per in per_system.values() for k in per} - set(SEVEN))
    if others:
        lines += [
            "## Other sets (Spearman all x100)",
            "",
            "| system | similarity | " + " | ".join(others) + " |",
            "|" + " --- |" * (len(others) + 2),
        ]
        for (system, sim), per in per_system.items():
            lines.append(
                f"| {system} | {sim} | "
                + " | ".join(_fmt(per.get(k, {}).get("spearman_all")) for k in others)
                + " |"
            )
        lines.append("")
    if hard_idx:
        lines += [
            "## Hard splits (Wieting et al. 2020), Spearman x100",
            "",
            "| system | similarity | "
            + " | ".join(f"{k} (n={len(v)})" for k, v in hard_idx.items())
            + " |",
            "|" + " --- |" * (len(hard_idx) + 2),
        ]
        for row in _hard_rows(result):
            lines.append(row)
        lines.append("")
    if result.get("ists"):
        lines += [
            "## iSTS 2016 alignment F1 x100",
            "",
            "| domain | similarity | F1 (equi gold) | P | R | F1 (raw gold) |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for dom, e in result["ists"].items():
            for sim, v in e.items():
                lines.append(
                    f"| {dom} | {sim} | {_fmt(v['f1_ali_equi'])} | {_fmt(v['precision_equi'])}"
                    f" | {_fmt(v['recall_equi'])} | {_fmt(v['f1_ali'])} |"
                )
        lines.append("")
    if result.get("bootstrap"):
        lines += [
            "## Paired BCa bootstrap: surrogate minus baseline (Spearman x100)",
            "",
            "| comparison | set | delta | CI low | CI high | significant |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for comp, cis in result["bootstrap"].items():
            for key, ci in cis.items():
                lines.append(
                    f"| {comp} | {key} | {_fmt(ci['delta'])} | {_fmt(ci['ci_low'])} | "
                    f"{_fmt(ci['ci_high'])} | {ci['significant']} |"
                )
        lines.append("")
    lines += [
        "Plots: `scatter.png` (surrogate cosine vs gold), `heatmaps.png` (RCMD token-pair "
        "contributions).",
        "",
    ]
    return "\n".join(lines)


def _hard_rows(result: dict[str, Any]) -> list[str]:
    out = []
    if result.get("hard"):
        out.append(
            "| surrogate | cosine | "
            + " | ".join(_fmt(v["spearman"]) for v in result["hard"].values())
            + " |"
        )
    for system, b in result.get("baselines", {}).items():
        for sim, hs in b.get("hard", {}).items():
            out.append(
                f"| {system} | {sim} | "
                + " | ".join(_fmt(v["spearman"]) for v in hs.values())
                + " |"
            )
    return out


def _plots(out: Path, model, sets: list[StsSet], pred: dict[str, np.ndarray]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[StsSet]] = {}
    for s in sets:
        groups.setdefault(dataset_key(s), []).append(s)
    n = len(groups)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (key, ss) in zip(axes.flat, groups.items(), strict=False):
        g = np.concatenate([s.gold for s in ss])
        p = np.concatenate([pred[s.name] for s in ss]) if pred else np.zeros_like(g)
        ax.scatter(g, p, s=3, alpha=0.3)
        ax.set_title(f"{key} ρ={M.spearman(p, g):.1f}", fontsize=9)
        ax.set_xlabel("gold", fontsize=8)
        ax.set_ylabel("cosine", fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(out / "scatter.png", dpi=110)
    plt.close(fig)

    # heatmaps: positive / neutral / negative pair, short sentences, from STS13 when present
    src = [s for s in sets if s.dataset == "STS13"] or sets
    cands = [
        (s.gold[i], s.s1[i], s.s2[i])
        for s in src
        for i in range(len(s))
        if len(s.s1[i].split()) <= 12 and len(s.s2[i].split()) <= 12
    ]
    if not cands:
        return
    golds = np.array([c[0] for c in cands])
    hi, lo = golds.max(), golds.min()
    picks = [
        ("positive", int(np.argmax(golds))),
        ("neutral", int(np.argmin(np.abs(golds - (hi + lo) / 2)))),
        ("negative", int(np.argmin(golds))),
    ]
    import torch

    fig, axes = plt.subplots(1, 3, figsize=(16, 5.5))
    for ax, (label, k) in zip(axes, picks, strict=True):
        g, a, b = cands[k]
        x, t1, _ = token_vectors(model, a)
        y, t2, _ = token_vectors(model, b)
        c = rcmd_contributions(torch.from_numpy(x), torch.from_numpy(y)).numpy()
        ax.imshow(c, cmap="Blues")
        ax.set_yticks(range(len(t1)), t1, fontsize=7)
        ax.set_xticks(range(len(t2)), t2, fontsize=7, rotation=90)
        ax.set_title(f"{label} (gold {g:.2f}, RCMD {c.sum():.2f})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "heatmaps.png", dpi=110)
    plt.close(fig)


class EvaluateStage(Stage):
    name = "evaluate"
    version = "1"
    Params = EvaluateParams
    inputs = ("train",)
    run_fields = ("seed", "device")

    def fingerprint_extra(self, params: Any) -> dict[str, Any]:
        """The data folders' files (by content) decide the output too."""
        extra: dict[str, Any] = {}
        for key in ("sts_dir", "ists_dir"):
            d = getattr(params, key)
            if d and Path(d).expanduser().is_dir():
                extra[key] = sorted(
                    (
                        str(f.relative_to(Path(d).expanduser())),
                        f.stat().st_size,
                        content_digest(f),
                    )
                    for f in Path(d).expanduser().rglob("*")
                    if f.is_file()
                )
        return extra

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: EvaluateParams = ctx.params
        train = ctx.input("train")
        model_dir = train.files_dir / "model"
        if not (model_dir / "modules.json").exists():
            raise FileNotFoundError(f"train artefact {train.path} has no files/model")
        info = json.loads((train.files_dir / "metrics.json").read_text())
        baselines: dict[str, str | None] = {}
        backbone = info.get("backbone_path")
        if backbone == "files/backbone":
            backbone = str(train.files_dir / "backbone")
        if "backbone" in p.baselines and backbone:
            baselines["backbone"] = backbone
        if "minilm" in p.baselines:
            try:
                from ctxsim.models.registry import ModelNotAvailableError, resolve_model

                try:
                    baselines["minilm"] = str(resolve_model("minilm"))
                except ModelNotAvailableError as e:
                    ctx.logger.warning("evaluate: all-MiniLM-L6-v2 baseline skipped: %s", e)
            except ImportError:
                pass
        if "dynamax" in p.baselines:
            if p.dynamax_vectors == "backbone":
                baselines["dynamax"] = backbone
            elif p.dynamax_vectors == "wordllama":
                baselines["dynamax"] = "wordllama"
            else:
                try:
                    import wordllama  # noqa: F401

                    baselines["dynamax"] = "wordllama"
                except ImportError:
                    baselines["dynamax"] = backbone
        if p.sts_dir is None or not Path(p.sts_dir).expanduser().is_dir():
            ctx.logger.warning(DATA_HINT.format(where=p.sts_dir))
        res = evaluate_model(
            model_dir,
            p.sts_dir,
            p.ists_dir,
            baselines=baselines,
            similarities=p.similarities,
            device=ctx.device,
            batch_size=p.batch_size,
            max_seq_length=p.max_seq_length,
            max_pairs_per_subset=p.max_pairs_per_subset,
            bootstrap_resamples=p.bootstrap_resamples,
            confidence=p.confidence,
            hard_quantile=p.hard_quantile,
            hard_high_gold=tuple(p.hard_high_gold),
            hard_low_gold=tuple(p.hard_low_gold),
            ists_remove_oppo=p.ists_remove_oppo,
            out_dir=ctx.files_dir if p.plots else None,
            seed=ctx.run.seed,
            logger=ctx.logger,
            paths_relative_to=ctx.store.root,
        )
        rows = res.pop("rows")
        if not p.plots:
            (ctx.files_dir / "results.json").write_text(json.dumps(res, indent=2))
        table = pa.Table.from_pylist(rows, schema=ROW_SCHEMA)
        stats: dict[str, Any] = {"n_sets": res.get("n_sets", 0), "n_rows": len(rows)}
        for key, v in res.get("datasets", {}).items():
            stats[f"spearman_all.{key}"] = v.get("spearman_all")
        for key, v in res.get("rcmd", {}).items():
            stats[f"rcmd.spearman_all.{key}"] = v.get("spearman_all")
        avg = res.get("avg7", {}).get("cosine", {})
        if avg:
            stats["avg7.spearman_all"] = avg["spearman_all"]
            stats["avg7.n_sets"] = avg["n_sets"]
        for dom, e in res.get("ists", {}).items():
            for sim, v in e.items():
                stats[f"ists.{dom}.{sim}.f1_ali_equi"] = v["f1_ali_equi"]
        for split, v in res.get("hard", {}).items():
            stats[f"hard.{split}.spearman"] = v["spearman"]
        return table, {k: v for k, v in stats.items() if v is not None}

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        return dict(shard_stats[0]) if shard_stats else {}
