"""Stage facts live on the Stage classes (store/stage.py); lists of stage names are derived from
`STAGES`, and prefect.yaml deploys exactly the stages there are."""

from __future__ import annotations

from pathlib import Path

import yaml

from ctxsim.tasks import STAGES, load_stage, upstream_of

REPO = Path(__file__).resolve().parents[2]


def _with(attr: str, value: object = True) -> list[str]:
    return [n for n in STAGES if getattr(load_stage(n), attr) == value]


def test_prefect_yaml_deploys_exactly_the_stages_in_order() -> None:
    cfg = yaml.safe_load((REPO / "prefect.yaml").read_text())
    deps = [d for d in cfg["deployments"] if "stage" in d.get("tags", [])]
    assert [d["name"] for d in deps] == list(STAGES)
    for d in deps:
        assert d["parameters"]["stage"] == d["name"]
        config = yaml.safe_load((REPO / d["parameters"]["config"]).read_text())
        assert d["name"] in config, f"{d['parameters']['config']} has no {d['name']} section"
    others = [d["name"] for d in cfg["deployments"] if "stage" not in d.get("tags", [])]
    assert others == ["nightly"]


def test_stage_facts_give_the_lists_they_replaced() -> None:
    """The hand-kept lists of flows/plan.py, product/explain.py and the benches, as they were
    before the facts moved onto the stages: plan, explain and the benches behave the same."""
    from bench.bench_pipeline import per_query_stages
    from bench.common import label_and_pair_stages, stages_to_label
    from ctxsim.flows.explain import new_query_stages

    assert _with("cost_basis", "corpus") == ["shard", "contexts", "index", "embed"]
    assert _with("cost_basis", "constant") == ["evaluate"]
    fit = ["retrieve", "screen", "select", "pairs", "score", "label", "train"]
    assert _with("cost_basis", "fit") == fit
    assert _with("cost_basis", "scaled") == ["queries", "discriminator", "generator", "gencontexts"]
    caps = {n: load_stage(n).rows_cap for n in STAGES if load_stage(n).rows_cap}
    assert caps == {"retrieve": "top_k", "screen": "keep", "select": "max_size"}
    assert _with("model_artefact") == ["discriminator", "generator", "train"]
    memory = ["shard", "contexts", "index", "retrieve", "discriminator", "screen"]  # embed: a piece
    assert _with("corpus_memory") == memory
    assert new_query_stages() == ["queries", "retrieve", "screen", "select"]
    per_query = ["queries", "retrieve", "screen", "gencontexts", "select", "pairs", "score"]
    assert per_query_stages() == (*per_query, "label")
    assert stages_to_label() == tuple(n for n in STAGES if n not in ("train", "evaluate"))
    labels, pairs = label_and_pair_stages()
    assert labels == ("embed", "generator", "gencontexts", "score", "label")
    assert sorted(pairs) == sorted(
        ["shard", "contexts", "queries", "index", "retrieve", "discriminator", "screen"]
        + ["select", "pairs"]
    )


def test_upstream_of_follows_optional_inputs() -> None:
    assert upstream_of("shard") == set()
    assert upstream_of("select") == {
        "shard",
        "contexts",
        "queries",
        "index",
        "retrieve",
        "discriminator",
        "screen",
        "generator",
        "gencontexts",
    }
    assert upstream_of("evaluate") >= {"train", "label", "score", "select", "embed"}
    # pairs reads select only to mine pairs that share a context; label reads the encoder
    # route's embed or the LM route's select and score, by label.contextual
    assert upstream_of("pairs") >= {"select", "queries", "shard"}


def test_optional_inputs_follow_the_route() -> None:
    from ctxsim.tasks.label import LabelParams
    from ctxsim.tasks.pairs import PairsParams

    pairs, label = load_stage("pairs"), load_stage("label")
    assert pairs.inputs == ("queries", "shard")
    assert pairs.optional_inputs_for(PairsParams()) == ("select",)
    assert pairs.optional_inputs_for(PairsParams(ratio_shared=0)) == ()
    assert label.inputs == ("queries", "pairs")
    lm = set(label.optional_inputs_for(LabelParams()))
    assert {"select", "score"} <= lm and "embed" not in lm
    assert label.optional_inputs_for(LabelParams(contextual="encoder")) == ("embed",)


def test_every_added_key_defaults_to_the_value_it_is_left_out_at() -> None:
    """A key added after a stage's artefacts exist is left out of the dump at its added default;
    whatever reads the dump back gets the field's default. The two must be one value, or a run
    that sets the key to the added default plans one fingerprint and writes under another (a
    finished stage then cannot publish)."""
    for name in STAGES:
        params = load_stage(name).Params
        for key, added in params.added_defaults.items():
            field = params.model_fields[key]
            assert field.get_default(call_default_factory=True) == added, f"{name}.{key}"
