"""The adapt plan scaled to this machine: the speed probe times a training step of the recipe's
kind on random weights, once per machine (kept in the plan cache, re-measured when its file is
bad), and the predicted cost follows its ratio to the recipe's figure; off, or with no figure,
the cost model is printed as written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml

from ctxsim.flows.adapt import RECIPE, AdaptRules, adapt_config, machine_speed, sizes
from ctxsim.models.training.speed_probe import probe_step_cpu_s
from tests.conftest import REPO, SAMPLE
from tests.flows.test_adapt import _corpus_words

TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "vocab_size": 2000,
    "max_position_embeddings": 64,
}


@pytest.mark.parametrize("bf16", [False, True])
def test_the_probe_times_a_step_and_leaves_torchs_state_alone(bf16: bool) -> None:
    torch.manual_seed(7)
    state, threads = torch.random.get_rng_state(), torch.get_num_threads()
    step = probe_step_cpu_s(bf16, batch=4, length=16, steps=2, shape=TINY)
    assert step > 0
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.get_num_threads() == threads


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tasks.tiny_encoder import build_tiny_encoder

    return build_tiny_encoder(_corpus_words()[:120], tmp_path_factory.mktemp("st") / "tiny-st")


@pytest.fixture
def probe_calls(monkeypatch, tmp_path) -> list[bool]:
    """The probe replaced by one that takes 2.0 CPU-s a step in bf16 and 6.0 in float32, its
    calls recorded; a fresh plan cache; the probe on."""
    calls: list[bool] = []

    def fake(bf16: bool) -> float:
        calls.append(bf16)
        return 2.0 if bf16 else 6.0

    monkeypatch.setattr("ctxsim.models.training.speed_probe.probe_step_cpu_s", fake)
    monkeypatch.setenv("CTXSIM_PLAN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CTXSIM_SPEED_PROBE", "on")
    return calls


def test_the_speed_is_the_probe_over_the_recipes_figure_measured_once(probe_calls) -> None:
    rules = AdaptRules(probe_step_cpu_s_bf16=1.0, probe_step_cpu_s_float32=4.0)
    assert machine_speed(rules, True)[0] == pytest.approx(2.0)
    speed, note = machine_speed(rules, False)
    assert speed == pytest.approx(1.5) and "float32 step 6.00 CPU-s against 4.00" in note
    assert machine_speed(rules, True)[0] == pytest.approx(2.0)
    assert probe_calls == [True, False]  # the second bf16 plan read the cache
    cached = sorted(
        (Path(os.environ["CTXSIM_PLAN_CACHE"]) / "units").glob("*/speed-probe-bf16*.json")
    )
    assert len(cached) == 1
    cached[0].write_text('{"step_cpu_s": 9.0}')  # its checksum no longer matches: measured again
    assert machine_speed(rules, True)[0] == pytest.approx(2.0)
    assert probe_calls == [True, False, True]


def test_off_or_without_a_figure_the_cost_model_is_as_written(probe_calls, monkeypatch) -> None:
    assert machine_speed(AdaptRules(), True) == (
        1.0,
        "not scaled to this machine: the recipe names no speed probe figure",
    )
    monkeypatch.setenv("CTXSIM_SPEED_PROBE", "off")
    speed, note = machine_speed(AdaptRules(probe_step_cpu_s_bf16=1.0), True)
    assert speed == 1.0 and "CTXSIM_SPEED_PROBE is off" in note
    assert probe_calls == []


def test_a_failing_probe_leaves_the_plan_unscaled_and_says_why(probe_calls, monkeypatch) -> None:
    def broken(bf16: bool) -> float:
        raise RuntimeError("no fused AdamW on this build")

    monkeypatch.setattr("ctxsim.models.training.speed_probe.probe_step_cpu_s", broken)
    speed, note = machine_speed(AdaptRules(probe_step_cpu_s_bf16=1.0), True)
    assert speed == 1.0 and "speed probe failed (no fused AdamW on this build)" in note


def test_the_plan_prices_every_part_at_the_machines_speed(probe_calls, tmp_path, tiny_st) -> None:
    """Fixed part, steps and the printed figure all scale by the probe's ratio, also after a
    --set reprices the trainings; a budget is held against the scaled cost."""
    raw = yaml.safe_load((REPO / RECIPE).read_text())
    raw["adapt"].update(probe_step_cpu_s_bf16=1.0, probe_step_cpu_s_float32=3.0)  # x2 either way
    scaled = tmp_path / "scaled.yaml"
    scaled.write_text(yaml.safe_dump(raw))
    raw["adapt"].update(probe_step_cpu_s_bf16=0.0, probe_step_cpu_s_float32=0.0)
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(raw))
    args = ([str(SAMPLE)], str(tiny_st), None, None, str(tmp_path / "r"))
    base, fast = adapt_config(*args, recipe=plain), adapt_config(*args, recipe=scaled)
    assert base.speed == 1.0 and fast.speed == pytest.approx(2.0)
    assert fast.cpu_s == pytest.approx(2.0 * base.cpu_s)
    assert fast.fixed_cpu_s == pytest.approx(2.0 * base.fixed_cpu_s)
    assert "x2.00" in "\n".join(fast.lines()) and "not scaled" in "\n".join(base.lines())
    for plan in (base, fast):
        plan.override(["train.max_steps=10"])
    assert fast.cpu_s == pytest.approx(2.0 * base.cpu_s)
    rules = AdaptRules()
    full = sizes(2_600_000, rules, 32, 4, None)
    assert sizes(2_600_000, rules, 32, 4, full[3] / 3600)[0] == full[0]
    slow = sizes(2_600_000, rules, 32, 4, full[3] / 3600, speed=1.5)
    assert slow[0] < full[0] and slow[3] <= full[3] + 1.5 * rules.cpu_s_per_step
