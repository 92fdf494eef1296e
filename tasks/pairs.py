"""Stage `pairs`: which sentence pairs get Origin labels (Eq. 4).

``mode: mine`` (the dataset ctxsim builds from corpus queries) mixes nearest neighbours in an
embedding space (faiss), pairs whose selected context sets share a context, and random pairs
(models/corpus/pairs.py). ``mode: given`` labels exactly the pairs of the queries artefact's
``files/given_pairs.parquet`` (the Origin evaluation on STS sets); ``auto`` picks ``given`` when
that file exists.

Encoders for mining: ``tfidf`` (TF-IDF uni+bigram LSA vectors, no weights; IDF from a sample of
corpus sentences) or any sentence-transformers model by registry short name, path or hub id
(models/registry.py ``resolve_model``).

Rows: pair_id, s1_query_id, s2_query_id, source (knn/shared/random/given), and for given pairs
dataset, subset, gold (null otherwise).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from ctxsim.models.corpus.pairs import (
    FLAT_MAX,
    IVF_TRAIN_PER_LIST,
    knn_pairs,
    knn_search,
    mix_pairs,
    shared_context_pairs,
    tfidf_embed,
)
from ctxsim.store.cost_model import CostModel, IdfSample, PerQueryRows
from ctxsim.store.errors import InputError
from ctxsim.store.stage import Stage, StageContext, StageParams, knob

PAIRS_SCHEMA = pa.schema(
    [
        ("pair_id", pa.int64()),
        ("s1_query_id", pa.int64()),
        ("s2_query_id", pa.int64()),
        ("source", pa.string()),
        ("dataset", pa.string()),
        ("subset", pa.string()),
        ("gold", pa.float64()),
    ]
)
GIVEN_FILE = "given_pairs.parquet"


def given_pairs(pairs: pa.Table) -> bool:
    """Whether a pairs artefact holds given pairs (an STS file's, ``source`` "given") rather
    than mined ones: given pairs are evaluated, never trained on."""
    return (
        "source" in pairs.column_names
        and pairs.num_rows > 0
        and bool(np.all(pairs.column("source").to_numpy(zero_copy_only=False) == "given"))
    )


class PairsParams(StageParams):
    mode: Literal["auto", "mine", "given"] = Field(
        "auto",
        description=(
            "Which pairs get labels: mine (pairs drawn from the corpus queries: the dataset ctxsim "
            "builds), given (exactly the STS pairs of the queries artefact, for the Origin "
            "evaluation), or auto (given when the queries artefact holds given pairs, else mine)."
        ),
    )
    pairs_per_query: float = Field(
        5.0,
        gt=0,
        description=(
            "Mined pairs = pairs_per_query x queries: the size of the dataset, and the label and "
            "score cost with it."
        ),
    )
    max_pairs: int | None = Field(
        None,
        ge=1,
        description="Cap on the mined pairs (None: no cap).",
    )
    ratio_knn: float = Field(
        0.5,
        ge=0,
        description=(
            "Share of mined pairs that are nearest neighbours in the mining encoder's space "
            "(similar pairs); normalised with the other two ratios."
        ),
    )
    ratio_shared: float = Field(
        0.25,
        ge=0,
        description=(
            "Share of mined pairs whose selected context sets share a context (needs select); "
            "normalised with the other two ratios."
        ),
    )
    ratio_random: float = Field(
        0.25,
        ge=0,
        description=(
            "Share of mined pairs drawn at random (mostly dissimilar pairs, so labels span the "
            "range); normalised with the other two ratios."
        ),
    )
    encoder: str = Field(
        "tfidf",
        description=(
            "The mining encoder: tfidf (word uni+bigram TF-IDF reduced by LSA, no weights) or a "
            "sentence-transformers model by registry short name, path or hub id. Only decides which"
            " pairs are mined, not their labels."
        ),
    )
    embed_dim: int = Field(
        256,
        ge=2,
        description="encoder tfidf: LSA dimensions of the mining vectors.",
    )
    idf_sample: int = Field(
        50_000,
        ge=0,
        description=(
            "encoder tfidf: corpus sentences sampled for the IDF and SVD fit (0: the queries only)."
        ),
    )
    encode_batch_size: int = knob(
        128,
        ge=1,
        description=(
            "Sentences per forward pass of a sentence-transformers mining encoder. Speed and memory"
            " only: out of the fingerprint."
        ),
    )
    knn_k: int = Field(
        10,
        ge=1,
        description="Neighbours searched per query for the nearest-neighbour pairs.",
    )
    flat_max: int = Field(
        FLAT_MAX,
        ge=1,
        description=(
            "Exact faiss search (IndexFlatIP) up to this many queries, approximate IVF above. "
            "IVF at 128 probes takes over near 150,000 on one CPU thread: 0.89x exact's speed at "
            "100,000, 1.19x at 150,000, recall@3 0.96 (bench/results/knn_mining_books*.md)."
        ),
    )
    ivf_nlist: int | None = Field(
        None,
        ge=1,
        description="IVF clusters above flat_max (None: 4 sqrt(n)).",
    )
    ivf_nprobe: int | None = Field(
        None,
        ge=1,
        description="IVF clusters searched per query: more is closer to exact and slower "
        "(None: 128, or all clusters when fewer; recall@3 0.96-0.99 from 10,000 to 150,000 "
        "queries, 0.82 with 16: bench/results/knn_mining_books*.md).",
    )
    ivf_train_per_list: int = Field(
        IVF_TRAIN_PER_LIST,
        ge=1,
        description="IVF quantiser training rows per cluster (a seeded sample): 64 found the "
        "same neighbours as 256 at 150,000 queries, 1.07x faster and 500 MB smaller "
        "(bench/results/knn_mining_books_150k.md).",
    )
    max_pairs_per_context: int = Field(
        10,
        ge=1,
        description=(
            "At most this many shared-context pairs per shared context, so one common context does "
            "not supply most of them."
        ),
    )
    skip_same_text: bool = Field(
        True,
        description="Skip pairs of identical texts: trivially similar, they carry no information.",
    )

    @model_validator(mode="after")
    def _ratios(self) -> PairsParams:
        if self.ratio_knn + self.ratio_shared + self.ratio_random <= 0:
            raise ValueError("pairs: ratio_knn + ratio_shared + ratio_random must be > 0")
        return self


def shortfall_note(name: str, short: int, wanted: int, p: PairsParams) -> str:
    """One line saying that a source gave fewer pairs than its ratio asked for."""
    why = (
        f"a pair of mutual neighbours counts once; pairs.knn_k={p.knn_k} neighbours searched"
        if name == "knn"
        else f"too few shared contexts (pairs.max_pairs_per_context={p.max_pairs_per_context})"
    )
    key = "pairs.knn_k" if name == "knn" else "pairs.max_pairs_per_context"
    return (
        f"{short:,} of the {wanted:,} {name} pairs the ratios ask for were not found ({why}); "
        f"random pairs fill them: raise {key} for the mix the ratios say"
    )


class PairsStage(Stage):
    name = "pairs"
    version = "3"  # 3: exact up to 150,000 queries, IVF probes 128 clusters, trained on 64/list
    Params = PairsParams
    inputs = ("queries", "shard")
    #: context sets, read only to mine pairs that share a context (ratio_shared > 0)
    optional_inputs = ("select",)
    cost = PerQueryRows()  # pairs per query (the tfidf encoder: see cost_model)
    per_query = True

    def optional_inputs_for(self, params: PairsParams) -> tuple[str, ...]:
        """`select` only when some pairs must share a context: a mix of neighbours and random
        pairs needs no context sets (and so no retrieval or scorer) at all."""
        return ("select",) if params.ratio_shared > 0 else ()

    def cost_model(self, params: PairsParams) -> CostModel:
        """The tfidf encoder's cost is fitting the IDF on a sample of corpus sentences."""
        if params.encoder == "tfidf":
            return IdfSample(sample="idf_sample", sentences="shard")
        return self.cost

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: PairsParams = ctx.params
        given_path = ctx.input("queries").files_dir / GIVEN_FILE
        mode = p.mode if p.mode != "auto" else ("given" if given_path.exists() else "mine")
        wanted: dict[str, int] = {}
        if mode == "given":
            table = self._given(given_path)
        else:
            table, wanted = self._mine(ctx, p)
        if table.num_rows == 0:
            raise InputError(
                f"pairs: mode {mode!r} gave 0 pairs"
                + (
                    f" ({given_path} has no rows)"
                    if mode == "given"
                    else " (pairs.pairs_per_query / pairs.max_pairs, or too few distinct queries)"
                )
                + "; nothing to label"
            )
        src = table.column("source").to_numpy(zero_copy_only=False)
        stats: dict[str, Any] = {"pairs": table.num_rows, "mode": mode}
        for name in ("knn", "shared", "random", "given"):
            stats[f"pairs_{name}"] = int((src == name).sum())
        for name in ("knn", "shared"):
            short = wanted.get(name, 0) - stats[f"pairs_{name}"]
            if short > 0:  # filled with random pairs (mix_pairs); the recipe's own mix is one
                stats[f"pairs_{name}_short"] = short
                ctx.logger.info("pairs: %s", shortfall_note(name, short, wanted[name], p))
        return table, stats

    def _given(self, path: Any) -> pa.Table:
        if not path.exists():
            raise FileNotFoundError(f"pairs.mode is 'given' but {path} does not exist")
        try:
            g = pq.read_table(path)
        except (OSError, pa.ArrowInvalid) as e:  # a folder, a CSV, a truncated file
            raise InputError(f"{path}: not a readable Parquet file ({e})") from None
        need = {"pair_id", "s1_query_id", "s2_query_id", "dataset", "subset", "gold"}
        missing = need - set(g.column_names)
        if missing:
            raise InputError(f"{path}: missing columns {sorted(missing)}")
        n = g.num_rows
        return pa.table(
            {
                "pair_id": g["pair_id"].cast(pa.int64()),
                "s1_query_id": g["s1_query_id"].cast(pa.int64()),
                "s2_query_id": g["s2_query_id"].cast(pa.int64()),
                "source": pa.array(["given"] * n, pa.string()),
                "dataset": g["dataset"].cast(pa.string()),
                "subset": g["subset"].cast(pa.string()),
                "gold": g["gold"].cast(pa.float64()),
            },
            schema=PAIRS_SCHEMA,
        )

    def _mine(self, ctx: StageContext, p: PairsParams) -> tuple[pa.Table, dict[str, int]]:
        """The mined pairs and each source's quota (what the ratios asked for)."""
        rng = np.random.default_rng(ctx.run.seed)
        q = ctx.input("queries").read_table(["query_id", "text"])
        ids = q.column("query_id").to_numpy()
        texts = q.column("text").to_pylist()
        if len(ids) < 2:
            raise InputError("pairs: fewer than two queries to pair")
        if p.skip_same_text:  # keep the first query of each distinct text
            _, first = np.unique(np.asarray(texts, dtype=object), return_index=True)
            keep = np.sort(first)
        else:
            keep = np.arange(len(ids))
        ids_k = ids[keep]
        n_total = int(round(p.pairs_per_query * len(ids_k)))
        if p.max_pairs:
            n_total = min(n_total, p.max_pairs)
        wsum = p.ratio_knn + p.ratio_shared + p.ratio_random
        quotas = {
            "knn": int(round(n_total * p.ratio_knn / wsum)),
            "shared": int(round(n_total * p.ratio_shared / wsum)),
        }
        quotas["random"] = max(0, n_total - quotas["knn"] - quotas["shared"])
        cands: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if quotas["knn"]:
            emb = self._embed(ctx, p, [texts[i] for i in keep], rng)
            nbr, _ = knn_search(
                emb,
                p.knn_k,
                flat_max=p.flat_max,
                nlist=p.ivf_nlist,
                nprobe=p.ivf_nprobe,
                train_per_list=p.ivf_train_per_list,
                use_gpu=ctx.device.startswith("cuda"),
                seed=ctx.run.seed,
            )
            cands["knn"] = knn_pairs(nbr, ids_k)
        if quotas["shared"]:
            if "select" not in ctx.upstream:
                raise InputError(
                    "pairs.ratio_shared > 0 mines pairs that share a context, which needs the "
                    "select stage: add a select section or set pairs.ratio_shared: 0"
                )
            sel = ctx.input("select").read_table(["query_id", "context_id"])
            sq = sel.column("query_id").to_numpy()
            ok = np.isin(sq, ids_k)
            cands["shared"] = shared_context_pairs(
                sq[ok], sel.column("context_id").to_numpy()[ok], p.max_pairs_per_context, rng
            )
        s1, s2, src = mix_pairs(cands, quotas, ids_k, rng)
        n = len(s1)
        table = pa.table(
            {
                "pair_id": np.arange(n, dtype=np.int64),
                "s1_query_id": s1,
                "s2_query_id": s2,
                "source": pa.array(src.tolist(), pa.string()),
                "dataset": pa.nulls(n, pa.string()),
                "subset": pa.nulls(n, pa.string()),
                "gold": pa.nulls(n, pa.float64()),
            },
            schema=PAIRS_SCHEMA,
        )
        return table, quotas

    def _embed(
        self, ctx: StageContext, p: PairsParams, texts: list[str], rng: np.random.Generator
    ) -> np.ndarray:
        if p.encoder == "tfidf":
            fit = None
            if p.idf_sample:
                corpus = ctx.input("shard").read_table(["text"]).column("text")
                take = rng.choice(len(corpus), size=min(p.idf_sample, len(corpus)), replace=False)
                fit = corpus.take(pa.array(np.sort(take))).to_pylist()
            return tfidf_embed(texts, p.embed_dim, fit_texts=fit, seed=ctx.run.seed)
        from ctxsim.models.encoders import encode, load_encoder

        model = load_encoder(p.encoder, None, ctx.device, model_key="pairs.encoder")
        return encode(model, texts, p.encode_batch_size, block=len(texts))  # one call, as before
