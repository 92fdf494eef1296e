"""A stage added by docs/architecture.md's checklist ("Adding a stage") is planned: `ctxsim plan`
pilots it and prices it by the cost model it declares, and no planner module names a stage."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pydantic import Field

from ctxsim.store.cost_model import PerQueryRows
from ctxsim.store.stage import Stage, StageContext, StageParams
from tests.conftest import REPO, SAMPLE


class WordsParams(StageParams):
    """Checklist step 1: every tunable number a field with a default and a description."""

    min_chars: int = Field(1, ge=1, description="words shorter than this are not counted")


class WordsStage(Stage):
    """Words per query (a stage sharded like the queries: checklist step 4)."""

    name = "words"
    version = "1"
    Params = WordsParams
    inputs = ("queries",)
    shard_by = "queries"
    run_fields = ()
    cost = PerQueryRows()  # checklist step 8: its cost model (one row per query)
    per_query = True

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        rows = ctx.input_shard("queries", shard, ["query_id", "text"])
        words = [
            sum(len(w) >= ctx.params.min_chars for w in t.split())
            for t in rows.column("text").to_pylist()
        ]
        table = pa.table({"query_id": rows.column("query_id"), "words": pa.array(words)})
        return table, {"words": int(pc.sum(table.column("words")).as_py() or 0)}


@pytest.fixture
def words_registered(monkeypatch: pytest.MonkeyPatch):
    """Checklist step 2: one line in `STAGES`, in pipeline order (here: after the queries)."""
    from ctxsim import tasks

    stages = dict(tasks.STAGES)
    order = list(stages)
    at = order.index("queries") + 1
    new = {n: stages[n] for n in order[:at]}
    new["words"] = f"{__name__}:WordsStage"
    new |= {n: stages[n] for n in order[at:]}
    monkeypatch.setattr(tasks, "STAGES", new)
    import ctxsim.flows.config as config

    monkeypatch.setattr(config, "STAGES", new)
    tasks.load_stage.cache_clear()
    yield
    tasks.load_stage.cache_clear()


def test_a_new_stage_is_planned_by_its_own_cost_model(words_registered, tmp_path: Path):
    from ctxsim.flows.plan import format_plan, predict, run_pilot

    # checklist step 3: a section in the config that runs it
    cfg_path = tmp_path / "words.yaml"
    quickstart = (REPO / "configs" / "quickstart.yaml").read_text()
    cfg_path.write_text(quickstart + "\nwords:\n  min_chars: 2\n")
    sets = [f"shard.paths=['{SAMPLE}']", "queries.n_corpus=40", "queries.n_shards=2"]
    cfg, pilot = run_pilot(
        cfg_path, sets, sample_fraction=0.3, pilot_queries=4, until="words", cache=tmp_path / "c"
    )
    assert pilot.piloted[-1] == "2:words" and "1:words" in pilot.piloted
    assert pilot.runs[0]["words"].rows == 4 and pilot.runs[1]["words"].rows == 8
    plan = predict(cfg, pilot)
    row = {r["stage"]: r for r in plan["stages"]}["words"]
    # one row per query: 40 in full, fitted on the two pilots (4 and 8 queries)
    assert row["basis"] == "words rows" and row["pilot_units"] == 8 and row["units"] == 40
    assert row["rows"] == pytest.approx(40) and row["cpu_s"] >= 0
    assert any(line.startswith("words ") for line in format_plan(plan).splitlines())


PLANNER = ("plan.py", "plan_predict.py", "plan_measure.py", "plan_cache.py", "plan_sample.py")


def _stage_names_in(source: str, stages: dict[str, str]) -> set[str]:
    """Stage names among the string constants of ``source`` (also as ``SECTION.KEY``), leaving
    out the keys of the plan's own JSON (dict keys, subscripts: its "queries" are counts)."""
    tree = ast.parse(source)
    keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys}
    keys |= {id(node.slice) for node in ast.walk(tree) if isinstance(node, ast.Subscript)}
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in keys
        if node.value.split(".")[0] in stages
    }


def test_no_planner_module_names_a_stage():
    """The planner asks each stage's cost model; a stage name in its code would be a special
    case that a new stage could not get."""
    from ctxsim.tasks import STAGES

    assert _stage_names_in('x = "shard.paths"; y = {"queries": 1}', STAGES) == {"shard.paths"}
    for module in (*PLANNER, "plan_report.py", "cli_plan.py"):
        assert not _stage_names_in((REPO / "flows" / module).read_text(), STAGES), module
