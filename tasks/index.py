"""Stage `index`: the TF-IDF bag-of-bigram vectoriser and chunk matrix (Sun et al. 2022, Sec. 3.3).

Retrieval ("primary screening") compares a sentence with every text chunk of the corpus; the fitted
vectoriser and the chunk matrix are an artefact of their own so that later runs and outside
queries (STS sentences for the Origin evaluation) reuse them. Stored without pickle
(store/index_files.py: ``save_index_matrix``, ``load_index``). When the
main n-gram range starts above 1, a unigram index is stored too, for queries with no known n-gram.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from ctxsim.models.corpus.retrieval import fit_index
from ctxsim.store.chunks import chunk_texts
from ctxsim.store.cost_model import CorpusBytes
from ctxsim.store.errors import InputError
from ctxsim.store.index_files import META_FILE, save_index_matrix
from ctxsim.store.stage import Stage, StageContext, StageParams


class IndexParams(StageParams):
    ngram_min: int = Field(
        2,
        ge=1,
        le=5,
        description=(
            "Smallest n of the TF-IDF n-grams that retrieval matches a sentence to chunks by (the "
            "paper: bigrams, Sec. 3.3)."
        ),
    )
    ngram_max: int = Field(
        2,
        ge=1,
        le=5,
        description=(
            "Largest n of the TF-IDF n-grams (at least ngram_min). Longer n-grams make retrieval "
            "stricter and the index larger."
        ),
    )
    lowercase: bool = Field(
        True,
        description="Lowercase texts before counting n-grams.",
    )
    sublinear_tf: bool = Field(
        True,
        description=(
            "Term frequency as 1 + log(tf) instead of tf, so a phrase repeated in a chunk does not "
            "dominate its TF-IDF vector."
        ),
    )
    min_df: int = Field(
        1,
        ge=1,
        description=(
            "Drop n-grams found in fewer chunks than this; raise it to shrink the index of a large "
            "corpus."
        ),
    )
    max_features: int | None = Field(
        None,
        ge=1,
        description=(
            "Keep only the this-many most frequent n-grams (None: all); bounds the index's memory "
            "on a large corpus."
        ),
    )
    fallback_unigrams: bool = Field(
        True,
        description=(
            "Also index unigrams, used for queries that share no n-gram with any chunk, so that "
            "every query gets candidates."
        ),
    )

    @model_validator(mode="after")
    def _range(self) -> IndexParams:
        if self.ngram_min > self.ngram_max:
            raise ValueError(f"index.ngram_min {self.ngram_min} > index.ngram_max {self.ngram_max}")
        return self


class IndexStage(Stage):
    name = "index"
    version = "1"
    Params = IndexParams
    inputs = ("contexts", "shard")
    run_fields = ()
    cost = CorpusBytes()  # a vectoriser fit on the corpus's chunks
    corpus_memory = True

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: IndexParams = ctx.params
        chunk_ids, texts = chunk_texts(ctx.input("contexts"), ctx.input("shard"))
        if len(texts) == 0:
            raise InputError("index: the contexts artefact has no chunks (empty corpus)")
        common = {"lowercase": p.lowercase, "sublinear_tf": p.sublinear_tf}
        vec, mat = fit_index(
            texts,
            ngram_range=(p.ngram_min, p.ngram_max),
            min_df=p.min_df,
            max_features=p.max_features,
            **common,
        )
        files = ctx.files_dir
        np.save(files / "chunk_ids.npy", chunk_ids)
        meta: dict[str, Any] = {"main": save_index_matrix(files, "", vec, mat), "fallback": None}
        stats: dict[str, Any] = {
            "chunks": len(texts),
            "vocab": mat.shape[1],
            "nnz": int(mat.nnz),
            "empty_chunks": int((np.diff(mat.indptr) == 0).sum()),
        }
        if p.fallback_unigrams and p.ngram_min > 1:
            fvec, fmat = fit_index(texts, ngram_range=(1, 1), **common)
            meta["fallback"] = save_index_matrix(files, "fallback_", fvec, fmat)
            stats["fallback_vocab"] = fmat.shape[1]
            stats["fallback_nnz"] = int(fmat.nnz)
        (files / META_FILE).write_text(json.dumps(meta, indent=2))
        ctx.logger.info(f"index: {len(texts)} chunks, {mat.shape[1]} n-grams, {mat.nnz} non-zeros")
        table = pa.table(
            {"chunk_id": chunk_ids, "nnz": np.diff(mat.indptr).astype(np.int32)},
            schema=pa.schema([("chunk_id", pa.int64()), ("nnz", pa.int32())]),
        )
        return table, stats
