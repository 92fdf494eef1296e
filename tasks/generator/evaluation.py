"""How the `generator` stage checks its scorer: held-out sentences scored in their own context
and in a random held-out context of similar length (from another section); the own context
should win, per Eq. 3 term, for S_gen and for the left and right terms as PMI."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxsim.models.contextual.generator import DIRECTIONS, GenerativeScorer
from ctxsim.models.contextual.generator_training import random_partners
from ctxsim.models.contextual.score_engine import EngineConfig, ScoringEngine

if TYPE_CHECKING:
    from ctxsim.tasks.generator.params import GeneratorParams


def true_context_wins(
    p: GeneratorParams,
    scorer: GenerativeScorer,
    w: dict[str, Any],
    va: np.ndarray,
    rng: np.random.Generator,
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Held-out sentences: own context vs a random held-out context of similar length. Returns
    the columns of the stage's table (EVAL_SCHEMA; None: nothing to compare) and the stats."""
    n = min(p.n_eval, len(va))
    if n == 0 or len(np.unique(w["section"][va])) < 2:
        return None, {"eval_sentences": 0}
    lengths = np.asarray([len(w["left"][i]) + len(w["right"][i]) for i in va], np.float64)
    partner = random_partners(lengths, w["section"][va], p.length_tolerance, rng)
    pick = np.sort(rng.permutation(len(va))[:n])
    own, rand = va[pick], va[partner[pick]]
    sents = [w["sentence"][i] for i in own]
    lefts = [w["left"][i] for i in own] + [w["left"][i] for i in rand]
    rights = [w["right"][i] for i in own] + [w["right"][i] for i in rand]
    eng = ScoringEngine(
        scorer, EngineConfig(token_budget=p.token_budget, bf16_on_cpu=p.bf16_on_cpu)
    )
    t0 = time.perf_counter()
    res = eng.score(lefts, sents + sents, rights)
    secs = time.perf_counter() - t0  # eval_pairs_per_s: the Eq. 3 terms, as before
    null = eng.score(lefts, [""] * (2 * n), rights, ("left", "right"))
    lam = {"fwd": p.lambda_fwd, "left": p.lambda_left, "right": p.lambda_right}
    s_gen = sum(lam[d] * res[d].astype(np.float64) for d in DIRECTIONS).astype(np.float32)
    cols: dict[str, Any] = {
        "sent_id": w["sent_id"][own],
        "own_context_id": w["context_id"][own],
        "random_context_id": w["context_id"][rand],
    }
    stats: dict[str, Any] = {"eval_sentences": n}
    for name, v in [*((f"gen_{d}", res[d]) for d in DIRECTIONS), ("S_gen", s_gen)]:
        cols[f"{name}_own"], cols[f"{name}_random"] = v[:n], v[n:]
        stats[f"wins_{name}"] = round(float(np.mean(v[:n] > v[n:])), 4)
    # as score.pmi takes them: does s raise its own context more than a random one? (fwd's
    # baseline, log p(s), is the same for both contexts, so its wins do not change)
    for d in ("left", "right"):
        cols[f"null_{d}_own"], cols[f"null_{d}_random"] = null[d][:n], null[d][n:]
        pmi = res[d].astype(np.float64) - null[d]
        stats[f"wins_pmi_{d}"] = round(float(np.mean(pmi[:n] > pmi[n:])), 4)
    stats["eval_pairs_per_s"] = round(2 * n / secs, 2) if secs > 0 else 0.0
    return cols, stats
