"""The contextual-model seam of the `label` stage: a third model is one registered class, the
settings of one model are refused under another at config load, the flat keys of before are
read with a warning, and the new layout kept every label fingerprint."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import yaml

from ctxsim.flows.config import ConfigError, load_config
from ctxsim.store.artefacts import fingerprint
from ctxsim.store.stage import RunParams, fingerprint_params, resolve_stage, run_stage_locally
from ctxsim.tasks.label import LabelParams, LabelStage
from ctxsim.tasks.label.contextual import (
    CONTEXTUAL,
    ContextualLabels,
    ContextualModel,
    ContextualSettings,
    PairsToLabel,
    register,
)
from tests.conftest import REPO
from tests.tasks.test_label import _fake_world


def _words(text: str) -> set[str]:
    return set(text.lower().split())


class JaccardContextual(ContextualModel):
    """A toy contextual model: the Jaccard of the two sentences' words, no contexts at all."""

    name = "jaccard-test"
    inputs = ("pairs",)
    n_ctx = "0: no contexts"

    def labels(self, ctx, p, pairs: PairsToLabel) -> ContextualLabels:
        lab = [
            len(_words(pairs.text_of[a]) & _words(pairs.text_of[b]))
            / len(_words(pairs.text_of[a]) | _words(pairs.text_of[b]))
            for a, b in zip(pairs.s1.tolist(), pairs.s2.tolist(), strict=True)
        ]
        zeros = np.zeros(len(pairs), np.int64)
        return ContextualLabels(
            columns={"label": np.asarray(lab)},
            n_ctx1=zeros,
            n_ctx2=zeros,
            stats={"jaccard_pairs": len(pairs)},
        )


@pytest.fixture
def jaccard():
    register(JaccardContextual)
    yield CONTEXTUAL["jaccard-test"]
    CONTEXTUAL.pop("jaccard-test")


def test_a_third_contextual_model_is_one_registered_class(tmp_path, jaccard) -> None:
    store, arts, _ = _fake_world(tmp_path, given=True)
    stage = LabelStage()
    p = LabelParams(contextual="jaccard-test")
    assert stage.optional_inputs_for(p) == ()  # reads neither select nor score
    up = {k: arts[k] for k in ("queries", "pairs")}
    art = run_stage_locally(resolve_stage(stage, p, RunParams(), store, up))[0]
    t = art.read_table()
    texts = dict(zip(t.column("s1_id").to_pylist(), t.column("s1").to_pylist(), strict=True))
    texts |= dict(zip(t.column("s2_id").to_pylist(), t.column("s2").to_pylist(), strict=True))
    want = [
        len(_words(texts[a]) & _words(texts[b])) / len(_words(texts[a]) | _words(texts[b]))
        for a, b in zip(t.column("s1_id").to_pylist(), t.column("s2_id").to_pylist(), strict=True)
    ]
    assert np.allclose(t.column("label").to_numpy(), want, atol=1e-6)
    for col in ("label_disc", "label_fwd", "label_left", "label_right"):  # not its columns
        assert np.isnan(t.column(col).to_numpy(zero_copy_only=False)).all(), col
    assert (t.column("n_ctx1").to_numpy() == 0).all() and art.stats["jaccard_pairs"] == 28
    assert art.stats["n_pairs.STSb.dev"] == 14  # the stage's Origin report, for any model
    assert set(art.manifest["upstream"]) == {"queries", "pairs"}
    assert fingerprint_params(p)["contextual"] == "jaccard-test"


def test_a_model_answering_with_columns_it_did_not_declare_is_a_bug(tmp_path, jaccard) -> None:
    store, arts, _ = _fake_world(tmp_path, given=False)
    up = {k: arts[k] for k in ("queries", "pairs")}
    jaccard.columns = ("label", "label_fwd")
    try:
        with pytest.raises(TypeError, match="declares"):
            p = LabelParams(contextual="jaccard-test")
            run_stage_locally(resolve_stage(LabelStage(), p, RunParams(), store, up))
    finally:
        jaccard.columns = ("label",)


class ShortWordsSettings(ContextualSettings):
    """The toy's settings: words shorter than this are ignored."""

    min_chars: int = 1


class ShortWordsJaccard(JaccardContextual):
    """A toy contextual model with settings of its own, in the same file as the model."""

    name = "jaccard-settings-test"
    settings = ShortWordsSettings

    def labels(self, ctx, settings: ShortWordsSettings, pairs: PairsToLabel) -> ContextualLabels:
        self.seen = settings
        return super().labels(ctx, settings, pairs)


