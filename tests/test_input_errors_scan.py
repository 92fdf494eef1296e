"""Every error the user caused is an InputError: the package raises no plain ValueError or
RuntimeError outside pydantic validators and a short list of internal-invariant checks.

The CLI prints an InputError (and the rest of flows/cli_errors.py:user_error_types) as one line
and keeps the traceback of anything else, so a check of the user's input that raised a plain
ValueError would show a traceback, and a bug that raised one would read like bad input. This scan
(with ``ast``, so no module is imported) names each such raise by file, line and function.

Scanned: flows, tasks, store, readers, product, scores, and of models/ the two modules that take
the user's names and paths (registry.py, encoders.py). The rest of models/ is left out: it is
pure torch/numpy maths on values the stages have already checked (docs/architecture.md), so
its ValueErrors are internal invariants (shapes, lengths, a mode argument) and never the user's
input.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from tests.conftest import REPO

FOLDERS = ("flows", "tasks", "store", "readers", "product", "scores")
MODELS_USER_FACING = ("models/registry.py", "models/encoders.py")
PLAIN = ("ValueError", "RuntimeError")
#: a ValueError raised in a pydantic validator is what pydantic wraps into its ValidationError,
#: which flows/config.py turns into a one-line ConfigError naming section.key
VALIDATORS = ("field_validator", "model_validator", "validator", "root_validator")

#: (file, function) -> (how many plain raises, why none of them is the user's input)
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("tasks/evaluate/encoders.py", "pair_similarities"): (
        1,
        "s1 and s2 are the two columns of one set's pairs, read together: equal lengths by "
        "construction",
    ),
    ("store/chunks.py", "_chunk_starts"): (
        1,
        "the contexts artefact naming sentences its own shard artefact lacks: two artefacts of "
        "one run disagree, a bug (an empty corpus is an InputError there)",
    ),
    ("tasks/retrieve.py", "RetrieveStage.run_shard"): (
        1,
        "the queries stage never writes a null text: a null one is a bug",
    ),
    ("tasks/score.py", "_sets_and_pairs"): (
        1,
        "the pairs artefact is written by the pairs stage, which checks a given file's columns",
    ),
    ("store/lease.py", "Lease.__init__"): (
        1,
        "an explicit ttl comes from code; the user's CTXSIM_LEASE_TTL is checked by default_ttl",
    ),
    ("product/explain.py", "decompose"): (
        1,
        "the similarity comes from the run's config, validated when the run was made",
    ),
    ("scores/loading.py", "load_scorer"): (
        1,
        "the generator stage always saves a seq2seq generator's weights in its artefact",
    ),
    ("scores/scorers/base.py", "register_scorer"): (
        1,
        "a scorer class registered twice is a programming error, raised at import",
    ),
    ("readers/evaluators/base.py", "register"): (
        1,
        "an evaluator format registered twice is a programming error, raised at import",
    ),
    ("readers/evaluators/ists.py", "IstsEvaluator.interval"): (
        1,
        "the metric is one of the evaluator's own interval_metrics (tasks/evaluate/domain.py)",
    ),
    ("readers/evaluators/pairs.py", "PairsEvaluator.interval"): (
        1,
        "the metric is one of the evaluator's own interval_metrics (tasks/evaluate/domain.py)",
    ),
    ("scores/views.py", "score_views"): (
        1,
        "the score stage always writes the S column",
    ),
    ("scores/views.py", "read_cs_sizes"): (
        1,
        "the score stage writes adaptive.parquet for the very pairs it scored",
    ),
}


def _files(repo: Path) -> list[Path]:
    files = [p for folder in FOLDERS for p in sorted((repo / folder).rglob("*.py"))]
    return files + [repo / f for f in MODELS_USER_FACING if (repo / f).exists()]


def _raised_name(node: ast.Raise) -> str | None:
    exc = node.exc
    if isinstance(exc, ast.Call):
        exc = exc.func
    return exc.id if isinstance(exc, ast.Name) else None


def _is_validator(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
        if name in VALIDATORS:
            return True
    return False


def _walk(node: ast.AST, scopes: list[ast.AST], rel: str, found: list) -> None:
    if isinstance(node, ast.Raise):
        name = _raised_name(node)
        fns = [s for s in scopes if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)]
        if name in PLAIN and not any(_is_validator(f) for f in fns):
            where = ".".join(getattr(s, "name", "?") for s in scopes) or "<module>"
            found.append((rel, node.lineno, where, name))
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        scopes = [*scopes, node]
    for child in ast.iter_child_nodes(node):
        _walk(child, scopes, rel, found)


def plain_raises(repo: Path = REPO) -> list[tuple[str, int, str, str]]:
    """(file, line, function, error) of every ``raise ValueError``/``raise RuntimeError`` outside
    a pydantic validator, in the scanned files under ``repo``."""
    found: list[tuple[str, int, str, str]] = []
    for path in _files(repo):
        rel = path.relative_to(repo).as_posix()
        _walk(ast.parse(path.read_text(), str(path)), [], rel, found)
    return found


def unexplained(found: list[tuple[str, int, str, str]]) -> list[str]:
    """The raises of ``found`` the allow-list does not cover, as ``file:line function: error``."""
    seen = Counter((f, fn) for f, _, fn, _ in found)
    return [
        f"{f}:{line} {fn}: raise {err}(...)"
        for f, line, fn, err in found
        if (f, fn) not in ALLOWED or seen[(f, fn)] > ALLOWED[(f, fn)][0]
    ]


def test_user_errors_are_input_errors_not_plain_value_or_runtime_errors() -> None:
    bad = unexplained(plain_raises())
    assert not bad, (
        "a plain ValueError/RuntimeError the CLI would show with a traceback (a bug): raise "
        "ctxsim.store.errors.InputError (or a subclass) for the user's input, or add the raise "
        "to ALLOWED with why it is not the user's input:\n" + "\n".join(bad)
    )


def test_every_allow_list_entry_still_names_a_raise() -> None:
    seen = Counter((f, fn) for f, _, fn, _ in plain_raises())
    stale = [f"{f} {fn}" for (f, fn), (n, _) in ALLOWED.items() if seen[(f, fn)] != n]
    assert not stale, f"ALLOWED counts that no longer match the source: {stale}"


def test_the_scan_sees_a_plain_raise_and_spares_a_validator(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "m.py").write_text(
        "from pydantic import field_validator\n"
        "class P:\n"
        "    @field_validator('x')\n"
        "    @classmethod\n"
        "    def check(cls, v):\n"
        "        raise ValueError('pydantic wraps this')\n"
        "def load(path):\n"
        "    if not path:\n"
        "        raise ValueError(f'{path}: bad')\n"
        "    raise RuntimeError\n"
    )
    assert plain_raises(tmp_path) == [
        ("flows/m.py", 9, "load", "ValueError"),
        ("flows/m.py", 10, "load", "RuntimeError"),
    ]
