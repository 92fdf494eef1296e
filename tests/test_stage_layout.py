"""One convention for stages (docs/architecture.md, "Where things live" and "Adding a stage").

* No import circle among the modules of ``ctxsim.tasks``: a stage's helpers take its Params from
  a module of their own (``params.py``), never back from the stage's module. Every import counts,
  those under ``if TYPE_CHECKING:`` and inside functions too.
* Every stage in ``STAGES`` is a flat module ``tasks/<name>.py`` with no helper beside it, or a
  package ``tasks/<name>/`` whose ``params.py`` holds its Params; nothing else sits in tasks/.
* Stage modules are no library: outside tasks/ and tests/, code imports a stage's Stage and
  Params only; what else it needs lives in models/, store/ or product/. ``EXCEPTIONS`` lists the
  imports still allowed, each with why.
* No module of tasks/ is over 450 lines, no function of tasks/ over 80.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO
from tests.test_layers import _cycle

TASKS = REPO / "tasks"
#: folders whose modules may not reach into a stage module (tests/ test the stages' internals)
OUTSIDE = ("flows", "product", "models", "store", "scores", "readers", "bench")

_EVALUATE = (
    "evaluate is also `ctxsim eval`'s library and the benches' way to score their own models: its "
    "package exports them (tasks/evaluate/__init__.py)"
)
_GRID = (
    "the student grid trains packed arms elsewhere with the train stage's own trainer settings: "
    "the same arguments by construction (the trainer seals checkpoints with store/, so it cannot "
    "move to models/)"
)
_GEN_IDS = (
    "the id range of gencontexts' own rows (generated contexts and sentences), a fact of its "
    "artefact: a bench tells generated contexts from the corpus's by it"
)
_OTHERS = "the embed artefact's file layout and readers, which explain and archived benches read"
#: (stage module, imported name) -> why code outside tasks/ may still import it
EXCEPTIONS: dict[tuple[str, str], str] = {
    **dict.fromkeys(
        [
            ("evaluate", name)
            for name in (
                "evaluate_model",
                "load_st",
                "pair_similarities",
                "encode_sentences",
                "SEVEN",
                "evaluate_domain",
                "pair_set_similarities",
            )
        ],
        _EVALUATE,
    ),
    **dict.fromkeys([("train", n) for n in ("make_trainer", "training_args", "use_bf16")], _GRID),
    ("gencontexts", "GEN_CONTEXT_BASE"): _GEN_IDS,
    **dict.fromkeys(
        [
            ("embed", "context_units"),
            ("embed", "read_embeddings"),
            ("embed", "ADAPTED_DIR"),
            ("embed", "SCATTER_FILE"),
            ("embed", "load_scatter"),
        ],
        _OTHERS,
    ),
}


def module_name(path: Path, root: Path = TASKS) -> str:
    """``tasks/train/stage.py`` -> ``ctxsim.tasks.train.stage`` (a package: its ``__init__``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["ctxsim", "tasks", *parts])


def imports_of(path: Path, module: str) -> list[tuple[str, str | None]]:
    """(module, name) for every import in ``path`` (``name`` None for ``import x``), relative
    imports resolved against ``module``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            out += [(base, a.name) for a in node.names]
    return out


def tasks_graph(root: Path = TASKS) -> dict[str, set[str]]:
    """{module of ctxsim.tasks: the modules of ctxsim.tasks it imports}; ``from pkg import m``
    with ``m`` a module is an edge to ``m``, else to ``pkg``. Parent packages' ``__init__`` are
    no edges: a package's own ``__init__`` importing its stage is no circle."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for target, name in imports_of(path, mod):
            if name and f"{target}.{name}" in files:
                graph[mod].add(f"{target}.{name}")
            elif target in files:
                graph[mod].add(target)
            else:  # ``import ctxsim.tasks.a.b.c`` where only ``a.b`` is a module of tasks/
                parts = target.split(".")
                while parts and ".".join(parts) not in files:
                    parts.pop()
                if len(parts) > 2:
                    graph[mod].add(".".join(parts))
        graph[mod].discard(mod)
    return graph


def test_the_graph_sees_a_params_circle(tmp_path: Path) -> None:
    """The old layout: a helper importing its stage's Params back (under
    TYPE_CHECKING) is a circle; with the Params in a module of their own it is none."""
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "gen.py").write_text("from ctxsim.tasks.gen_data import load\nclass P: ...\n")
    (tmp_path / "gen_data.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ctxsim.tasks.gen import P\n"
    )
    assert _cycle(tasks_graph(tmp_path)) is not None
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .stage import S\nfrom .params import P\n")
    (pkg / "params.py").write_text("class P: ...\n")
    (pkg / "stage.py").write_text("from ctxsim.tasks.pkg.data import load\n")
    (pkg / "data.py").write_text("from . import params\nfrom ctxsim.tasks.pkg.params import P\n")
    (tmp_path / "gen_data.py").write_text("")
    graph = tasks_graph(tmp_path)
    assert graph["ctxsim.tasks.pkg.data"] == {"ctxsim.tasks.pkg.params"}
    assert graph["ctxsim.tasks.pkg"] == {"ctxsim.tasks.pkg.stage", "ctxsim.tasks.pkg.params"}
    assert _cycle(graph) is None


