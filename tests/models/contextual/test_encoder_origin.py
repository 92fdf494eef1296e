"""The encoder route's Origin: the closed form against the profiles written out, and its checks."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.models.contextual.encoder_origin import (
    ScatterStats,
    adapted_embeddings,
    closed_form_similarity,
    explicit_profile_similarity,
    psd_sqrt,
    softmax_profile_similarity,
    topk_union_similarity,
)


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    contexts = rng.normal(size=(300, 16)) + 0.3  # a common direction, as real encoders have
    e1, e2 = rng.normal(size=(40, 16)), rng.normal(size=(40, 16))
    return contexts, e1, e2


@pytest.mark.parametrize("centred", [True, False])
def test_closed_form_equals_the_explicit_profiles(data, centred: bool) -> None:
    contexts, e1, e2 = data
    m = ScatterStats.of(contexts).matrix(centred=centred)
    got = closed_form_similarity(e1, e2, m)
    want = explicit_profile_similarity(e1, e2, contexts, centred=centred)
    np.testing.assert_allclose(got, want, atol=1e-10)
    # and the adapted encoder's cosine is the same number: no corpus needed at inference
    a, b = adapted_embeddings(e1, m), adapted_embeddings(e2, m)
    np.testing.assert_allclose((a * b).sum(axis=1), want, atol=1e-10)


def test_shards_sum_to_the_whole(data) -> None:
    contexts = data[0]
    parts = [ScatterStats.of(contexts[i : i + 70]) for i in range(0, len(contexts), 70)]
    merged = parts[0]
    for p in parts[1:]:
        merged = merged.merge(p)
    whole = ScatterStats.of(contexts)
    assert merged.n == whole.n == len(contexts)
    np.testing.assert_allclose(merged.matrix(), whole.matrix(), atol=1e-12)
    with pytest.raises(ValueError, match="dimension 16 and 8"):
        merged.merge(ScatterStats.empty(8))


def test_psd_sqrt_squares_back(data) -> None:
    m = ScatterStats.of(data[0]).matrix()
    r = psd_sqrt(m)
    np.testing.assert_allclose(r @ r, m, atol=1e-12)
    np.testing.assert_allclose(r, r.T)


def test_log_softmax_centred_is_the_closed_form_and_prob_is_not(data) -> None:
    contexts, e1, e2 = data
    closed = closed_form_similarity(e1, e2, ScatterStats.of(contexts).matrix())
    log_p = softmax_profile_similarity(e1, e2, contexts, tau=0.05, space="log", block=7)
    np.testing.assert_allclose(log_p, closed, atol=1e-9)
    sharp = softmax_profile_similarity(e1, e2, contexts, tau=0.05, space="prob", block=7)
    assert np.abs(sharp - closed).max() > 0.05  # non-linear: a different similarity
    flat = softmax_profile_similarity(e1, e2, contexts, tau=1e4, space="prob")
    np.testing.assert_allclose(flat, closed, atol=1e-3)  # a large τ linearises exp
    with pytest.raises(ValueError, match="temperature"):
        softmax_profile_similarity(e1, e2, contexts, tau=0.0)


def test_topk_union_of_every_context_is_the_full_profile(data) -> None:
    contexts, e1, e2 = data
    full = topk_union_similarity(e1, e2, contexts, k=len(contexts))
    np.testing.assert_allclose(full, explicit_profile_similarity(e1, e2, contexts), atol=1e-9)
    small = topk_union_similarity(e1[:5], e2[:5], contexts, k=4)
    assert small.shape == (5,) and np.isfinite(small).all()
    # the same search through IVF (approximate) still returns k ids a sentence
    ivf = topk_union_similarity(e1[:5], e2[:5], contexts, k=4, exact_max=10)
    assert np.isfinite(ivf).all()


def test_saved_scatter_round_trips_and_bad_files_are_refused(data, tmp_path) -> None:
    s = ScatterStats.of(data[0])
    path = tmp_path / "scatter.npz"
    s.save(path)
    back = ScatterStats.load(path)
    assert back.n == s.n
    np.testing.assert_array_equal(back.outer, s.outer)
    bad = ScatterStats(s.n, s.total, s.outer.copy())
    bad.outer[0, 0] = np.nan
    bad.save(tmp_path / "nan.npz")
    with pytest.raises(ValueError, match=r"nan\.npz: the scatter matrix is not finite"):
        ScatterStats.load(tmp_path / "nan.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"junk\.npz: not a scatter file"):
        ScatterStats.load(tmp_path / "junk.npz")
    with pytest.raises(ValueError, match="no contexts"):
        ScatterStats.empty(4).matrix()
