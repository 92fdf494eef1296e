"""Caches that outlive an artefact live under ``ArtefactStore.cache_dir``; the sample cache sits
beside the score cache in store/."""

from __future__ import annotations

import ast
from pathlib import Path

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.sample_cache import SampleCache
from ctxsim.store.score_cache import ScoreCache

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("flows", "tasks", "models", "store", "readers", "scores", "product")


def test_sample_and_score_caches_use_the_stores_cache_dir_and_create_it_on_write(
    tmp_path: Path,
) -> None:
    import ctxsim.tasks.gencontexts

    assert ctxsim.tasks.gencontexts.SampleCache is SampleCache
    store = ArtefactStore(tmp_path)
    samples = SampleCache(tmp_path, "some-model")
    assert samples.dir.parent == store.cache_dir("gencontexts", create=False)
    scores = ScoreCache(tmp_path, "gen-fp32")
    assert scores.dir == store.cache_dir("scores", "gen-fp32", create=False)
    assert not (tmp_path / "_cache").exists()  # nothing made before a write
    keys = [SampleCache.key("right", "{}", "a sentence", 3)]
    samples.put(keys, ["its continuation"])
    assert samples.dir.is_dir()
    assert SampleCache(tmp_path, "some-model").get(keys) == {keys[0]: "its continuation"}
    assert SampleCache(tmp_path, "another-model").get(keys) == {}


def test_no_module_builds_a_cache_path_by_hand() -> None:
    """The string "_cache" appears only in store/artefacts.py (ArtefactStore.cache_dir)."""
    by_hand = []
    for pkg in PACKAGES:
        for f in sorted((REPO / pkg).rglob("*.py")):
            rel = f.relative_to(REPO).as_posix()
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Constant) and node.value == "_cache":
                    by_hand.append(f"{rel}:{node.lineno}")
    assert [h for h in by_hand if not h.startswith("store/artefacts.py:")] == []