def test_a_contextual_model_s_settings_are_its_own_class_and_a_sub_section(tmp_path) -> None:
    """A model with settings is still one file: its settings class becomes the sub-section
    ``label.<name>``, handed to its ``labels``; the other routes' sub-sections stay refused."""
    from pydantic import ValidationError

    from ctxsim.tasks.label.params import label_params_class

    register(ShortWordsJaccard)
    try:
        params_cls = label_params_class()
        name = "jaccard-settings-test"
        p = params_cls.model_validate({"contextual": name, name: {"min_chars": 3}})
        assert p.settings() == ShortWordsSettings(min_chars=3)
        assert name in params_cls.model_fields and "lm" in params_cls.model_fields
        with pytest.raises(ValidationError, match="label.encoder: set"):
            params_cls.model_validate({"contextual": name, "encoder": {"form": "softmax"}})
        with pytest.raises(ValidationError, match=f"label.{name}: set"):
            params_cls.model_validate({"contextual": "lm", name: {"min_chars": 3}})
        with pytest.raises(ValidationError, match="min_chars"):
            params_cls.model_validate({"contextual": name, name: {"min_chars": "many"}})
        store, arts, _ = _fake_world(tmp_path, given=False)
        up = {k: arts[k] for k in ("queries", "pairs")}
        run_stage_locally(resolve_stage(LabelStage(), p, RunParams(), store, up))
        assert CONTEXTUAL[name].seen == ShortWordsSettings(min_chars=3)
    finally:
        CONTEXTUAL.pop("jaccard-settings-test", None)


def _load(tmp_path, label: dict) -> LabelParams:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"label": label}))
    return load_config(cfg).stages["label"]


@pytest.mark.parametrize(
    ("label", "wrong"),
    [
        ({"contextual": "encoder", "lm": {"similarity": "pearson"}}, "lm"),
        ({"contextual": "encoder", "similarity": "pearson"}, "lm"),  # a flat LM key
        ({"encoder": {"form": "softmax"}}, "encoder"),
        ({"contextual": "lm", "tau": 0.1}, "encoder"),  # today: no effect, no warning
    ],
)
def test_settings_of_another_contextual_model_are_refused_at_load(tmp_path, label, wrong):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, label)
    msg = str(e.value)
    route = label.get("contextual", "lm")
    assert "\n" not in msg and "cfg.yaml" in msg
    assert f"label.{wrong}: set, but label.contextual is {route!r}" in msg


def test_an_unknown_contextual_model_names_the_known_ones(tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown contextual model 'lmm': one of .*lm") as e:
        _load(tmp_path, {"contextual": "lmm"})
    assert "\n" not in str(e.value)


def test_flat_keys_of_before_are_read_with_a_warning(tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        p = _load(tmp_path, {"contextual": "encoder", "encoder_form": "topk", "k": 4})
    assert p.encoder.form == "topk" and p.encoder.k == 4
    assert "label.encoder_form is deprecated: write it as label.encoder.form" in caplog.text
    new = LabelParams(contextual="encoder", encoder={"form": "topk", "k": 4})
    assert fingerprint_params(p) == fingerprint_params(new)
    with pytest.raises(ConfigError, match="both set"):
        _load(tmp_path, {"contextual": "encoder", "tau": 0.1, "encoder": {"tau": 0.2}})


def test_the_shipped_configs_use_the_sub_sections(caplog) -> None:
    """No config of configs/ sets a flat key of before (each would log a deprecation)."""
    with caplog.at_level(logging.WARNING):
        for path in sorted((REPO / "configs").glob("*.yaml")):
            LabelParams(**(yaml.safe_load(path.read_text()).get("label") or {}))
    assert "deprecated" not in caplog.text


#: label fingerprints of params sets, computed by the code before the sub-sections (flat keys,
#: commit 7eea9f4): ``fingerprint(fingerprint_params(LabelParams(**flat)))`` for the flat form
#: in the comment; the same settings in the new layout must hash the same
PINNED = [
    ({}, "82d4134df33c3390"),  # LM route, defaults
    # {"similarity": "pearson", "ablations": False, "block_pairs": 7}
    ({"lm": {"similarity": "pearson", "ablations": False, "block_pairs": 7}}, "b76a874982975549"),
    ({"contextual": "encoder"}, "53991e2b310135c9"),  # configs/medquad.yaml's form
    # {"contextual": "encoder", "encoder_form": "softmax", "tau": 0.1}
    ({"contextual": "encoder", "encoder": {"form": "softmax", "tau": 0.1}}, "678ccea349821a90"),
    # {"contextual": "encoder", "encoder_form": "topk", "k": 4, "centred": False}
    (
        {"contextual": "encoder", "encoder": {"form": "topk", "k": 4, "centred": False}},
        "6af9b1c9212cbb17",
    ),
]


@pytest.mark.parametrize(("params", "hexdigest"), PINNED)
def test_the_sub_sections_keep_the_label_fingerprints(params, hexdigest) -> None:
    p = LabelParams(**params)
    assert fingerprint(fingerprint_params(p)) == hexdigest
    assert LabelParams(**p.model_dump(mode="json")) == p  # a shard worker reads the dump back
