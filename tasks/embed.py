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

The fingerprint names the scorer by registry name and by a content hash of its files, so a model
trained again at the same path gets new embeddings, never the old ones.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator

from ctxsim.models.contextual.encoder_origin import ScatterStats
from ctxsim.models.registry import REGISTRY, resolve_model
from ctxsim.models.tokenizer_threads import tokenizer_threads
from ctxsim.store.artefacts import Artefact, content_digest
from ctxsim.store.atomic import atomic_path
from ctxsim.store.cost_model import CorpusBytes
from ctxsim.store.errors import InputError
from ctxsim.store.stage import Stage, StageContext, StageParams, knob
from ctxsim.store.tables import rows_of
from ctxsim.tasks.index import chunk_texts

#: the reduced scatter statistics of all shards, under the artefact's files
SCATTER_FILE = "scatter.npz"
#: the scorer followed by Dense(M^(1/2)): the closed form as a model (product/adapted.py)
ADAPTED_DIR = "adapted-encoder"
#: files of a model directory that do not change what it computes
_NOT_MODEL_FILES = {"README.md"}

EMBED_SCHEMA = pa.schema(
    [
        ("context_id", pa.int64()),  # chunk_id (unit chunk) or context_id (unit window)
        ("n_tokens", pa.int32()),  # scorer tokens, special tokens included, before truncation
        ("truncated", pa.bool_()),
    ]
)


class EncoderInputError(InputError):
    """The encoder route's input is unusable: the scorer, the corpus's units or the scatter."""


def scorer_problem(name: str) -> str | None:
    """Why ``name`` cannot be the encoder scorer, or None: a registry name or a local
    sentence-transformers / transformers model directory (no hub ids: no network at run time)."""
    if name in REGISTRY:
        return None
    path = Path(name).expanduser()
    if path.is_dir() and ((path / "modules.json").exists() or (path / "config.json").exists()):
        return None
    return (
        f"{name!r} is neither a registered model ({', '.join(REGISTRY)}) nor a model directory "
        "(one with modules.json or config.json)"
    )


class EmbedParams(StageParams):
    model: str = Field(
        "minilm",
        description="the scorer whose cosine is the fit score S(c, s): a registry name (minilm, "
        "mpnet) or a sentence-transformers / transformers model directory (e.g. a trained one)",
    )
    unit: Literal["chunk", "window"] = Field(
        "chunk",
        description="the context unit: chunk = the paragraph chunks of the contexts stage; "
        "window = a context slot's two sides, c< + ' ' + c>",
    )
    max_seq_length: int = Field(
        64,
        ge=8,
        description="scorer tokens per unit; longer units are truncated (counted in the stats "
        "and logged): the scatter matrix sees their first tokens only",
    )
    min_words: int = Field(
        8, ge=1, description="units of fewer words (headings, list stubs) are not contexts"
    )
    batch_size: int = knob(64, ge=1, description="units per encoder batch (speed and memory only)")
    n_shards: int = Field(
        4,
        ge=1,
        le=4096,
        description="pieces of the corpus pass, each recorded when done: a rerun after a crash "
        "encodes only the missing ones",
    )

    @field_validator("model")
    @classmethod
    def _known_scorer(cls, value: str) -> str:
        problem = scorer_problem(value)
        if problem:
            raise ValueError(problem)
        return value


def model_digest(path: str | Path) -> str:
    """sha256 over (relative path, content digest) of every file of a model directory, model
    cards and hidden files aside: a retrained model at the same path hashes differently."""
    root = Path(path)
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root)
        if not f.is_file() or f.name in _NOT_MODEL_FILES:
            continue
        if any(part.startswith(".") for part in rel.parts):
            continue
        h.update(f"{rel.as_posix()}:{content_digest(f)}\n".encode())
    return h.hexdigest()


def scorer_identity(name: str) -> dict[str, str]:
    """The scorer as the fingerprint names it: its registry name (or resolved path) and content."""
    path = resolve_model(name)
    return {"name": name if name in REGISTRY else str(path), "digest": model_digest(path)}


def load_encoder(name: str, max_seq_length: int, device: str) -> Any:
    """The scorer as a SentenceTransformer truncating at ``max_seq_length`` tokens (a plain
    transformers directory gets mean pooling)."""
    from sentence_transformers import SentenceTransformer

    problem = scorer_problem(name)
    if problem:
        raise EncoderInputError(f"embed.model: {problem}")
    model = SentenceTransformer(str(resolve_model(name)), device=device)
    model.max_seq_length = max_seq_length
    return model


