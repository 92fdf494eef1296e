"""Shared fixtures of the scores tests: the tiny tokenizer and a generator trained once."""

from __future__ import annotations

import pytest

from ctxsim.models.contextual.generator import train_wordpiece_tokenizer
from tests.models.contextual.tiny_scoring import WORDS
from tests.scores.score_stage_helpers import tiny_generator_params


@pytest.fixture(scope="package")
def tok():
    return train_wordpiece_tokenizer([], vocab=WORDS)


@pytest.fixture(scope="package")
def generator_art(spine, tmp_path_factory):
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.generator import GeneratorStage

    root = tmp_path_factory.mktemp("gen")
    params = tiny_generator_params()
    up = {k: spine[k] for k in ("shard", "contexts")}
    run = RunParams(root=str(root), torch_threads=1)
    plan = resolve_stage(GeneratorStage(), params, run, ArtefactStore(root), up)
    art, _ = run_stage_locally(plan)
    return art, plan
