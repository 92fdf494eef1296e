"""Shared fixtures: the spine stages run once per session on the bundled sample corpus."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
# One ephemeral Prefect database for the whole session: its migrations run once, not per test.
# Removed when the session ends (one per run had piled up in /tmp).
if not os.environ.get("PREFECT_API_URL") and "PREFECT_HOME" not in os.environ:
    _prefect_home = tempfile.mkdtemp(prefix="ctxsim-prefect-")
    os.environ["PREFECT_HOME"] = _prefect_home
    atexit.register(shutil.rmtree, _prefect_home, ignore_errors=True)

#: the home digest cache (store/artefacts.py content_digest) a run without the override writes
HOME_DIGESTS = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ctxsim" / "digests.json"
)


@pytest.fixture(scope="session", autouse=True)
def _private_digest_cache(tmp_path_factory: pytest.TempPathFactory):
    """Tests share no state through the home directory: content_digest's cache of input file
    hashes (``~/.cache/ctxsim/digests.json``) points into this session's temporary folder, for
    every test and the processes they start (set before any other session fixture runs)."""
    old = os.environ.get("CTXSIM_DIGEST_CACHE")
    old_plan = os.environ.get("CTXSIM_PLAN_CACHE")  # `ctxsim plan`'s unit costs (flows/plan.py)
    os.environ["CTXSIM_DIGEST_CACHE"] = str(tmp_path_factory.mktemp("digests") / "digests.json")
    os.environ["CTXSIM_PLAN_CACHE"] = str(tmp_path_factory.mktemp("plan-cache"))
    yield Path(os.environ["CTXSIM_DIGEST_CACHE"])
    for key, value in (("CTXSIM_DIGEST_CACHE", old), ("CTXSIM_PLAN_CACHE", old_plan)):
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample" / "docs.jsonl"


def run_spine(root: Path, overrides: dict | None = None, until: str = "queries"):
    """Run the pipeline stages up to `until` in-process (no Prefect) and return the artefacts."""
    from ctxsim.flows.config import load_config
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import resolve_stage, run_stage_locally
    from ctxsim.tasks import STAGES, load_stage

    names = list(STAGES)[: list(STAGES).index(until) + 1]
    sets = [f"shard.paths=['{SAMPLE}']", "queries.n_corpus=60"]
    sets += [f"{k}={v}" for k, v in (overrides or {}).items()]
    cfg = load_config(REPO / "configs" / "quickstart.yaml", sets, str(root), stages=names)
    store = ArtefactStore(root)
    arts = {}
    for name in cfg.stage_names:
        stage = load_stage(name)
        upstream = {i: arts[i] for i in stage.inputs}
        optional = stage.optional_inputs_for(cfg.stages[name])
        upstream |= {i: arts[i] for i in optional if i in arts}
        arts[name], _ = run_stage_locally(
            resolve_stage(stage, cfg.stages[name], cfg.run, store, upstream)
        )
    return arts


@pytest.fixture(scope="session")
def spine(tmp_path_factory: pytest.TempPathFactory):
    """shard, contexts and queries artefacts of the sample corpus (read-only for tests)."""
    root = tmp_path_factory.mktemp("spine")
    return run_spine(root)
