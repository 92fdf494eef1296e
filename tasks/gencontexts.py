"""Stage `gencontexts`: contexts sampled for each query sentence by a causal LM.

Why: retrieved contexts are only as good as the corpus is close to the sentences (books contexts
for news headlines and image captions are near random, Sec. 5.4); a language model's own
continuations and preceding sentences fit any sentence. Per query, ``k_right`` one-sided slots
[_, s, c>] (c> a sampled continuation) and ``k_left`` slots [c<, s, _] (c< sampled with a left
prompt, models/contextual/context_sampling.py TEMPLATES) are drawn; `select` takes them beside or
instead of
the screened corpus contexts (``select.source``), under the same diversity rule (one per chunk,
word-set Jaccard < 0.5 of the context sentence), and `score` / `label` treat them like any slot:
an Eq. 3 term whose target side is absent is 0 (models/contextual/score_engine.py is never asked to
score an
empty target).

Ids: generated contexts and their sentences live in their own ranges (``GEN_CONTEXT_BASE``,
``GEN_SENT_BASE``) above corpus ids, derived from (query_id, side, sample index), so they are
stable across shards and K. Each row keeps its provenance: model, prompt template, seed and
sampling settings. Samples are cached in ``ROOT/_cache/gencontexts/<model>/`` by (model, template,
settings, sentence, seed; store/sample_cache.py): growing K or relabelling other pairs pays only
for new samples.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from ctxsim.store.cost_model import PerQueryRows
from ctxsim.store.errors import InputError
from ctxsim.store.sample_cache import SampleCache
from ctxsim.store.stage import Stage, StageContext, StageParams, knob

GEN_CONTEXT_BASE = 1 << 50
GEN_SENT_BASE = 1 << 51
MAX_K = 1 << 11  # samples per side and query (the id layout's room)

GEN_SCHEMA = pa.schema(
    [
        # the `contexts` columns (tasks/contexts.py CONTEXT_SCHEMA): one slot per sample
        ("context_id", pa.int64()),
        ("chunk_id", pa.int64()),  # = context_id: every sample is a chunk of its own
        ("section_id", pa.int64()),  # -1
        ("centre_sent_id", pa.int64()),  # -1: no corpus sentence sits in the slot
        ("left_sent_ids", pa.list_(pa.int64())),  # [sent_id] for a left sample, else []
        ("right_sent_ids", pa.list_(pa.int64())),  # [sent_id] for a right sample, else []
        # the sample and its provenance
        ("query_id", pa.int64()),
        ("side", pa.string()),  # left | right
        ("sample", pa.int32()),  # index j < k_<side>
        ("sent_id", pa.int64()),
        ("text", pa.string()),  # "" when the model ended at once (select skips those)
        ("model", pa.string()),
        ("template", pa.string()),
        ("seed", pa.int64()),
        ("sampling", pa.string()),  # JSON of models.context_sampling.SamplingSettings
    ]
)


class GenContextsParams(StageParams):
    model: str = Field(
        "smollm2-135m",
        description=(
            "The causal LM that samples contexts: a registry name (models/registry.py), a local "
            "path or a hub id."
        ),
    )
    k_right: int = Field(
        8,
        ge=0,
        lt=MAX_K,
        description=(
            "Sampled continuations (right contexts) per sentence; more give smoother labels at a "
            "linear sampling cost."
        ),
    )
    k_left: int = Field(
        0,
        ge=0,
        lt=MAX_K,
        description="Sampled preceding sentences (left contexts) per sentence.",
    )
    left_template: Literal["left_instruct", "left_dialogue"] = Field(
        "left_instruct",
        description=(
            "Prompt for a preceding sentence: left_instruct (the left term's own fill-in template "
            "with c> empty) or left_dialogue (a plain-text framing without instructions, the "
            "sentence quoted as a reply)."
        ),
    )
    max_new_tokens: int = Field(
        32,
        ge=1,
        description=(
            "Tokens sampled per context at most; a sample is cut at its first sentence end."
        ),
    )
    temperature: float = Field(
        1.0,
        gt=0.0,
        description="Sampling temperature: lower gives more typical, less diverse contexts.",
    )
    top_p: float = Field(
        0.95,
        gt=0.0,
        le=1.0,
        description=(
            "Nucleus sampling: the smallest set of tokens with this probability mass is sampled "
            "from."
        ),
    )
    top_k: int = Field(
        100,
        ge=1,
        description="Sample among the k most likely tokens only.",
    )
    batch_size: int = knob(
        32,
        ge=1,
        description=(
            "Prompts per generation batch. Every sample draws from its own seeded generator, so the"
            " samples do not depend on it: speed and memory only, out of the fingerprint."
        ),
    )
    bf16_weights_on_cpu: bool = Field(
        False,
        description=(
            "The sampler's weights in bfloat16 on CPU: on CPUs with AMX 2.4x float32 at batch 384"
            " (bench/results/sampler_bf16.md); on CPUs without bf16 units slower. bf16 logits "
            "move with the batch (its padding and size), so a sample depends on the batch it was "
            "drawn in: batch_size joins the fingerprint and the sample cache is neither read nor "
            "written (a cached sample would differ from a fresh draw). Origin with bf16 samples "
            "stays within the spread of two float32 draws (docs/scoring.md#cheaper-scoring)."
        ),
    )
    cache: bool = Field(
        True,
        description=(
            "Reuse samples drawn by earlier runs on this root (ROOT/_cache/gencontexts): growing K "
            "or labelling other sentences pays only for new samples."
        ),
    )

    added_defaults: ClassVar[dict[str, Any]] = {"bf16_weights_on_cpu": False}

    def link(self, sections: dict[str, StageParams]) -> None:
        """A continuation is scored by the right term only, a preceding sentence by the left
        term only: with that term's lambda at 0 every such slot would score S = 0."""
        score = sections.get("score")
        for k, lam in ((self.k_right, "lambda_right"), (self.k_left, "lambda_left")):
            if k > 0 and score is not None and getattr(score, lam, 1.0) == 0.0:
                side = "k_right" if lam == "lambda_right" else "k_left"
                raise InputError(
                    f"gencontexts.{side} > 0 needs score.{lam} != 0 (a one-sided generated "
                    "slot has only that term)"
                )


