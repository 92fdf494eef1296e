"""The objective registry (models/training/objectives/): adding an objective is one class in one
file,
after which the config accepts it and the `train` stage trains with it; the config, the stage
and the docs read the same registry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.models.training.tiny_training import PAIRS, cosines, train_on_pairs


@pytest.fixture
def inverse_objective():
    """A tiny extra objective: the label artefact's pairs with their labels' order reversed."""
    from ctxsim.models.training.objectives import OBJECTIVES, LabelledObjective, register

    @register
    class Inverse(LabelledObjective):
        name = "test-inverse"

        def raw_labels(self, pairs, oc):
            return -np.asarray(pairs.labels)

    yield Inverse
    del OBJECTIVES["test-inverse"]


def test_a_registered_objective_is_trained_by_the_train_stage(tmp_path, inverse_objective):
    from scipy.stats import spearmanr

    from ctxsim.tasks.train import TrainParams, TrainStage

    params = TrainParams(objective="test-inverse")
    assert params.model_dump()["objective"] == "test-inverse"  # in the fingerprint
    assert TrainStage().optional_inputs_for(params) == ()
    art = train_on_pairs(tmp_path, objective="test-inverse", loss="cosent", label_scale="none")
    info = json.loads((art.files_dir / "metrics.json").read_text())
    assert info["objective"] == "test-inverse" and info["steps"] == 12
    assert info["n_train_examples"] == len(PAIRS) and info["loss"] == "cosent"
    s1, s2, lab = (list(c) for c in zip(*PAIRS, strict=True))
    before = spearmanr(cosines(art.files_dir / "backbone", s1, s2), lab)[0]
    after = spearmanr(cosines(art.files_dir / "model", s1, s2), lab)[0]
    assert after < before - 0.1, (before, after)  # it learnt the reversed order


def test_a_name_registered_twice_is_refused(inverse_objective):
    from ctxsim.models.training.objectives import LabelledObjective, register

    class Other(LabelledObjective):
        name = "test-inverse"

    with pytest.raises(ValueError, match="registered twice"):
        register(Other)


def test_an_unknown_objective_names_the_known_ones():
    from ctxsim.models.training.objectives import OBJECTIVES, get_objective
    from ctxsim.tasks.train import TrainParams

    with pytest.raises(ValueError, match="bm25") as e:
        TrainParams(objective="bm25")
    assert all(name in str(e.value) for name in OBJECTIVES)
    with pytest.raises(ValueError, match="unknown objective 'bm25'"):
        get_objective("bm25")


def test_the_config_the_stage_and_the_docs_read_the_registry():
    from ctxsim.models.training.objectives import OBJECTIVES
    from ctxsim.tasks.train import TrainParams, TrainStage

    builtin = [
        "ctxsim",
        "simcse",
        "tfidf",
        "tsdae",
        "joint",
        "context",
        "ctxsim-context",
        "teacher",
        "none",
    ]
    assert set(builtin) <= set(OBJECTIVES)
    note = TrainParams.model_fields["objective"].description
    assert all(name in note for name in builtin)
    # `pairs`: what an objective that reads no labels trains from instead of `label`
    assert TrainStage.optional_inputs == ("pairs", "queries", "shard")
    assert {n for n, o in OBJECTIVES.items() if not o.needs_labels} == {"context"}
    needs = {n: o.inputs for n, o in OBJECTIVES.items() if o.inputs}
    assert needs == {"context": ("queries", "shard"), "ctxsim-context": ("queries", "shard")}
    assert {n for n, o in OBJECTIVES.items() if o.eq4_labels} == {
        "ctxsim",
        "joint",
        "ctxsim-context",
    }
    assert {n for n, o in OBJECTIVES.items() if o.computes_labels} == {"tfidf", "teacher"}
    docs = (Path(__file__).parents[3] / "docs" / "evaluation.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `train.objective`"))
    assert all(f"`{name}`" in row for name in builtin)


def test_every_module_of_the_package_is_imported_and_a_source_of_the_train_stage():
    """A new objective file registers itself (no import line to add) and an edit to it fires
    the stage-version guard of `train`."""
    import sys

    from ctxsim.models.training import objectives
    from ctxsim.tasks.train import TrainStage

    folder = Path(objectives.__file__).parent
    files = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert [m.rsplit(".", 1)[1] for m in objectives.MODULES] == files
    assert all(m in sys.modules for m in objectives.MODULES)
    assert TrainStage.sources == objectives.MODULES