def test_no_import_circle_in_tasks() -> None:
    graph = tasks_graph()
    assert "ctxsim.tasks.train.params" in graph["ctxsim.tasks.train.stage"]  # the scan sees imports
    found = _cycle(graph)
    assert found is None, f"import circle in tasks/: {' -> '.join(found or [])}"


def _stage_modules() -> dict[str, str]:
    """{stage: its module's name under tasks/ (``select_contexts`` for `select`)}."""
    from ctxsim.tasks import STAGES

    return {s: ref.split(":")[0].split(".")[2] for s, ref in STAGES.items()}


def _classes(path: Path) -> dict[str, ast.ClassDef]:
    body = ast.parse(path.read_text(), str(path)).body
    return {n.name: n for n in body if isinstance(n, ast.ClassDef)}


def stage_names(stage: str) -> tuple[str, str, Path | None]:
    """(Stage class, Params class, the file of tasks/ defining the Params: None when imported,
    as `score`'s ScoreParams from scores/) of ``stage``, read with ``ast`` (importing every
    stage would import torch and transformers)."""
    from ctxsim.tasks import STAGES

    mod, cls = STAGES[stage].split(":")
    where = TASKS / mod.split(".")[2]
    files = sorted(where.rglob("*.py")) if where.is_dir() else [where.with_suffix(".py")]
    defined = {name: (node, f) for f in files for name, node in _classes(f).items()}
    node, _ = defined[cls]
    params = next(
        a.value.id
        for a in node.body
        if isinstance(a, ast.Assign)
        and [getattr(t, "id", None) for t in a.targets] == ["Params"]
        and isinstance(a.value, ast.Name)
    )
    # a Params class may be built at module level (label's: ``LabelParams = label_params_class()``)
    built = {
        tgt.id: f
        for f in files
        for n in ast.parse(f.read_text(), str(f)).body
        if isinstance(n, ast.Assign)
        for tgt in n.targets
        if isinstance(tgt, ast.Name)
    }
    return cls, params, defined[params][1] if params in defined else built.get(params)


def test_every_stage_is_a_lone_module_or_a_package_with_params() -> None:
    from ctxsim.tasks import STAGES

    mods = _stage_modules()
    for stage, mod in mods.items():
        assert STAGES[stage].split(":")[0] == f"ctxsim.tasks.{mod}", STAGES[stage]
        _, params, params_file = stage_names(stage)
        if (TASKS / mod).is_dir():
            assert params_file == TASKS / mod / "params.py", f"{stage}: {params} in {params_file}"
            init = (TASKS / mod / "__init__.py").read_text()
            assert params in init and STAGES[stage].split(":")[1] in init, f"{mod}/__init__.py"
        else:
            assert params_file in (TASKS / f"{mod}.py", None), stage
    # nothing else in tasks/: a stage's helpers sit in its package, not beside its module
    stray = [
        p.name
        for p in TASKS.iterdir()
        if p.name not in ("__init__.py", "__pycache__")
        and p.name.removesuffix(".py") not in mods.values()
    ]
    assert not stray, f"not a stage of STAGES (a helper belongs in its stage's package): {stray}"


def test_stage_modules_export_only_their_stage_and_params() -> None:
    mods = _stage_modules()
    allowed = {mod: set(stage_names(s)[:2]) for s, mod in mods.items()}
    bad = []
    for folder in OUTSIDE:
        for path in (REPO / folder).rglob("*.py"):
            for target, name in imports_of(path, "ctxsim." + folder):
                if target == "ctxsim.tasks" and name in allowed:  # a stage module itself
                    target, name = f"{target}.{name}", None
                parts = target.split(".")
                if parts[:2] != ["ctxsim", "tasks"] or len(parts) < 3 or parts[2] not in allowed:
                    continue
                mod = parts[2]
                if name is None or (name not in allowed[mod] and (mod, name) not in EXCEPTIONS):
                    bad.append(f"{path.relative_to(REPO)}: {target} {name or '(module)'}")
    assert not bad, "library code imported from a stage module:\n" + "\n".join(bad)


#: the most lines a module of tasks/ may have: past it, a stage splits into a package
MAX_LINES = 450


def test_no_tasks_module_over_450_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in TASKS.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these into a package's modules (at most {MAX_LINES} lines): {long}"


#: the most lines a function of tasks/ may span (decorators, signature and docstring included)
MAX_FUNCTION_LINES = 80


def test_no_tasks_function_over_80_lines() -> None:
    long = []
    for path in TASKS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (n := node.end_lineno - first + 1) > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"over {MAX_FUNCTION_LINES} lines: {long}"
