"""Performance knobs (inference batch sizes, memory bounds) change only speed or memory, so they
stay out of fingerprints: tuning one for a machine (docs/operations.md) recomputes nothing, while
a real parameter still gives a new fingerprint."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.stage import RunParams, StageParams, fingerprint_params, is_knob, resolve_stage
from ctxsim.tasks import STAGES, load_stage

#: the knobs the docs promise; a new one is added here and declared with store.stage.knob
EXPECTED = {
    "retrieve": {"memory_mb", "threads"},
    "screen": {"batch_size", "score_batch"},
    "pairs": {"encode_batch_size"},
    "embed": {"batch_size"},
    "generator": {"token_budget"},
    "score": {"token_budget", "max_batch", "max_logit_elems", "disc_batch", "compile_blocks"},
    "evaluate": {"batch_size", "cache"},
    "label": {"lm.block_pairs"},
    "gencontexts": {"batch_size"},
}


def _knobs(name: str) -> set[str]:
    """The stage's knobs, those of its own sub-sections as ``section.key`` (``label.lm``)."""
    out = set()
    for k, f in load_stage(name).Params.model_fields.items():
        if is_knob(f):
            out.add(k)
        sub = f.default_factory() if f.default_factory is not None else f.default
        if isinstance(sub, BaseModel) and not isinstance(sub, StageParams):
            out |= {f"{k}.{n}" for n, g in type(sub).model_fields.items() if is_knob(g)}
    return out


def _field(name: str, key: str) -> Any:
    """The field of ``key`` (``section.key`` inside a sub-section)."""
    fields = load_stage(name).Params.model_fields
    if "." in key:
        section, key = key.split(".")
        fields = fields[section].default_factory().model_fields
    return fields[key]


def _nested(key: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``a.b``, ``{key: value}`` otherwise."""
    section, _, sub = key.partition(".")
    return {section: {sub: value}} if sub else {key: value}


def _fp(name: str, store: ArtefactStore, **params: Any) -> str:
    stage = load_stage(name)
    return resolve_stage(stage, stage.Params(**params), RunParams(), store, {}).fingerprint


@pytest.fixture(scope="module")
def tiny_scorer(tmp_path_factory) -> str:
    """embed fingerprints its scorer by content: a tiny local one, so no packaged weights are
    needed (CI installs none)."""
    from tests.tasks.tiny_encoder import build_tiny_encoder

    texts = ["a tiny corpus of words", "for a tiny scorer", "and nothing else"]
    return str(build_tiny_encoder(texts, tmp_path_factory.mktemp("enc") / "tiny-st"))


def test_the_declared_knobs_are_the_documented_ones() -> None:
    found = {name: _knobs(name) for name in STAGES if _knobs(name)}
    assert found == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_knob_keeps_the_fingerprint_and_a_real_parameter_does_not(
    tmp_path, name, tiny_scorer
) -> None:
    store = ArtefactStore(tmp_path)
    given = {"model": tiny_scorer} if name == "embed" else {}
    base = _fp(name, store, **given)
    for key in EXPECTED[name]:
        d = _field(name, key).default
        other = (not d) if isinstance(d, bool) else d * 2
        assert _fp(name, store, **given, **_nested(key, other)) == base, key
    real = {
        "retrieve": {"top_k": 7},
        "screen": {"keep": 7},
        "pairs": {"knn_k": 7},
        "embed": {"max_seq_length": 32},
        "generator": {"train_steps": 7},
        "score": {"lambda_fwd": 0.5},
        "evaluate": {"max_seq_length": 32},
        "label": {"lm": {"similarity": "pearson"}},
        "gencontexts": {"top_k": 7},
    }[name]
    assert _fp(name, store, **given, **real) != base


def test_knobs_of_a_nested_section_stay_out_too(tmp_path) -> None:
    """`select` with `order_by: score` carries a `score` section: its knobs are knobs there too."""
    from ctxsim.scores.eq3 import ScoreParams

    store = ArtefactStore(tmp_path)

    def fp(**score: Any) -> str:
        return _fp("select", store, order_by="score", scoring=ScoreParams(**score))

    assert fp(token_budget=1 << 16, disc_batch=4) == fp()
    assert fp(lambda_left=0.0) != fp()


def test_a_knob_still_reaches_the_shard_workers() -> None:
    """Out of the fingerprint, not out of the dump: shard tasks rebuild their params from it."""
    stage = load_stage("score")
    params = stage.Params(token_budget=1 << 16)
    assert params.model_dump(mode="json")["token_budget"] == 1 << 16
    assert "token_budget" not in fingerprint_params(params)
    assert stage.Params(**params.model_dump(mode="json")).token_budget == 1 << 16
