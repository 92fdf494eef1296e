"""Stage `generator`: the generative context scorers of Sec. 3.2.2 (Eq. 2), trained on the corpus.

The class; the package's docstring (__init__.py) says what it does and which file does what.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa

from ctxsim.models.contextual.generator import DIRECTIONS
from ctxsim.models.contextual.generator_training import validation_perplexity
from ctxsim.scores.loading import save_scorer
from ctxsim.store.checked import seal, verified
from ctxsim.store.cost_models_training import ScoredWindows
from ctxsim.store.stage import Stage, StageContext
from ctxsim.tasks.generator.data import load_windows, make_examples, split_windows
from ctxsim.tasks.generator.evaluation import true_context_wins
from ctxsim.tasks.generator.params import TINY, GeneratorParams
from ctxsim.tasks.generator.scorers import build_scorer, build_teacher
from ctxsim.tasks.generator.training import plot_loss, teacher_stats, train, train_stats

EVAL_SCHEMA = pa.schema(
    [("sent_id", pa.int64()), ("own_context_id", pa.int64()), ("random_context_id", pa.int64())]
    + [
        (f"{t}_{w}", pa.float32())
        for t in ("gen_fwd", "gen_left", "gen_right", "S_gen")
        for w in ("own", "random")
    ]
    # the left and right terms' pmi baselines (tasks/score.py): the target without the sentence
    + [(f"null_{t}_{w}", pa.float32()) for t in ("left", "right") for w in ("own", "random")]
)


class GeneratorStage(Stage):
    name = "generator"
    # 2: the evaluation also scores the pmi baselines (wins_pmi_left/right); 3: distillation;
    # 4: a target's last token not run (training's gradients move by float32 rounding)
    version = "4"
    Params = GeneratorParams
    inputs = ("shard", "contexts")
    #: the trained weights depend on the thread count (float sums split over threads)
    run_fields = ("seed", "torch_threads")
    #: windows scored in validation (3 each: both directions and the mean) and evaluation (10
    #: each: own and random context, 3 terms and 2 nulls); the build as is, training by steps
    cost = ScoredWindows(
        per_val=3,
        per_eval=10,
        val_stat="val_windows",
        eval_stat="eval_sentences",
        val_cap="max_val_windows",
        eval_param="n_eval",
        val_per_eval=3,
        steps_param="train_steps",
        build_stat="build_seconds",
        train_stat="train_seconds",
        steps_stat="train_steps",
    )
    model_artefact = True
    labelling = True

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: GeneratorParams = ctx.params
        seed, device = ctx.run.seed, ctx.device
        w = load_windows(ctx)
        tr, va, unit = split_windows(w, p.val_fraction, seed)
        rng = np.random.default_rng(seed)
        tr = np.sort(rng.permutation(tr)[: p.max_train_windows])
        va_all = va
        va = np.sort(rng.permutation(va)[: p.max_val_windows])
        stats: dict[str, Any] = {
            "backend": p.backend,
            "backbone": p.backbone,
            "split_unit": unit,
            "train_windows": len(tr),
            "val_windows": len(va),
        }
        tok_dir = ctx.cache_dir / "tokenizer"
        tokenizer = None
        teacher = build_teacher(p, device) if p.distill_from is not None else None
        if p.backbone == TINY and teacher is None and verified(tok_dir, "tokenizer", ctx.logger):
            # resume with the very same vocabulary
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
        texts = [t for i in tr for t in (w["left"][i], w["sentence"][i], w["right"][i])]
        t0 = time.perf_counter()
        scorer, tok, backbone_dir = build_scorer(p, texts, device, seed, tokenizer, teacher)
        if p.backbone == TINY and teacher is None and not tok_dir.exists():
            tok.save_pretrained(str(tok_dir))
            seal(tok_dir)  # its files' sha256, checked before a resume uses it
        stats["build_seconds"] = round(time.perf_counter() - t0, 2)
        stats["n_params"] = sum(x.numel() for m in scorer.modules() for x in m.parameters())
        val_ex = make_examples(scorer, w, va)
        trained = p.train_steps > 0
        if trained:
            train_ex = make_examples(scorer, w, tr, p.train_directions)
            before = validation_perplexity(scorer, val_ex)
            stats |= {f"val_ppl_{d}_before": round(before[f"ppl_{d}"], 3) for d in DIRECTIONS}
            summary = train(ctx, p, scorer, train_ex, teacher)
            stats |= train_stats(summary)
            plot_loss(ctx, summary["history"])
        after = validation_perplexity(scorer, val_ex)
        stats |= {f"val_ppl_{d}": round(after[f"ppl_{d}"], 3) for d in DIRECTIONS}
        if teacher is not None:
            stats |= teacher_stats(p, scorer, teacher, val_ex)
        meta = self._meta(p, trained, backbone_dir, after)
        save_scorer(scorer, ctx.files_dir, meta, weights=meta["weights"] == "artefact")
        cols, wins = true_context_wins(p, scorer, w, va_all, rng)
        stats |= wins
        table = EVAL_SCHEMA.empty_table() if cols is None else pa.table(cols, schema=EVAL_SCHEMA)
        return table, stats

    @staticmethod
    def _meta(
        p: GeneratorParams, trained: bool, backbone_dir: str | None, after: dict[str, float]
    ) -> dict[str, Any]:
        """``files/generator.json``: backend, templates, limits, where the weights are (the
        artefact, or the pretrained backbone's folder when it is used untouched) and the
        validation perplexity per direction."""
        meta = {
            "backend": p.backend,
            "backbone": p.backbone,
            "shared": p.shared,
            "templates": p.templates,
            "limits": {
                "max_context_tokens": p.max_context_tokens,
                "max_sentence_tokens": p.max_sentence_tokens,
            },
            "weights": "artefact"
            if (trained or p.copy_pretrained or backbone_dir is None)
            else backbone_dir,
            "val_ppl": {d: after[f"ppl_{d}"] for d in DIRECTIONS},
            "distilled_from": p.distill_from,
        }
        if p.backend == "seq2seq" and meta["weights"] != "artefact":
            meta["weights"] = "artefact"  # the control-token embeddings are new: always save
        return meta
