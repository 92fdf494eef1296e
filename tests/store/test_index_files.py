"""The index artefact's files: what the `index` stage writes, `retrieve` reads back the same,
and files that are not an index are refused naming the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from ctxsim.models.corpus.retrieval import fit_index
from ctxsim.store.artefacts import StoreError
from ctxsim.store.index_files import META_FILE, load_index, save_index_matrix

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "the cat ran after the dog"]


def _write(files, fallback: bool) -> None:
    vec, mat = fit_index(TEXTS, ngram_range=(2, 2), lowercase=True, sublinear_tf=True)
    np.save(files / "chunk_ids.npy", np.array([7, 8, 9], np.int64))
    meta = {"main": save_index_matrix(files, "", vec, mat), "fallback": None}
    if fallback:
        fvec, fmat = fit_index(TEXTS, ngram_range=(1, 1), lowercase=True, sublinear_tf=True)
        meta["fallback"] = save_index_matrix(files, "fallback_", fvec, fmat)
    (files / META_FILE).write_text(json.dumps(meta))


@pytest.mark.parametrize("fallback", [False, True])
def test_saved_index_loads_back_the_same_vectors(tmp_path, fallback):
    _write(tmp_path, fallback)
    vec, mat = fit_index(TEXTS, ngram_range=(2, 2), lowercase=True, sublinear_tf=True)
    chunk_ids, lvec, lmat, fvec, fmat = load_index(tmp_path)
    assert chunk_ids.tolist() == [7, 8, 9]
    assert np.allclose(lmat.toarray(), mat.toarray()) and lmat.dtype == np.float32
    query = ["the cat ran in the park"]
    assert np.allclose(lvec.transform(query).toarray(), vec.transform(query).toarray())
    assert (fvec is None) == (not fallback) and (fmat is None) == (not fallback)
    assert not list(tmp_path.glob("*.pkl"))


def test_not_an_index_is_refused_naming_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=META_FILE):
        load_index(tmp_path)
    _write(tmp_path, False)
    bad = sp.csr_matrix(np.ones((2, 3), np.float32))  # two chunks, the ids name three
    sp.save_npz(tmp_path / "chunks.npz", bad, compressed=False)
    with pytest.raises(StoreError, match="chunks.npz has shape"):  # one line in the CLI
        load_index(tmp_path)