def token_counts(model: Any, texts: list[str]) -> np.ndarray:
    """Tokens each text has for ``model`` (special tokens included), before truncation."""
    tok = model.tokenizer
    out = np.zeros(len(texts), np.int32)
    for lo in range(0, len(texts), 1024):
        batch = texts[lo : lo + 1024]
        enc = tok(batch, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        out[lo : lo + len(enc)] = [len(e) for e in enc]
    return out


def encode(
    model: Any, texts: list[str], batch_size: int, bar: Any | None = None, block: int = 2048
) -> np.ndarray:
    """Unit-normalised float32 embeddings, in ``block``-sized calls so ``bar`` moves."""
    dim_of = getattr(model, "get_embedding_dimension", None)  # renamed in sentence-transformers 5
    dim = int((dim_of or model.get_sentence_embedding_dimension)())
    out = np.zeros((len(texts), dim), np.float32)
    for lo in range(0, len(texts), block):
        part = texts[lo : lo + block]
        out[lo : lo + len(part)] = model.encode(
            part,
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        if bar is not None:
            bar.update(len(part))
    return out


def context_units(
    contexts: Artefact, shard: Artefact, unit: str, min_words: int
) -> tuple[np.ndarray, list[str]]:
    """(ids, texts) of the corpus's context units of at least ``min_words`` words, by id."""
    if unit == "chunk":
        ids, texts = chunk_texts(contexts, shard)
    else:
        rows = contexts.read_table(["context_id", "left_sent_ids", "right_sent_ids"]).sort_by(
            "context_id"
        )
        sents = shard.read_table(["sent_id", "text"]).sort_by("sent_id")
        sent_ids = sents.column("sent_id").to_numpy()
        sent_text = sents.column("text").to_pylist()
        ids = rows.column("context_id").to_numpy().astype(np.int64)
        texts = []
        for left, right in zip(
            rows.column("left_sent_ids").to_pylist(),
            rows.column("right_sent_ids").to_pylist(),
            strict=True,
        ):
            at = rows_of(sent_ids, np.asarray(left + right), "embed: contexts' window sent_ids")
            k = len(left)
            texts.append(
                " ".join(sent_text[i] for i in at[:k])
                + " "
                + " ".join(sent_text[i] for i in at[k:])
            )
    keep = np.asarray([len(t.split()) >= min_words for t in texts], dtype=bool)
    return ids[keep], [t for t, k in zip(texts, keep, strict=True) if k]


def shard_files(files: Path, shard: int) -> tuple[Path, Path]:
    """(embeddings .npy, scatter statistics .npz) of one shard."""
    return files / f"emb-{shard:05d}.npy", files / f"scatter-{shard:05d}.npz"


def load_scatter(path: Path) -> ScatterStats:
    """A saved scatter, refused (one line naming the file) when unreadable or not finite."""
    try:
        return ScatterStats.load(path)
    except ValueError as exc:
        raise EncoderInputError(f"embed: {exc}") from None


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
    cost = CorpusBytes()  # every context unit of the corpus encoded
    corpus_memory = True
    labelling = True

    def fingerprint_extra(self, params: EmbedParams) -> dict[str, Any]:
        """The scorer by content: new weights at the same path give new embeddings."""
        return {"scorer": scorer_identity(params.model)}

    def num_shards(self, ctx: StageContext) -> int:
        return ctx.params.n_shards

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        from tqdm.auto import tqdm

        p: EmbedParams = ctx.params
        ids, texts = context_units(ctx.input("contexts"), ctx.input("shard"), p.unit, p.min_words)
        if len(ids) == 0:
            raise EncoderInputError(
                f"embed: the corpus yields no context unit (unit {p.unit!r} with at least "
                f"embed.min_words={p.min_words} words); lower embed.min_words or use longer "
                "paragraphs"
            )
        take = np.array_split(np.arange(len(ids)), p.n_shards)[shard]
        ids, texts = ids[take], [texts[i] for i in take]
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
                emb = encode(model, texts, p.batch_size, bar)
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
        }
        return table, stats

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        """The shards' scatter statistics merged into ``files/scatter.npz`` (refused when not
        finite), and the counts: contexts, truncated ones, contexts per second."""
        p: EmbedParams = ctx.params
        parts = [load_scatter(shard_files(ctx.files_dir, s)[1]) for s in range(p.n_shards)]
        total = parts[0]
        for part in parts[1:]:
            total = total.merge(part)
        m = total.matrix(centred=True)
        if not np.all(np.isfinite(m)):
            raise EncoderInputError(
                f"embed: the scatter matrix of {ctx.files_dir} is not finite (an encoder that "
                "returns NaN or inf embeddings?)"
            )
        with atomic_path(ctx.files_dir / SCATTER_FILE, suffix=".npz") as tmp:
            total.save(tmp)
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
        out = self._adapted_encoder(ctx, m, n)
        ctx.logger.info("embed: adapted encoder (scorer + M^(1/2)) at %s", out)
        return stats

    def _adapted_encoder(self, ctx: StageContext, m: np.ndarray, n: int) -> Path:
        """``files/adapted-encoder/``: the scorer followed by M^(1/2), whose cosine is the
        closed-form Origin over this corpus (``ctxsim evaluate DIR``, ``train.backbone=DIR``)."""
        from ctxsim.product.adapted import build_adapted_encoder

        p: EmbedParams = ctx.params
        ident = scorer_identity(p.model)
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
        return build_adapted_encoder(
            resolve_model(p.model),
            m,
            ctx.files_dir / ADAPTED_DIR,
            card_text=card,
            meta=meta,
            device=ctx.device,
        )
