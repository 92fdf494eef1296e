"""`ctxsim plan`'s report: the plan as a fixed-width table, and what the plan itself cost."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any


def format_plan(plan: dict[str, Any]) -> str:
    """The plan as a fixed-width table."""
    p = plan["pilot"]
    queries = (
        f"{p['queries'][0]} and {p['queries'][1]} queries"
        if any(p["queries"])
        else "no query stage"
    )
    lines = [
        f"plan for {plan['config']}: pilot on {p['sample_bytes']:,} of {p['full_bytes']:,} "
        f"corpus bytes (x{p['corpus_ratio']}), {queries}, {p['cpu_s']} CPU-s",
        f"{'stage':<14}{'basis':<20}{'units':>14}{'cpu_s':>12}{'gpu_s':>11}{'disk_mb':>10}"
        f"{'peak_rss_mb':>13}",
    ]
    for r in plan["stages"]:
        gpu = "" if r["gpu_s"] is None else f"{r['gpu_s']:.1f}"
        lines.append(
            f"{r['stage']:<14}{r['basis']:<20}{r['units']:>14,.0f}{r['cpu_s']:>12,.1f}{gpu:>11}"
            f"{r['disk_mb']:>10,.1f}{r['peak_rss_mb']:>13,.0f}"
        )
    t = plan["total"]
    lines.append(
        f"total: {t['cpu_s']:,.1f} CPU-s ({t['cpu_hours']} CPU-h), {t['disk_mb']:,.1f} MB on "
        f"disk, peak RSS ~{t['peak_rss_mb']:,.0f} MB (memory: a rough estimate)"
    )
    me = plan.get("plan_itself")
    if me:
        lines.append(
            f"this plan: {me['cpu_s']:,.1f} CPU-s ({me['share_of_run']:.1%} of the run it "
            f"predicts), {me['wall_s']:,.1f} s wall, peak RSS {me['peak_rss_mb']:,.0f} MB (the "
            f"run's: ~{t['peak_rss_mb']:,.0f} MB); piloted {len(p.get('piloted', []))} stage "
            f"runs, {len(p.get('from_cache', []))} from the unit-cost cache"
            + (f" ({me['cache']})" if me.get("cache") else "")
        )
    if "gpu_s" in t:
        lines.append(
            f"on {t['gpus']} GPU(s) at {t['tokens_per_second_per_gpu']:,.0f} tokens/s each: "
            f"{t['gpu_s']:,.1f} GPU-s for the scoring stages ({t['gpu_wall_hours']} h wall), "
            f"plus {t['cpu_s_other_stages']:,.1f} CPU-s for the others"
        )
    return "\n".join(lines)


def own_cost(c0: float, t0: float, predicted_cpu_s: float, cache: Path | None) -> dict[str, Any]:
    """What this plan itself cost so far (CPU and wall seconds since ``c0``/``t0``, the
    process's peak RSS), beside the run it predicts."""
    cpu = time.process_time() - c0
    return {
        "cpu_s": round(cpu, 2),
        "wall_s": round(time.perf_counter() - t0, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "share_of_run": round(cpu / max(predicted_cpu_s, 1e-9), 4),
        "cache": str(cache) if cache is not None else None,
    }
