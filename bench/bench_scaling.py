"""Scaling of a sharded stage under each task runner, and Prefect's fixed overheads.

What it measures (one run, same machine):
- wall time of one sharded stage (N shards of CPU-bound pure-Python work, computed through
  ``ctxsim.store.stage.compute_shard``: lease, Parquet write, done-marker) with 1, 2 (and 4 in full
  mode) workers under Prefect's thread and process runners, Dask and Ray (when installed);
  speed-up = T(1 worker) / T(w workers) of the same runner, efficiency = speed-up / w;
- the naive way (a plain loop, no Prefect) and the library a user would pick without Prefect
  (``concurrent.futures.ProcessPoolExecutor``), to show what orchestration costs;
- fixed overhead per flow run (an empty flow) and per task (N no-op shards, minus the empty
  flow, divided by N), per runner.

The work holds the GIL on purpose (the worst case for threads); real stages spend their time in
torch/faiss/numpy, which release it. Runner start-up (Dask cluster, Ray init) is included in the
wall time, because a user pays it on every flow run that uses a local cluster.

Usage: ``python -m bench.bench_scaling [--quick]`` (needs a Prefect API: uses PREFECT_API_URL,
or starts a temporary local server via flows.ops.start_server).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.harness import machine_info, median, peak_rss_mb, write_results
from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.stage import RunParams, Stage, StageParams, compute_shard, resolve_stage

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


class BurnParams(StageParams):
    n_shards: int = 4
    iters: int = 1_000_000


class BurnStage(Stage):
    """A deterministic CPU-bound sharded stage: an LCG walk per shard, a few rows out."""

    name = "burn"
    version = "1"
    Params = BurnParams

    def num_shards(self, ctx: Any) -> int:
        return ctx.params.n_shards

    def run_shard(self, ctx: Any, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        x = shard + 1
        for _ in range(ctx.params.iters):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        return pa.table({"shard": [shard], "x": [x]}), {"iters": ctx.params.iters}


def make_plan(root: Path, n_shards: int, iters: int):
    return resolve_stage(
        BurnStage(),
        BurnParams(n_shards=n_shards, iters=iters),
        RunParams(root=str(root)),
        ArtefactStore(root),
        {},
    )


def calibrate(seconds: float) -> int:
    """LCG iterations that take about ``seconds`` on this machine (one core)."""
    n, x = 200_000, 1
    t0 = time.perf_counter()
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    per = (time.perf_counter() - t0) / n
    return max(1000, int(seconds / per))


# ---- Prefect flows ------------------------------------------------------------------------
def _flows():
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.futures import wait

    @task(name="burn-shard", cache_policy=NO_CACHE, persist_result=False)
    def burn_task(plan: Any, shard: int) -> dict[str, Any]:
        return compute_shard(plan, shard)

    @flow(name="bench-burn", persist_result=False)
    def burn_flow(plan: Any, n: int, submit: bool) -> int:
        if not submit:
            return len([burn_task(plan, s) for s in range(n)])
        futs = [burn_task.submit(plan, s) for s in range(n)]
        wait(futs)
        return len([f.result() for f in futs])

    @flow(name="bench-empty", persist_result=False)
    def empty_flow() -> int:
        return 0

    return burn_flow, empty_flow


def make_runner(kind: str, workers: int) -> Any:
    from ctxsim.flows.runners import make_task_runner

    return make_task_runner(RunParams(task_runner=kind, max_workers=workers))


def run_prefect(kind: str, workers: int, n: int, iters: int, tmp: Path) -> float:
    burn_flow, _ = _flows()
    root = Path(tempfile.mkdtemp(dir=tmp))
    plan = make_plan(root, n, iters)
    runner = make_runner(kind, workers)
    f = burn_flow.with_options(task_runner=runner) if runner is not None else burn_flow
    t0 = time.perf_counter()
    f(plan, n, submit=runner is not None)
    dt = time.perf_counter() - t0
    shutil.rmtree(root, ignore_errors=True)
    return dt


def _compute(root: str, n: int, iters: int, shard: int) -> int:
    return compute_shard(make_plan(Path(root), n, iters), shard)["rows"]


def run_plain(kind: str, workers: int, n: int, iters: int, tmp: Path) -> float:
    root = Path(tempfile.mkdtemp(dir=tmp))
    t0 = time.perf_counter()
    if kind == "loop":
        for s in range(n):
            _compute(str(root), n, iters, s)
    else:
        with cf.ProcessPoolExecutor(workers) as ex:
            list(ex.map(_compute, [str(root)] * n, [n] * n, [iters] * n, range(n)))
    dt = time.perf_counter() - t0
    shutil.rmtree(root, ignore_errors=True)
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 shards of ~0.3 s, 1 repeat")
    ap.add_argument("--runners", default="thread,process,dask,ray")
    ap.add_argument("--shards", type=int, help="override the shard count")
    ap.add_argument("--work", type=float, help="override the seconds of work per shard")
    ap.add_argument("--repeat", type=int, help="override the repeats")
    ap.add_argument("--workers", help="override the worker counts, e.g. 1,2")
    args = ap.parse_args()
    n, work, repeat, counts = (4, 0.3, 1, [1, 2]) if args.quick else (8, 1.0, 3, [1, 2, 4])
    n, work, repeat = args.shards or n, args.work or work, args.repeat or repeat
    counts = [int(w) for w in args.workers.split(",")] if args.workers else counts
    runners = [r for r in args.runners.split(",") if r]
    runners = [
        r
        for r in runners
        if r not in ("dask", "ray") or importlib.util.find_spec(f"prefect_{r}") is not None
    ]
    iters = calibrate(work)
    tmp = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    server = None
    try:
        if not os.environ.get("PREFECT_API_URL"):
            server = _start_server(tmp)
        rows: list[dict[str, Any]] = []

        def record(way: str, workers: int, times: list[float], base: float | None) -> None:
            med = median(times)
            speedup = (base / med) if base else 1.0
            rows.append(
                {
                    "way": way,
                    "workers": workers,
                    "shards": n,
                    "work_s_per_shard": work,
                    "median_s": round(med, 3),
                    "speedup": round(speedup, 2),
                    "efficiency": round(speedup / workers, 2),
                    "repeats": len(times),
                }
            )
            print(rows[-1], flush=True)

        loop = [run_plain("loop", 1, n, iters, tmp) for _ in range(repeat)]
        record("loop (no Prefect)", 1, loop, None)
        base = None
        for w in counts:
            t = [run_plain("pool", w, n, iters, tmp) for _ in range(repeat)]
            base = base or median(t)
            record("concurrent.futures process pool (no Prefect)", w, t, base)
        seq = [run_prefect("sequential", 1, n, iters, tmp) for _ in range(repeat)]
        record("prefect sequential", 1, seq, None)
        for kind in runners:
            base = None
            for w in counts:
                t = [run_prefect(kind, w, n, iters, tmp) for _ in range(repeat)]
                base = base or median(t)
                record(f"prefect {kind}", w, t, base)

        # fixed overheads: empty flow, and N no-op shards
        _, empty_flow = _flows()
        empty = [_time(empty_flow) for _ in range(max(3, repeat))]
        overhead = [
            {
                "what": "flow run (empty flow)",
                "runner": "-",
                "median_ms": round(1000 * median(empty), 1),
            }
        ]
        n_noop = 16
        for kind in ["sequential", *runners]:
            t = median([run_prefect(kind, 2, n_noop, 0, tmp) for _ in range(max(2, repeat))])
            overhead.append(
                {
                    "what": f"per task ({n_noop} no-op shards incl. Parquet write)",
                    "runner": kind,
                    "median_ms": round(1000 * max(0.0, t - median(empty)) / n_noop, 1),
                }
            )
            print(overhead[-1], flush=True)
        meta = {
            "command": "python -m bench.bench_scaling " + " ".join(sys.argv[1:]),
            "shards": n,
            "work_s_per_shard": work,
            "lcg_iters": iters,
            "repeat": repeat,
            "workers": counts,
            "peak_rss_mb_driver": round(peak_rss_mb(), 1),
            "prefect_api": os.environ.get("PREFECT_API_URL"),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
            "note": "GIL-bound pure-Python work: the thread runner cannot scale by design.",
        }
        name = "scaling_quick" if args.quick else "scaling"
        write_results(name, rows, meta, tables={"overhead": overhead})
        print(machine_info()["cpu_usable"], "cores usable; results in bench/results/" + name)
    finally:
        if server is not None:
            from ctxsim.flows import ops

            ops.stop_process(server.pid)
        shutil.rmtree(tmp, ignore_errors=True)


def _time(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _start_server(tmp: Path) -> Any:
    import socket

    from ctxsim.flows import ops

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    info = ops.start_server("127.0.0.1", port, tmp / "server", ui=False, timeout=600)
    os.environ["PREFECT_API_URL"] = info.api_url
    return info


if __name__ == "__main__":
    main()
