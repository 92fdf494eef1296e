"""Shared fixtures: the spine stages run once per session on the bundled sample corpus."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
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
# Prefect reads its settings once, at import: the in-process runs of CliRunner tests get the
# CLI's startup timeout only if it is set before (its default of 20 s fails on a loaded machine)
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "600")
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
    hashes (``~/.cache/ctxsim/digests.json``) points into the test run's temporary folder, for
    every test and the processes they start (set before any other session fixture runs)."""
    old = os.environ.get("CTXSIM_DIGEST_CACHE")
    old_plan = os.environ.get("CTXSIM_PLAN_CACHE")  # `ctxsim plan`'s unit costs (flows/plan.py)
    os.environ["CTXSIM_DIGEST_CACHE"] = str(tmp_path_factory.mktemp("digests") / "digests.json")
    os.environ["CTXSIM_PLAN_CACHE"] = str(tmp_path_factory.mktemp("plan-cache"))
    old_probe = os.environ.get("CTXSIM_SPEED_PROBE")  # adapt's plan as the recipe prices it
    os.environ["CTXSIM_SPEED_PROBE"] = "off"  # (tests/flows/test_speed_probe.py turns it on)
    yield Path(os.environ["CTXSIM_DIGEST_CACHE"])
    for key, value in (
        ("CTXSIM_DIGEST_CACHE", old),
        ("CTXSIM_PLAN_CACHE", old_plan),
        ("CTXSIM_SPEED_PROBE", old_probe),
    ):
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample" / "docs.jsonl"
#: the quickstart on the bundled sample shrunk to a minute or two: 30 queries, small candidate
#: and context sets, a 3-step generator (tests add their own shards, steps and label splits)
SMALL_QUICKSTART = [
    f"shard.paths=['{SAMPLE}']",
    "queries.n_corpus=30",
    "retrieve.top_k=40",
    "screen.keep=12",
    "select.max_size=4",
    "generator.train_steps=3",
    "generator.n_eval=10",
    "pairs.pairs_per_query=2",
    "pairs.idf_sample=500",
]


#: ``python -c`` that arms the parent-death signal (SIGTERM when the pytest process is gone) and
#: execs argv[2:]; argv[1] is the pytest pid. Set after the fork in a fresh interpreter rather
#: than in a ``preexec_fn``, which is unsafe once the session has threads.
_DIE_WITH_PARENT = [
    sys.executable,
    "-c",
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n",
]


class SessionPrefectServer:
    """`prefect server start` (SQLite in its own temporary home, no UI) on a free loopback port.

    Launched without waiting when collection is done (``pytest_collection_finish``) if a
    collected test uses ``prefect_server``, so that it boots on the second core while the first
    tests run; ``url()`` waits until it is healthy. A port taken between choosing and binding
    it (the server exits, or something else answers) costs a relaunch on another port. The
    server runs in its own process group, stopped as a whole at the session's end, and gets
    SIGTERM from the kernel if the session dies without that (parent-death signal).
    """

    attempts = 3

    def __init__(self) -> None:
        self.home: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.api_url: str | None = None
        self.healthy = False
        self.problems: list[str] = []

    def launch(self) -> None:
        from ctxsim.flows import ops
        from tests.ops_support import free_port, server_extra_env

        if self.home is None:
            self.home = Path(tempfile.mkdtemp(prefix="ctxsim-test-server-"))
        env = ops.server_env(self.home)
        env.update(server_extra_env())
        for key in (
            "PREFECT_SERVER_DATABASE_CONNECTION_URL",
            "PREFECT_API_DATABASE_CONNECTION_URL",
        ):
            env.pop(key, None)  # always the session's own SQLite file
        port = free_port()
        self.api_url = ops.api_url("127.0.0.1", port)
        cmd = ops.server_command("127.0.0.1", port, ui=False)
        with open(self.home / f"server-{len(self.problems)}.log", "wb") as out:
            self.proc = subprocess.Popen(
                [*_DIE_WITH_PARENT, str(os.getpid()), *cmd],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def url(self) -> str:
        """The API URL of the running server, once healthy (launched here if not yet)."""
        from ctxsim.flows import ops

        while not self.healthy:
            if self.proc is None:
                self.launch()
            assert self.proc is not None and self.home is not None and self.api_url
            log = self.home / f"server-{len(self.problems)}.log"
            try:
                ops.wait_healthy(self.api_url, 300, self.proc, log)
            except (RuntimeError, TimeoutError) as exc:
                self.problems.append(str(exc))
            else:
                if self.proc.poll() is None:  # ours answers, not something that took the port
                    self.healthy = True
                    break
                self.problems.append(f"{self.api_url}: exited ({self.proc.returncode})")
            self.stop_process()
            if len(self.problems) >= self.attempts:
                raise RuntimeError(
                    "no Prefect server for the session:\n" + "\n".join(self.problems)
                )
        assert self.api_url
        return self.api_url

    def stop_process(self) -> None:
        """SIGTERM (then SIGKILL) the server's process group (its own session), and reap it."""
        from ctxsim.flows import ops

        proc, self.proc, self.healthy = self.proc, None, False
        if proc is None:
            return
        if proc.poll() is None:
            ops.stop_process(proc.pid)
        with contextlib.suppress(ProcessLookupError):  # what is left of its group (uvicorn)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def close(self) -> None:
        self.stop_process()
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None


_PREFECT_SERVER = SessionPrefectServer()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any("prefect_server" in getattr(item, "fixturenames", ()) for item in session.items):
        _PREFECT_SERVER.launch()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the temporary API servers that in-process flows started (Prefect's ephemeral mode)
    while pytest's streams are open: Prefect's own atexit hook logs to a closed stream and
    prints a "Logging error" traceback after the summary."""
    server = sys.modules.get("prefect.server.api.server")
    if server is None or not server.SubprocessASGIServer._instances:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    # their logs and events first, as prefect.testing's harness does: a worker that finds its
    # server gone logs a connection error at exit instead
    APILogWorker.drain_all(timeout=5, at_exit=False)
    EventsWorker.drain_all(timeout=5, at_exit=False)
    for instance in list(server.SubprocessASGIServer._instances.values()):
        instance.stop()


def pytest_unconfigure(config: pytest.Config) -> None:
    _PREFECT_SERVER.close()


@pytest.fixture(scope="session")
def prefect_server() -> str:
    """One Prefect server for the session (``SessionPrefectServer``): the `ctxsim run`
    subprocesses of the tests that ask for it (``prefect_env``) talk to it instead of booting
    an ephemeral API server each (~15 CPU-seconds a run). Nothing a test checks lives there:
    runs record themselves in their artefact root, the flows cache and persist nothing, and a
    killed run's flow run merely stays "running" on the server."""
    return _PREFECT_SERVER.url()


@pytest.fixture
def prefect_env(prefect_server: str) -> dict[str, str]:
    """The environment of a `ctxsim` subprocess that uses the session's Prefect server."""
    return {**os.environ, "PREFECT_API_URL": prefect_server}


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
