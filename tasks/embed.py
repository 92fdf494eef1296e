"""Stage `embed`: every context unit of the corpus encoded by a sentence encoder, and their scatter.

With an encoder as the contextual model the fit score is S(c, s) = cos(E(c), E(s)), and Origin
over all the corpus's contexts with centred profiles has a closed form: the labels need only the
d x d scatter matrix M = sum_c (c - cbar)(c - cbar)^T of the unit-normalised context embeddings
(models/contextual/encoder_origin.py). This stage is that one corpus pass: it encodes each context
unit once,
per shard (resumable), keeps the embeddings (for the variants without a closed form: a softmax
fit score, top-K unions) and reduces the shards' sums to ``files/scatter.npz``.

A context unit is a paragraph chunk of the ``contexts`` artefact (``unit: chunk``, the chunks the
TF-IDF index retrieves) or a context slot's two sides (``unit: window``: text = c< + " " + c>).
Units of fewer than ``min_words`` words are dropped (headings and list stubs carry no context).
``max_units`` keeps a seeded sample of the rest: M is a d x d average, and 8,000 units give labels
within Spearman 0.9998 of all 32,503 of MedQuAD's (bench/results/embed_units_sample.md), so the
corpus pass stops growing with the corpus.

The fingerprint names the encoder by registry name and by a content hash of its files (under the
key ``scorer``, kept so fingerprints stay: models/encoders.py ``encoder_identity``), so a model
trained again at the same path gets new embeddings, never the old ones.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from ctxsim.models.contextual.encoder_origin import ScatterStats
from ctxsim.models.encoders import (
    EncoderInputError,
    bf16_available,
    declared_limit,
    encode,
    encoder_identity,
    encoder_problem,
    length_problem,
    load_encoder,
    token_counts,
)
from ctxsim.models.registry import resolve_model
from ctxsim.models.tokenizer_threads import tokenizer_threads
from ctxsim.store.artefacts import Artefact, sha256_file
from ctxsim.store.atomic import atomic_path
from ctxsim.store.chunks import context_unit_index, sampled_units
from ctxsim.store.cost_model import CorpusUnits
from ctxsim.store.stage import Stage, StageContext, StageParams, knob

#: the reduced scatter statistics of all shards, under the artefact's files
SCATTER_FILE = "scatter.npz"
#: the key of a shard's completion record (its stats) holding the sha256 of each file it wrote
FILE_SUMS = "file_sha256"
#: the encoder followed by Dense(M^(1/2)): the closed form as a model (product/adapted.py)
ADAPTED_DIR = "adapted-encoder"

EMBED_SCHEMA = pa.schema(
    [
        ("context_id", pa.int64()),  # chunk_id (unit chunk) or context_id (unit window)
        ("n_tokens", pa.int32()),  # encoder tokens, special tokens included, before truncation
        ("truncated", pa.bool_()),
    ]
)


class EmbedParams(StageParams):
    model: str = Field(
        "minilm",
        description="the sentence encoder whose cosine is the fit score S(c, s): a registry name "
        "(minilm, mpnet) or a sentence-transformers / transformers model directory (e.g. a "
        "trained one)",
    )
    unit: Literal["chunk", "window"] = Field(
        "chunk",
        description="the context unit: chunk = the paragraph chunks of the contexts stage; "
        "window = a context slot's two sides, c< + ' ' + c>",
    )
    max_seq_length: int = Field(
        64,
        ge=8,
        description="encoder tokens per unit, at most the model's positions (checked at load); "
        "longer units are truncated (counted in the stats and logged): the scatter matrix sees "
        "their first tokens only",
    )
    min_words: int = Field(
        8, ge=1, description="units of fewer words (headings, list stubs) are not contexts"
    )
    max_units: int = Field(
        0,
        ge=0,
        description="encode at most this many units, a seeded sample of them (0: every unit): "
        "the scatter matrix is an average, estimated from a sample (labels' Spearman with all of "
        "MedQuAD's 32,503 units 0.9998 at 8,000; bench/results/embed_units_sample.md)",
    )
    batch_size: int = knob(64, ge=1, description="units per encoder batch (speed and memory only)")
    bf16: bool = Field(
        False,
        description="encode in bfloat16 autocast where the device has bf16 units (a CPU with "
        "AVX512-BF16 / AMX, or CUDA; float32 elsewhere): the units and the label stage's "
        "sentences alike (bench/results/adapt_recipe_two_fields.md: speed, label agreement)",
    )
    n_shards: int = Field(
        4,
        ge=1,
        le=4096,
        description="pieces of the corpus pass, each recorded when done: a rerun after a crash "
        "encodes only the missing ones",
    )

    #: keys added after the stage's first artefacts, left out of the dump at these defaults
    added_defaults: ClassVar[dict[str, Any]] = {"bf16": False, "max_units": 0}

    @field_validator("model")
    @classmethod
    def _known_encoder(cls, value: str) -> str:
        problem = encoder_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _length_within_the_model(self) -> EmbedParams:
        """``max_seq_length`` within the encoder's positions, checked at config load where
        the model's config is at hand (load_encoder checks the loaded model in any case)."""
        problem = length_problem(
            self.max_seq_length, declared_limit(self.model), "embed.max_seq_length", self.model
        )
        if problem:
            raise ValueError(problem)
        return self