def context_id(query_id: np.ndarray, side: np.ndarray, sample: np.ndarray) -> np.ndarray:
    """Generated context ids: (query, side, j) -> an id above every corpus context id."""
    return GEN_CONTEXT_BASE + (query_id << 12) + (side.astype(np.int64) << 11) + sample


def sample_seed(run_seed: int, template: str, sentence: str, j: int) -> int:
    """The seed of sample j of a sentence under a template: independent of batch, K and shard."""
    h = hashlib.blake2b(f"{run_seed}\x1f{template}\x1f{sentence}\x1f{j}".encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


def _model_identity(model: str) -> tuple[str, str]:
    """(resolved path or hub id, identity string for the sample cache: the path plus its
    weights' sizes and mtimes, so a retrained model in the same folder is another model)."""
    from ctxsim.models.registry import resolve_model

    path = str(resolve_model(model))
    ident = path
    if Path(path).is_dir():
        files = sorted(Path(path).glob("*.safetensors")) + sorted(Path(path).glob("*.bin"))
        ident += json.dumps([[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files])
    return path, ident


def _add_rows(
    cols: dict[str, list],
    slot: tuple[int, str, str, str],
    query_ids: np.ndarray,
    js: np.ndarray,
    seeds: list[int],
    texts: list[str],
) -> None:
    """One side's samples as rows of ``cols``: ``slot`` is (side: 1 right, 0 left; template;
    sampling settings as JSON; model), one row per query id, sample index, seed and text; ids in
    the generated ranges."""
    side, template, sampling, model = slot
    n = len(query_ids)
    cid = context_id(query_ids, np.full(n, side), js)
    sid = cid - GEN_CONTEXT_BASE + GEN_SENT_BASE
    cols["context_id"] += cid.tolist()
    cols["chunk_id"] += cid.tolist()
    cols["section_id"] += [-1] * n
    cols["centre_sent_id"] += [-1] * n
    cols["left_sent_ids"] += [[int(s)] if side == 0 else [] for s in sid]
    cols["right_sent_ids"] += [[int(s)] if side == 1 else [] for s in sid]
    cols["query_id"] += query_ids.tolist()
    cols["side"] += ["right" if side else "left"] * n
    cols["sample"] += js.tolist()
    cols["sent_id"] += sid.tolist()
    cols["text"] += texts
    cols["model"] += [model] * n
    cols["template"] += [template] * n
    cols["seed"] += seeds
    cols["sampling"] += [sampling] * n


class GenContextsStage(Stage):
    name = "gencontexts"
    version = "2"  # 2: finished rows leave the decoding batch (bf16 samples move by rounding)
    Params = GenContextsParams
    inputs = ("queries",)
    cost = PerQueryRows(fit=False)  # sampled contexts per query
    per_query = True
    labelling = True

    def fingerprint_extra(self, params: GenContextsParams) -> dict[str, Any]:
        """With bfloat16 weights the batch decides the samples (float32 samples do not depend
        on it: batch_size is a knob there)."""
        return {"bf16_batch_size": params.batch_size} if params.bf16_weights_on_cpu else {}

    def num_shards(self, ctx: StageContext) -> int:
        return int(ctx.input("queries").stats.get("n_shards", 1))

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        import torch
        from tqdm.auto import tqdm

        from ctxsim.models.contextual.context_sampling import (
            SamplingSettings,
            load_sampler_lm,
            render,
            sample_texts,
            stops_at_quote,
        )

        p: GenContextsParams = ctx.params
        if ctx.run.torch_threads > 0:
            torch.set_num_threads(ctx.run.torch_threads)
        q = ctx.input_shard("queries", shard, ["query_id", "text"])
        qids = q.column("query_id").to_numpy()
        texts = q.column("text").to_pylist()
        settings = SamplingSettings(p.max_new_tokens, p.temperature, p.top_p, p.top_k)
        sampling = json.dumps(settings.__dict__, sort_keys=True)
        cols: dict[str, list] = {f.name: [] for f in GEN_SCHEMA}
        path, ident = _model_identity(p.model)
        bf16 = p.bf16_weights_on_cpu and torch.device(ctx.device).type == "cpu"
        # bf16 samples depend on their batch: a cached one is not what this batch would draw
        cache = SampleCache(ctx.store.root, ident) if p.cache and not bf16 else None
        lm = tok = None
        n_new = n_cached = 0
        for side, k, template in ((1, p.k_right, "right"), (0, p.k_left, p.left_template)):
            if k == 0 or len(qids) == 0:
                continue
            qi = np.repeat(np.arange(len(qids)), k)
            js = np.tile(np.arange(k), len(qids))
            seeds = [
                sample_seed(ctx.run.seed, template, texts[i], int(j))
                for i, j in zip(qi, js, strict=True)
            ]
            keys = [
                SampleCache.key(template, sampling, texts[i], s)
                for i, s in zip(qi, seeds, strict=True)
            ]
            got = cache.get(keys) if cache is not None else {}
            todo = [r for r, key in enumerate(keys) if key not in got]
            if todo and lm is None:
                lm, tok = load_sampler_lm(path, ctx.device, ctx.logger.warning if bf16 else None)
            bar = tqdm(
                total=len(todo),
                desc=f"gencontexts {template}",
                unit="sample",
                mininterval=30.0,
                disable=ctx.run.no_progress,
            )
            step = p.batch_size * 8  # cached as they come: a killed shard keeps its samples
            with bar:
                for lo in range(0, len(todo), step):
                    rows = todo[lo : lo + step]
                    new = sample_texts(
                        lm,
                        tok,
                        [render(template, texts[qi[r]]) for r in rows],
                        [seeds[r] for r in rows],
                        settings,
                        batch_size=p.batch_size,
                        quote=stops_at_quote(template),
                        progress=bar.update,
                    )
                    if cache is not None:
                        cache.put([keys[r] for r in rows], new)
                    got.update({keys[r]: t for r, t in zip(rows, new, strict=True)})
            n_new, n_cached = n_new + len(todo), n_cached + len(keys) - len(todo)
            slot = (side, template, sampling, p.model)
            _add_rows(cols, slot, qids[qi], js, seeds, [got[key] for key in keys])
        table = pa.table(cols, schema=GEN_SCHEMA)
        empty = int(sum(1 for t in cols["text"] if not t))
        stats = {"queries": len(qids), "samples": table.num_rows, "sampled": n_new}
        stats |= {"from_cache": n_cached, "empty": empty}
        return table, stats
