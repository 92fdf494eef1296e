"""What several benches share beyond timing (bench/harness.py): the books corpus and its windows,
scorers, a finished run's records, the domain evaluation of an encoder arm, the LM route's captured
engine calls. No bench imports another bench; a part two benches need lives here (heavy imports
inside the functions, so a speed bench importing this stays light)."""

from __future__ import annotations

import glob
import gzip
import json
import logging
import os
import pickle
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.harness import peak_rss_mb, reset_peak_rss

if TYPE_CHECKING:
    from ctxsim.models.contextual.generator import GenerativeScorer
    from ctxsim.models.contextual.score_engine import EngineConfig

# -- inputs: the books corpus, its windows, scorers

#: the books corpus (Standard Ebooks, JSON Lines): $CTXSIM_BOOKS, else ../shared/data/corpus
CORPUS = (
    Path(os.environ.get("CTXSIM_BOOKS", Path(__file__).resolve().parents[2] / "shared/data/corpus"))
    / "standardebooks"
)
BOOKS = str(CORPUS / "*.jsonl.gz")
#: random scorer sizes (``TinyConfig``: hidden, layers, heads, intermediate)
SIZES = {"tiny": (64, 2, 2, 128), "small": (256, 4, 4, 1024)}


def load_paragraphs(max_books: int | None) -> list[str]:
    out = []
    for path in sorted(glob.glob(BOOKS))[:max_books]:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                out.extend(p for p in json.loads(line)["paragraphs"] if p.strip())
    return out


def book_windows(n_books: int, seed: int = 0) -> dict[str, Any]:
    """Windows [c<, s, c>] (one sentence per side) inside sections of the first n books."""
    import blingfire

    w: dict[str, list] = {k: [] for k in ("left", "sentence", "right", "doc", "section")}
    sec = 0
    for doc, path in enumerate(sorted(glob.glob(BOOKS))[:n_books]):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                sents = [
                    s
                    for para in json.loads(line)["paragraphs"]
                    for s in blingfire.text_to_sentences(para).split("\n")
                    if len(s.split()) >= 3
                ]
                for i in range(1, len(sents) - 1):
                    for k, v in zip(
                        w, (sents[i - 1], sents[i], sents[i + 1], doc, sec), strict=True
                    ):
                        w[k].append(v)
                sec += 1
    return {k: np.asarray(v) if k in ("doc", "section") else v for k, v in w.items()}