def use_bf16(p: EmbedParams, device: str) -> bool:
    """bf16 when asked for and the device has the units (float32 otherwise)."""
    return p.bf16 and bf16_available(str(device))


def context_units(
    contexts: Artefact, shard: Artefact, unit: str, min_words: int
) -> tuple[np.ndarray, list[str]]:
    """(ids, texts) of the corpus's context units of at least ``min_words`` words, by id."""
    units = context_unit_index(contexts, shard, unit, min_words)
    return units.ids, units.texts(np.arange(len(units.ids)))


def shard_files(files: Path, shard: int) -> tuple[Path, Path]:
    """(embeddings .npy, scatter statistics .npz) of one shard."""
    return files / f"emb-{shard:05d}.npy", files / f"scatter-{shard:05d}.npz"


def load_scatter(path: Path) -> ScatterStats:
    """A saved scatter, refused (one line naming the file) when unreadable or not finite."""
    try:
        return ScatterStats.load(path)
    except ValueError as exc:
        raise EncoderInputError(f"embed: {exc}") from None


def shard_problem(files: Path, shard: int, stats: dict[str, Any]) -> str | None:
    """Why a finished shard's files cannot be merged, or None: each must match the sha256 its
    completion record (``stats[FILE_SUMS]``) holds, and the embeddings and scatter be finite
    (a swapped-in scatter of another corpus, a flipped byte, a NaN from the encoder)."""
    want = stats.get(FILE_SUMS) or {}
    emb_path, stats_path = shard_files(files, shard)
    for f in (emb_path, stats_path):
        if not f.is_file():
            return f"{f.name} is missing"
        if f.name not in want:
            return f"{f.name} has no checksum in the shard's record (written before checksums)"
        if sha256_file(f) != want[f.name]:
            return f"{f.name} does not match the sha256 recorded when the shard finished"
    try:
        emb = np.load(emb_path, mmap_mode="r", allow_pickle=False)
        finite = bool(np.isfinite(emb).all())
    except (OSError, ValueError) as exc:
        return f"{emb_path.name} is unreadable ({exc})"
    if not finite:
        return f"{emb_path.name}: the embeddings are not finite (NaN or inf)"
    try:
        ScatterStats.load(stats_path)
    except ValueError as exc:
        return str(exc).replace(str(stats_path), stats_path.name)
    return None


class _PublishedMeanwhile(Exception):
    """A concurrent run published the artefact whose shards this run was merging."""

    def __init__(self, artefact: Artefact) -> None:
        super().__init__(str(artefact.path))
        self.artefact = artefact


def read_embeddings(art: Artefact) -> np.ndarray:
    """All context embeddings of an embed artefact, in the order of its rows."""
    files = sorted(art.files_dir.glob("emb-*.npy"))
    if len(files) != len(art.parts):
        raise EncoderInputError(
            f"{art.files_dir}: {len(files)} embedding files for {len(art.parts)} shards"
        )
    return np.concatenate([np.load(f, allow_pickle=False) for f in files], axis=0)


