"""The files of an `index` artefact: a fitted TF-IDF vectoriser and its chunk matrix, stored
without pickle (the vocabulary as JSON, idf and chunk ids as ``.npy``, the matrix as scipy
``.npz``; ``index.json`` holds each vectoriser's settings). Written by the `index` stage, read by
`retrieve` and by anything that retrieves for outside sentences."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ctxsim.models.corpus.retrieval import vectorizer_from_state, vectorizer_state
from ctxsim.store.artefacts import StoreError

if TYPE_CHECKING:
    from sklearn.feature_extraction.text import TfidfVectorizer

META_FILE = "index.json"


def save_index_matrix(
    files: Path, prefix: str, vec: TfidfVectorizer, mat: sp.csr_matrix
) -> dict[str, Any]:
    """One vectoriser's vocabulary and idf and its chunk matrix under ``files`` (names start
    with ``prefix``); returns its settings for ``index.json``."""
    settings, terms, idf = vectorizer_state(vec)
    (files / f"{prefix}vocab.json").write_text(json.dumps(terms, ensure_ascii=False))
    np.save(files / f"{prefix}idf.npy", idf)
    sp.save_npz(files / f"{prefix}chunks.npz", mat, compressed=False)
    return settings


def load_index(
    files: Path,
) -> tuple[
    np.ndarray, TfidfVectorizer, sp.csr_matrix, TfidfVectorizer | None, sp.csr_matrix | None
]:
    """(chunk ids, main vectoriser, main matrix, fallback vectoriser, fallback matrix) of the
    index artefact whose files are ``files``; a clear error when they are not one."""
    meta_path = files / META_FILE
    if not meta_path.exists():
        raise FileNotFoundError(f"{meta_path} is missing: not an index artefact")
    meta = json.loads(meta_path.read_text())
    chunk_ids = np.load(files / "chunk_ids.npy", allow_pickle=False)

    def one(prefix: str, settings: dict[str, Any]) -> tuple[TfidfVectorizer, sp.csr_matrix]:
        terms = json.loads((files / f"{prefix}vocab.json").read_text())
        idf = np.load(files / f"{prefix}idf.npy", allow_pickle=False)
        mat = sp.csr_matrix(sp.load_npz(files / f"{prefix}chunks.npz"), dtype=np.float32)
        if mat.shape != (len(chunk_ids), len(terms)):
            raise StoreError(
                f"{files}/{prefix}chunks.npz has shape {mat.shape}, expected "
                f"({len(chunk_ids)}, {len(terms)})"
            )
        return vectorizer_from_state(settings, terms, idf), mat

    vec, mat = one("", meta["main"])
    fb_vec = fb_mat = None
    if meta.get("fallback"):
        fb_vec, fb_mat = one("fallback_", meta["fallback"])
    return chunk_ids, vec, mat, fb_vec, fb_mat