def make_scorer(backend: str, size: str, tok: Any) -> GenerativeScorer:
    """A generative scorer: a packaged model by name, else a random one of ``SIZES[size]``."""
    from ctxsim.models.contextual.generator import (
        CausalPrefixScorer,
        Seq2SeqScorer,
        TinyConfig,
        tiny_causal,
        tiny_seq2seq,
    )

    if size == "minilm":
        from transformers import AutoTokenizer

        from ctxsim.models.contextual.generator import add_control_tokens, warm_start_seq2seq
        from ctxsim.models.registry import resolve_model

        path = str(resolve_model("minilm"))
        t = AutoTokenizer.from_pretrained(path)
        add_control_tokens(t)
        return Seq2SeqScorer(warm_start_seq2seq(path, t), t)
    if size in ("smollm2-135m", "gemma-270m"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ctxsim.models.registry import resolve_model

        path = str(resolve_model(size))
        return CausalPrefixScorer(
            AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
        )
    cfg = TinyConfig(*SIZES[size])
    if backend == "seq2seq":
        return Seq2SeqScorer(tiny_seq2seq(tok, cfg), tok)
    return CausalPrefixScorer(tiny_causal(tok, cfg), tok)


#: SmolLM2-135M: hidden 576, MLP 1536, vocab 49152; the engine's token budget
D, FF, TOKENS, VOCAB = 576, 1536, 4096, 49152


def flops_per_s(fn, flops: float, min_cpu: float = 3.0) -> float:
    fn()
    n, c0 = 0, time.process_time()
    while time.process_time() - c0 < min_cpu:
        fn()
        n += 1
    return flops * n / (time.process_time() - c0)


def matmul_speeds() -> dict[str, float]:
    """FLOP per CPU-second of the scorer's MLP-shaped matmul, float32 and dynamic int8."""
    import torch
    from torch.ao.quantization import quantize_dynamic

    x = torch.randn(TOKENS, D)
    lin = torch.nn.Linear(D, FF, bias=False)
    q = quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
    flops = 2.0 * TOKENS * D * FF
    with torch.inference_mode():
        return {
            "fp32": flops_per_s(lambda: lin(x), flops),
            "int8": flops_per_s(lambda: q(x), flops),
        }


def loss_step(b: int, L: int, d: int, sparse: bool) -> Callable[[], None]:
    """One CLRCMD loss forward + backward over B x B pairwise RCMD of random token vectors."""
    import torch

    from ctxsim.models.evaluation.similarity import rcmd_pairwise

    g = torch.Generator().manual_seed(b)
    x, y = torch.randn(b, L, d, generator=g), torch.randn(b, L, d, generator=g)
    m = torch.ones(b, L, dtype=torch.bool)

    def step() -> None:
        xx, yy = x.clone().requires_grad_(), y.clone().requires_grad_()
        logits = rcmd_pairwise(xx, m, yy, m, sparse=sparse) / 0.05
        torch.nn.functional.cross_entropy(logits, torch.arange(b)).backward()

    return step


# -- a finished run


def load_run(root: Path, run_id: str) -> dict[str, Any]:
    """The select, score and label artefacts of a finished run."""
    from ctxsim.store.artefacts import ArtefactStore

    rec = json.loads((root / "runs" / f"{run_id}.json").read_text())
    store = ArtefactStore(root)
    return {
        name: store.require(name, rec["stages"][name]["fingerprint"])
        for name in ("select", "score", "label")
    }


def stages_to_label() -> tuple[str, ...]:
    """The stages a run takes to its labels: `label` and every stage before it."""
    from ctxsim.tasks import STAGES

    names = list(STAGES)
    return tuple(names[: names.index("label") + 1])


def stage_rows(root: Path, run_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per stage of a run record (status, rows, shards, wall and CPU seconds)."""
    rec_path = root / "runs" / f"{run_id}.json"
    if not rec_path.exists():
        raise FileNotFoundError(f"{rec_path}: no such run record (see `ctxsim runs`)")
    rec = json.loads(rec_path.read_text())
    rows = []
    for name, st in rec["stages"].items():
        manifest = Path(st["path"]) / "_MANIFEST.json"
        m = json.loads(manifest.read_text()) if manifest.exists() else {}
        stats = m.get("stats", {})
        wall = float(m.get("timings", {}).get("total_seconds", st.get("seconds", 0.0)))
        rows.append(
            {
                "run": run_id,
                "stage": name,
                "status": st.get("status"),
                "rows": st.get("rows"),
                "shards": st.get("shards"),
                "wall_s": round(wall, 1),
                "cpu_s": round(float(stats["cpu_seconds"]), 1) if "cpu_seconds" in stats else None,
            }
        )
    return rows, rec


def label_and_pair_stages() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(stages Eq. 4 labels cost on top of the pairs, the pair-mining stages shared by ctxsim and
    TF-IDF labels): of the stages up to `label`, those with `Stage.labelling` and the rest
    (gencontexts counts only where select.source generates contexts)."""
    from ctxsim.tasks import STAGES, load_stage

    names = list(STAGES)
    to_label = names[: names.index("label") + 1]
    labelling = tuple(n for n in to_label if load_stage(n).labelling)
    return labelling, tuple(n for n in to_label if n not in labelling)


def arm_label_cpu(objective: str, eq4_cpu: float, metrics: dict[str, Any]) -> float:
    """What an arm's labels cost: the labelling stages' CPU for an objective that trains on Eq. 4
    labels, the train stage's own labelling CPU for one that labels the pairs itself (TF-IDF,
    a teacher), nothing for one without labels (models/training/objectives/)."""
    from ctxsim.models.training.objectives import get_objective

    obj = get_objective(objective)
    if obj.eq4_labels:
        return float(eq4_cpu)
    return float(metrics.get("label_cpu_seconds") or 0.0) if obj.computes_labels else 0.0


# -- an encoder arm on the domain dev tasks

#: bump when what arm_similarities computes changes (its cache keys change with it)
SCORES_VERSION = "2"


def _digest(*parts: Any) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()


def arm_model_digest(model_dir: str) -> str:
    """A hash of a model directory's files (names and bytes; "tfidf": the no-model reference):
    a retrained model at the same path is another model."""
    from ctxsim.store.artefacts import content_digest

    if model_dir == "tfidf":
        return "tfidf"
    root = Path(model_dir)
    files = sorted(f for f in root.rglob("*") if f.is_file() and not f.name.startswith("."))
    if not files:
        raise SystemExit(f"{model_dir}: no model files")
    return _digest({f.relative_to(root).as_posix(): content_digest(f) for f in files})


def merged_model(start_dir: str, end_dir: str, weight: float, cache: Path) -> Path:
    """The encoder whose weights are ``(1 - weight) * start + weight * end`` (WiSE-FT, Wortsman
    et al. 2022, with the download as start; a soup of two trainings from one start), written
    once under ``cache`` by the two models' content and the weight; ``end``'s folder otherwise
    (tokenizer, pooling, config). Tensors ``end`` lacks (a download's buffers) are left out."""
    from safetensors.torch import load_file, save_file

    start, end = Path(start_dir), Path(end_dir)
    key = _digest("merge", arm_model_digest(str(start)), arm_model_digest(str(end)), weight)
    out = cache / f"merged-{key}"
    if out.exists():
        return out
    a, b = load_file(start / "model.safetensors"), load_file(end / "model.safetensors")
    missing = sorted(k for k in b if k not in a or a[k].shape != b[k].shape)
    if missing:
        raise SystemExit(
            f"{start} and {end} are not one architecture: "
            f"{start} lacks {missing[:3]} or holds them in another shape"
        )
    merged = {
        k: ((1 - weight) * a[k].float() + weight * v.float()).to(v.dtype)
        if v.is_floating_point()
        else v
        for k, v in b.items()
    }
    tmp = cache / f".merged-{key}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(end, tmp, ignore=shutil.ignore_patterns("model.safetensors", "README.md"))
    save_file(merged, tmp / "model.safetensors", metadata={"format": "pt"})
    os.replace(tmp, out)  # never a half-written model under the key
    return out


def eval_sets(root: Path, sts_names: Sequence[str] = ()) -> list:
    """The evaluators of readers/evaluators a bench scores arms on: every set the eval-dir
    formats find under ``root`` (pairs, QA, ...) and, of the STS sets under ``root/sts``, those
    named (``STSb.dev``). Each names its primary metric and gives paired intervals."""
    from ctxsim.readers.evaluators import StsEvaluator, discover_eval_dir

    domain = [e for e in discover_eval_dir(root / "domain") if e.format != "sts"]
    sts_root = root / "sts"
    sts = StsEvaluator.discover(sts_root) if sts_root.is_dir() else []
    return domain + [e for e in sts if e.name in set(sts_names)]


def _content(ev: Any) -> tuple:
    """What an evaluator's figures depend on (the arm-score cache key)."""
    d = ev.data
    if ev.format == "pairs":
        return ("pairs", ev.name, d.s1, d.s2, d.labels)
    if ev.format == "qa":
        return ("qa", ev.name, d.questions, d.answers, d.relevant)
    return (ev.format, ev.name, d.s1, d.s2, d.gold)


def arm_cache_key(model_dir: str, sets: Sequence, max_seq: int) -> str:
    """The arm-score cache key: everything the cached scores depend on: the model's content, the
    content of every evaluation set (pairs and labels, questions, answers and their relevance,
    STS pairs and gold: so the files and the --sts-sets chosen), the sequence cap and the
    version of the scoring code."""
    content = [_content(ev) for ev in sets]
    return _digest(SCORES_VERSION, arm_model_digest(model_dir), _digest(content), int(max_seq))


class _StsCosine:
    """The benches' STS similarity of one model: its cosine from one forward pass per batch of
    pairs (the evaluate stage's STS figures), or TF-IDF cosine of each pair (None)."""

    def __init__(self, model: Any, batch_size: int) -> None:
        self.model, self.batch_size = model, batch_size

    def paired(self, s1, s2) -> np.ndarray:
        if self.model is None:
            from ctxsim.models.training.objectives import tfidf_cosine

            return tfidf_cosine(s1, s2)
        from ctxsim.tasks.evaluate import pair_similarities

        return pair_similarities(self.model, s1, s2, self.batch_size, ("cosine",))["cosine"]


def _flat(ev: Any, pred: Any) -> dict[str, np.ndarray]:
    """An evaluator's predictions under the cache's keys: FORMAT/NAME, or FORMAT/NAME/METRIC for
    per-item metrics (QA)."""
    if isinstance(pred, dict):
        return {f"{ev.format}/{ev.name}/{k}": v for k, v in pred.items()}
    return {f"{ev.format}/{ev.name}": pred}


def _pred(ev: Any, scores: dict) -> Any:
    """``_flat``'s inverse for one evaluator."""
    key = f"{ev.format}/{ev.name}"
    if key in scores:
        return scores[key]
    rest = {k[len(key) + 1 :]: v for k, v in scores.items() if k.startswith(key + "/")}
    return {k: v for k, v in rest.items() if "/" not in k}  # not a set named NAME/...


def model_similarities(model: Any, sets: Sequence, batch_size: int = 64) -> dict:
    """Per-pair cosines, per-query retrieval metrics (through the evaluate stage's
    ``evaluate_domain``) and STS cosines of one loaded model (None: TF-IDF 1-2 grams)."""
    from ctxsim.tasks.evaluate.domain import evaluate_domain

    dom = evaluate_domain(
        {"arm": model},
        [ev for ev in sets if ev.format != "sts"],
        batch_size=batch_size,
        bootstrap_resamples=0,
        per_item=True,
    )
    out: dict[str, np.ndarray] = {}
    for ev in sets:
        if ev.format == "sts":
            pred = ev.predict(_StsCosine(model, batch_size))
        else:
            pred = dom["per_item"][ev.section][ev.name]["arm"]
        out |= _flat(ev, pred)
    return out


def arm_similarities(
    model_dir: str, sets: Sequence, cache: Path, max_seq: int, device: str = "cpu"
) -> dict:
    """``model_similarities`` of a saved model ("tfidf": TF-IDF 1-2 grams), cached under
    ``arm_cache_key`` (scores do not depend on the device beyond float rounding)."""
    from ctxsim.tasks.evaluate import load_st

    path = cache / f"{arm_cache_key(model_dir, sets, max_seq)}.npz"
    if path.exists():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    model = load_st(model_dir, device, max_seq) if model_dir != "tfidf" else None
    out = model_similarities(model, sets)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.npz")
    np.savez(tmp, **out)
    os.replace(tmp, path)  # never a half-written cache file under the key
    return out


#: the bench tables' columns per format: (metric, label) (the labels of the recorded results)
SUMMARY = {
    "pairs": (("ap", "AP"), ("f1", "F1")),
    "qa": (
        ("ndcg_at_10", "ndcg_at_10"),
        ("mrr_at_10", "mrr_at_10"),
        ("recall_at_100", "recall_at_100"),
    ),
    "sts": (("spearman", "spearman"),),
}
#: the metric of each format's paired interval and its label's suffix
INTERVAL = {"pairs": ("ap", " AP"), "qa": ("ndcg_at_10", " nDCG@10"), "sts": ("spearman", "")}


def summarise(scores: dict, sets: Sequence) -> dict[str, float]:
    """A bench table's row: each set's figures (``SUMMARY``) from an arm's cached scores."""
    row: dict[str, float] = {}
    for ev in sets:
        v = ev.scores(_pred(ev, scores))
        for metric, label in SUMMARY[ev.format]:
            row[f"{ev.name} {label}"] = round(v[metric], 2)
    return row


def primary(scores: dict, ev: Any) -> float:
    """An evaluator's primary metric from an arm's cached scores."""
    return float(ev.scores(_pred(ev, scores))[ev.primary_metric])


def seed_mean_pred(ev: Any, arms: Sequence[dict]) -> Any:
    """One evaluator's predictions of several training seeds of a system, for a seed-averaged
    interval: QA's per-question metrics averaged over the seeds; pair scores stacked one row a
    seed (``ap_diff_ci`` averages the rows' APs). One seed: its own predictions."""
    preds = [_pred(ev, arm) for arm in arms]
    if len(preds) == 1:
        return preds[0]
    if ev.format == "qa":
        return {k: np.mean([p[k] for p in preds], axis=0) for k in preds[0]}
    if ev.format == "pairs":
        return np.stack(preds)
    raise ValueError(f"{ev.format}: no seed-averaged interval (QA and pairs only)")


def seed_resampled_interval(
    ev: Any, seeds_a: Sequence[dict], seeds_b: Sequence[dict], metric: str, n: int, seed: int
) -> dict[str, float]:
    """The interval of two systems' seed means with the seeds resampled too (seed k of A paired
    with seed k of B, as their runs share seed k's queries, pairs and labels): the spread of the
    training seeds enters the interval, not only that of the dev items."""
    from ctxsim.models.evaluation import domain_metrics as D

    if len(seeds_a) != len(seeds_b):
        raise ValueError(f"seeds resampled in pairs: {len(seeds_a)} against {len(seeds_b)}")
    if ev.format == "qa":
        a, b = (np.stack([_pred(ev, arm)[metric] for arm in side]) for side in (seeds_a, seeds_b))
        return D.seed_mean_diff_ci(a, b, n, 0.95, seed)
    if ev.format == "pairs":
        a, b = (np.stack([_pred(ev, arm) for arm in side]) for side in (seeds_a, seeds_b))
        return D.ap_diff_ci(ev.data.labels, a, b, n, 0.95, seed, resample_rows=True)
    raise ValueError(f"{ev.format}: no seed-resampled interval (QA and pairs only)")


def intervals(
    a: dict | Sequence[dict],
    b: dict | Sequence[dict],
    sets: Sequence,
    n: int,
    seed: int,
    resample_seeds: bool = False,
) -> dict[str, str]:
    """Paired intervals of arm ``a`` minus arm ``b`` on each set's ``INTERVAL`` metric; a list
    of arms is one system's training seeds, compared by their mean (``seed_mean_pred``), with
    ``resample_seeds`` the seeds drawn again in each resample (``seed_resampled_interval``)."""

    def fmt(ci: dict) -> str:
        return f"{ci['delta']:+.2f} [{ci['ci_low']:+.2f}, {ci['ci_high']:+.2f}]"

    seeds_a = [a] if isinstance(a, dict) else list(a)
    seeds_b = [b] if isinstance(b, dict) else list(b)
    out: dict[str, str] = {}
    for ev in sets:
        metric, suffix = INTERVAL[ev.format]
        if ev.format == "sts" and max(len(seeds_a), len(seeds_b)) > 1:
            out[f"{ev.name}{suffix}"] = ""  # a Spearman has no per-item mean over seeds
            continue
        if resample_seeds:
            ci = seed_resampled_interval(ev, seeds_a, seeds_b, metric, n, seed)
        else:
            pa, pb = seed_mean_pred(ev, seeds_a), seed_mean_pred(ev, seeds_b)
            ci = ev.interval(pa, pb, metric, n, 0.95, seed)
        out[f"{ev.name}{suffix}"] = fmt(ci)
    return out


# -- the LM route: a run's score-stage engine calls, captured and replayed


def capture_run(config: str, root: Path, queries: int, run_id: str) -> dict[str, Any]:
    """Run `config` to `label` on a fresh root; return the score stage's engine calls."""
    import torch

    from ctxsim.flows.pipeline import run_pipeline
    from ctxsim.models.contextual import score_engine as se

    calls: list[dict[str, Any]] = []
    real = se.ScoringEngine.score

    def spy(self, lefts, sentences, rights, directions=se.DIRECTIONS):  # noqa: ANN001, ANN202
        t0 = time.process_time()
        out = real(self, lefts, sentences, rights, directions)
        calls.append(
            {
                "windows": (list(lefts), list(sentences), list(rights)),
                "directions": tuple(directions),
                "cpu_s": time.process_time() - t0,
                "config": self.config,
                "scorer": self.scorer,
                "scores": out,
            }
        )
        return out

    if root.exists():
        shutil.rmtree(root)
    se.ScoringEngine.score = spy  # type: ignore[method-assign]
    try:
        overrides = [
            f"queries.n_corpus={queries}",
            "run.no_progress=true",
            f"run.torch_threads={torch.get_num_threads()}",  # the replays run with as many
        ]
        run_pipeline(config, overrides, root=str(root), until="label", run_id=run_id)
    finally:
        se.ScoringEngine.score = real  # type: ignore[method-assign]
    if not calls:
        raise RuntimeError(f"{config}: the score stage ran no engine call (reused?)")
    rows, rec = stage_rows(root, run_id)
    return {"calls": calls, "stages": rows, "record": rec}


def save_capture(cap: dict[str, Any], path: Path) -> None:
    """The captured calls without their scorer (rebuilt by ``load_capture``), so the replays can
    run again (``--reuse``) without the run."""
    calls = []
    for c in cap["calls"]:
        int8 = any("quantized" in type(m).__module__ for m in c["scorer"].model.modules())
        calls.append({k: v for k, v in c.items() if k != "scorer"} | {"int8": int8})
    with open(path, "wb") as f:
        pickle.dump({**cap, "calls": calls}, f)


def load_capture(path: Path) -> dict[str, Any]:
    from ctxsim.models.contextual.quantize import quantize_int8
    from ctxsim.scores.eq3 import INT8_FLOAT_LAYERS
    from ctxsim.scores.loading import load_scorer

    with open(path, "rb") as f:
        cap = pickle.load(f)
    gen_dir = Path(cap["record"]["stages"]["generator"]["path"]) / "files"
    scorers: dict[bool, Any] = {}
    for c in cap["calls"]:
        if c["int8"] not in scorers:
            sc, _ = load_scorer(gen_dir, "cpu")
            scorers[c["int8"]] = quantize_int8(sc, skip=INT8_FLOAT_LAYERS) if c["int8"] else sc
        c["scorer"] = scorers[c["int8"]]
    return cap


def bf16_scorer(generator_dir: Path) -> Any:
    """The run's float32 scorer with its weights cast to bfloat16 (score.bf16_weights_on_cpu)."""
    from ctxsim.models.contextual.quantize import to_bf16_weights
    from ctxsim.scores.loading import load_scorer

    sc, _ = load_scorer(generator_dir, "cpu")
    to_bf16_weights(sc.model, "score.bf16_weights_on_cpu", logging.getLogger(__name__).warning)
    return sc


def engine_config(call: dict[str, Any], group: bool) -> EngineConfig:
    """The score stage's engine settings of a captured call, prompts grouped or not, no bar."""
    from ctxsim.models.contextual import score_engine as se

    return se.EngineConfig(**{**call["config"].__dict__, "group_prompts": group, "progress": False})


def run_engine(
    calls: list[dict[str, Any]], group: bool, scorer: Any | None = None
) -> dict[str, Any]:
    """Every captured call again with a fresh engine of the stage's settings (on ``scorer``
    instead of the stage's where given); CPU-s and stats."""
    from ctxsim.models.contextual import score_engine as se

    out: dict[str, Any] = {"cpu_s": 0.0, "scores": [], "stats": se.EngineStats()}
    reset_peak_rss()
    base = peak_rss_mb()
    for c in calls:
        cfg = engine_config(c, group)
        eng = se.ScoringEngine(scorer if scorer is not None else c["scorer"], cfg)
        t0 = time.process_time()
        got = eng.score(*c["windows"], c["directions"])
        out["cpu_s"] += time.process_time() - t0
        out["scores"].append(np.concatenate([got[d] for d in c["directions"]]))
        for k in ("target_tokens", "padded_tokens", "run_tokens", "forward_calls"):
            setattr(out["stats"], k, getattr(out["stats"], k) + getattr(eng.stats, k))
    out["rss_mb"] = peak_rss_mb() - base
    out["scores"] = np.concatenate(out["scores"])
    return out


def timed_evaluation(
    model: str, eval_dir: str, backbone: str, max_len: int, **kw: Any
) -> tuple[float, float, dict[str, Any]]:
    """One ``evaluate_model`` call as `ctxsim adapt` makes it (the download and TF-IDF as
    baselines, cosine), on one torch thread: (CPU-s, wall s, the result)."""
    import torch

    from ctxsim.models.registry import resolve_model
    from ctxsim.tasks.evaluate import evaluate_model

    torch.set_num_threads(1)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    res = evaluate_model(
        model,
        eval_dir,
        baselines={"backbone": str(resolve_model(backbone)), "tfidf": None},
        max_seq_length=max_len,
        **({"similarities": ["cosine"]} | kw),
    )
    return time.process_time() - cpu0, time.perf_counter() - wall0, res


def add_evaluation_args(ap: Any) -> None:
    """The arguments of the benches that time ``timed_evaluation``: the adapted model, the dev
    tasks, the download and the token limit (the recipe's 256)."""
    ap.add_argument("--model", required=True, help="the adapted sentence-transformers model dir")
    ap.add_argument("--eval-dir", required=True)
    ap.add_argument("--backbone", default="minilm", help="the download (registry name or dir)")
    ap.add_argument("--max-seq-length", type=int, default=256)