class EmbedStage(Stage):
    name = "embed"
    version = "1"
    Params = EmbedParams
    inputs = ("shard", "contexts")
    run_fields = ()
    cost = CorpusUnits(count="contexts", cap="max_units")  # the units encoded
    # its memory is the encoder's and one shard's piece (the corpus's text as Arrow aside): 1.27x
    # at 16x the corpus with 4 shards (bench/results/corpus_scale_books.md), so the plan takes
    # the pilot's rather than scaling the encoder's memory with the corpus
    corpus_memory = False
    fixed_size_files = (f"files/{ADAPTED_DIR}/**/*", "files/scatter*.npz")
    labelling = True

    def fingerprint_extra(self, params: EmbedParams) -> dict[str, Any]:
        """The encoder by content (under the key ``scorer``, as ever): new weights at the same
        path give new embeddings."""
        return {"scorer": encoder_identity(params.model)}

    def num_shards(self, ctx: StageContext) -> int:
        return ctx.params.n_shards

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        from tqdm.auto import tqdm

        p: EmbedParams = ctx.params
        units = context_unit_index(
            ctx.input("contexts"),
            ctx.input("shard"),
            p.unit,
            p.min_words,
            word_cache=ctx.store.cache_dir("word-counts", create=False),
        )
        if len(units.ids) == 0:
            raise EncoderInputError(
                f"embed: the corpus yields no context unit (unit {p.unit!r} with at least "
                f"embed.min_words={p.min_words} words); lower embed.min_words or use longer "
                "paragraphs"
            )
        take = np.array_split(sampled_units(len(units.ids), p.max_units), p.n_shards)[shard]
        ids, texts = units.ids[take], units.texts(take)
        model = load_encoder(p.model, p.max_seq_length, ctx.device)
        bar = tqdm(
            total=len(texts),
            desc=f"embed shard {shard}",
            unit="context",
            mininterval=30.0,
            disable=ctx.run.no_progress,
        )
        with tokenizer_threads(str(ctx.device).startswith("cuda")):
            n_tokens = token_counts(model, texts)
            t0 = time.perf_counter()
            with bar:
                emb = encode(model, texts, p.batch_size, bar, bf16=use_bf16(p, ctx.device))
            seconds = time.perf_counter() - t0
        emb_path, stats_path = shard_files(ctx.files_dir, shard)
        with atomic_path(emb_path, suffix=".npy") as tmp:
            np.save(tmp, emb)
        part = ScatterStats.of(emb) if len(emb) else ScatterStats.empty(emb.shape[1])
        with atomic_path(stats_path, suffix=".npz") as tmp:
            part.save(tmp)
        truncated = n_tokens > p.max_seq_length
        table = pa.table(
            {"context_id": ids, "n_tokens": n_tokens, "truncated": truncated},
            schema=EMBED_SCHEMA,
        )
        stats = {
            "contexts": len(ids),
            "truncated": int(truncated.sum()),
            "encode_seconds": round(seconds, 3),
            "dim": int(emb.shape[1]),
            # kept in the shard's completion record: checked before the files are merged
            FILE_SUMS: {f.name: sha256_file(f) for f in (emb_path, stats_path)},
        }
        return table, stats

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        """The shards' scatter statistics merged into ``files/scatter.npz`` (refused when not
        finite), and the counts: contexts, truncated ones, contexts per second."""
        p: EmbedParams = ctx.params
        won = ctx.store.get(ctx.stage, ctx.fingerprint)
        if won is not None:
            return self._published_meanwhile(ctx, won)
        shard_stats = list(shard_stats)
        try:
            parts = [self._checked_shard(ctx, s, shard_stats) for s in range(p.n_shards)]
        except _PublishedMeanwhile as e:
            return self._published_meanwhile(ctx, e.artefact)
        total = parts[0]
        for part in parts[1:]:
            total = total.merge(part)
        m = total.matrix(centred=True)
        files = ctx.workdir / "files"  # never re-created here: a concurrent publish moves it
        if not np.all(np.isfinite(m)):
            raise EncoderInputError(
                f"embed: the scatter matrix of {files} is not finite (an encoder that "
                "returns NaN or inf embeddings?)"
            )
        n = sum(int(s.get("contexts", 0)) for s in shard_stats)
        truncated = sum(int(s.get("truncated", 0)) for s in shard_stats)
        secs = sum(float(s.get("encode_seconds", 0.0)) for s in shard_stats)
        cpu = sum(float(s.get("cpu_seconds", 0.0)) for s in shard_stats)
        if truncated:
            ctx.logger.warning(
                "embed: %d of %d contexts are longer than embed.max_seq_length=%d tokens and "
                "were truncated",
                truncated,
                n,
                p.max_seq_length,
            )
        stats = {
            "contexts": n,
            "truncated": truncated,
            "truncated_share": round(truncated / max(1, n), 4),
            "dim": int(total.total.shape[0]),
            "sentences_per_second": round(n / secs, 1) if secs > 0 else None,
            "cpu_seconds": round(cpu, 3),
            "scatter_trace": round(float(np.trace(m)), 4),
        }
        try:
            with atomic_path(files / SCATTER_FILE, suffix=".npz") as tmp:
                total.save(tmp)
            out = self._adapted_encoder(ctx, m, n, files)
        except FileNotFoundError:  # the partial folder was published by a concurrent run
            won = ctx.store.get(ctx.stage, ctx.fingerprint)
            if won is None:
                raise
            return self._published_meanwhile(ctx, won)
        ctx.logger.info("embed: adapted encoder (encoder + M^(1/2)) at %s", out)
        return stats

    def _published_meanwhile(self, ctx: StageContext, won: Artefact) -> dict[str, Any]:
        """A concurrent run published this artefact while this one computed: its stats, and
        nothing more written here (the store returns that artefact on publish)."""
        ctx.logger.info(
            "embed: %s was published by a concurrent run: reused, adapted encoder included",
            won.path,
        )
        return dict(won.stats)

    def _checked_shard(
        self, ctx: StageContext, shard: int, shard_stats: list[dict[str, Any]]
    ) -> ScatterStats:
        """The shard's scatter, once its files match the checksums its completion record
        holds and are finite. A shard that fails is moved aside (``ROOT/embed/.corrupt-<fp>-
        shard-<n>-...`` with a ``_WHY`` file, logged) and computed again, its record and
        ``shard_stats[shard]`` replaced; failing again, it is refused."""
        files = ctx.workdir / "files"  # never re-created here: a concurrent publish moves it
        problem = shard_problem(files, shard, shard_stats[shard])
        if problem is None:
            return load_scatter(shard_files(files, shard)[1])
        won = ctx.store.get(ctx.stage, ctx.fingerprint)
        if won is not None:
            raise _PublishedMeanwhile(won)
        dest = self._move_aside(ctx, files, shard, problem)
        ctx.logger.warning(
            "embed: shard %d: %s; its files moved to %s, recomputing the shard",
            shard,
            problem,
            dest,
        )
        t0, c0 = time.perf_counter(), time.process_time()
        table, stats = self.run_shard(ctx, shard)
        stats = {**stats, "cpu_seconds": round(time.process_time() - c0, 3)}
        ctx.store.write_shard(
            ctx.stage, ctx.fingerprint, shard, table, stats, time.perf_counter() - t0
        )
        shard_stats[shard] = stats
        problem = shard_problem(files, shard, stats)
        if problem is not None:
            raise EncoderInputError(
                f"embed: shard {shard} computed again: {problem} (an encoder that returns NaN or "
                "inf embeddings?)"
            )
        return load_scatter(shard_files(files, shard)[1])

    @staticmethod
    def _move_aside(ctx: StageContext, files: Path, shard: int, why: str) -> Path:
        """The shard's files to ``ROOT/embed/.corrupt-<fp>-shard-<n>-<time>-<id>/`` with a
        ``_WHY`` file: the store's corrupt-part convention, out of every glob of good files."""
        dest = files.parent.parent / (
            f".corrupt-{ctx.fingerprint}-shard-{shard:05d}-{int(time.time())}-"
            f"{uuid.uuid4().hex[:6]}"
        )
        dest.mkdir(parents=True)
        for f in shard_files(files, shard):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f, dest / f.name)
        (dest / "_WHY").write_text(why + "\n")
        return dest

    def _adapted_encoder(self, ctx: StageContext, m: np.ndarray, n: int, files: Path) -> Path:
        """``files/adapted-encoder/``: the encoder followed by M^(1/2), whose cosine is the
        closed-form Origin over this corpus (``ctxsim evaluate DIR``, ``train.backbone=DIR``)."""
        from ctxsim.product.adapted import build_adapted_encoder

        p: EmbedParams = ctx.params
        ident = encoder_identity(p.model)
        corpus = {k: a.fingerprint for k, a in sorted(ctx.upstream.items())}
        card = (
            "# ctxsim adapted encoder\n\n"
            f"The scorer `{ident['name']}` followed by a linear layer M^(1/2), M the scatter "
            f"matrix of its embeddings of {n:,} context units ({p.unit}s of at least "
            f"{p.min_words} words, first {p.max_seq_length} tokens) of the corpus with upstream "
            f"fingerprints {corpus}. Its cosine is Origin (Sun et al. 2022, Eq. 4) over all of "
            "those contexts with the scorer's cosine as the fit score, centred profiles: no "
            "corpus is needed at inference. Built by the ctxsim `embed` stage.\n"
        )
        meta = {
            "scorer": ident,
            "upstream": corpus,
            "contexts": n,
            "unit": p.unit,
            "min_words": p.min_words,
            "max_seq_length": p.max_seq_length,
            "centred": True,
        }
        if p.max_units:  # a seeded sample of the units (absent from earlier cards: kept so)
            meta["max_units"] = p.max_units
        return build_adapted_encoder(
            resolve_model(p.model),
            m,
            files / ADAPTED_DIR,
            card_text=card,
            meta=meta,
            device=ctx.device,
            scratch=ctx.workdir.parent,  # ROOT/embed: the same file system, out of the artefact
            logger=ctx.logger,
        )
