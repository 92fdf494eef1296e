"""models/encoders.py, the one home of sentence encoders: loading by name or path, identity by
content, and a length setting beyond the model's positions refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ctxsim.models.encoders import (
    EncoderInputError,
    declared_limit,
    encode,
    encoder_identity,
    encoder_problem,
    load_encoder,
    model_digest,
    token_counts,
)
from ctxsim.store.errors import InputError
from tests.tasks.tiny_encoder import build_tiny_encoder

TEXTS = [
    f"sentence number {i} says something about {w} and {v}"
    for i in range(60)
    for w, v in [("cells", "blood"), ("rain", "clouds"), ("trains", "tracks")]
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A 2-layer random BERT (64 positions) as a sentence-transformers directory."""
    return build_tiny_encoder(TEXTS, tmp_path_factory.mktemp("encoders") / "tiny-st")


def test_loads_a_local_encoder_and_encodes_unit_vectors(tiny):
    model = load_encoder(str(tiny), 16, "cpu")
    assert model.max_seq_length == 16
    emb = encode(model, TEXTS[:5], 2, block=2)
    assert emb.dtype == np.float32 and emb.shape[0] == 5
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    # blocks change nothing: the same rows as one call
    assert np.allclose(emb, encode(model, TEXTS[:5], 2), atol=1e-6)
    n = token_counts(model, ["a b c", TEXTS[0] * 10])
    assert n.dtype == np.int32 and n[1] > 16 > n[0]  # counted before truncation
    assert load_encoder(str(tiny), None, "cpu").max_seq_length == 32  # the model's own setting


def test_identity_changes_when_a_weight_file_changes(tiny, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny, copy)
    before = encoder_identity(str(copy))
    assert before == {"name": str(copy.resolve()), "digest": model_digest(copy)}
    (copy / "README.md").write_text("a new model card")  # not a model file
    assert encoder_identity(str(copy)) == before
    weights = next(copy.rglob("model.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    after = encoder_identity(str(copy))
    assert after["name"] == before["name"] and after["digest"] != before["digest"]


def test_a_length_above_the_positions_is_refused_in_one_line(tiny):
    """embed.max_seq_length=4096 on MiniLM ended in a 779-line RuntimeError at the first long
    unit: now one line naming the setting, at load (and at config load, see test_embed)."""
    assert declared_limit(str(tiny)) == 64
    load_encoder(str(tiny), 64, "cpu")  # the limit itself is fine
    with pytest.raises(EncoderInputError) as err:
        load_encoder(str(tiny), 4096, "cpu")
    msg = str(err.value)
    assert "\n" not in msg and "embed.max_seq_length=4096" in msg and "64" in msg
    assert isinstance(err.value, InputError)
    with pytest.raises(EncoderInputError, match=r"^pairs\.encoder: .*neither a registered"):
        load_encoder(str(tiny / "nope"), None, "cpu", model_key="pairs.encoder")
    assert encoder_problem("minilm") is None and encoder_problem("no/such") is not None
