"""Stages of the ctxsim pipeline, in run order.

Each entry maps a stage name (its config section and artefact folder) to ``module:Class``.
Adding a stage: copy a module, give it a name, add one line here (docs/architecture.md has the
whole checklist). Facts about a stage (cost basis, per query or not, ...) are attributes of its
class (store/stage.py), not lists of names elsewhere.
"""

from __future__ import annotations

import importlib
from functools import cache

from ctxsim.store.stage import Stage

STAGES: dict[str, str] = {
    "shard": "ctxsim.tasks.shard:ShardStage",  # corpus -> sentences (Sec. 3.2 notation c_i)
    "contexts": "ctxsim.tasks.contexts:ContextsStage",  # context slots [c<, _, c>] and text chunks
    "queries": "ctxsim.tasks.queries:QueriesStage",  # sentences to label (corpus sample or STS)
    "index": "ctxsim.tasks.index:IndexStage",  # TF-IDF bigram vectoriser + chunk matrix (Sec. 3.3)
    "embed": "ctxsim.tasks.embed:EmbedStage",  # encoder context vectors + scatter (encoder route)
    "retrieve": "ctxsim.tasks.retrieve:RetrieveStage",  # top-K chunks per query (Sec. 3.3)
    "discriminator": "ctxsim.tasks.discriminator:DiscriminatorStage",  # BiLSTM, Eq. 1
    "screen": "ctxsim.tasks.screen:ScreenStage",  # rank contexts with cached reps (Sec. 3.3)
    "generator": "ctxsim.tasks.generator:GeneratorStage",  # generative scorers, Eq. 2
    "gencontexts": "ctxsim.tasks.gencontexts:GenContextsStage",  # LM-sampled contexts
    "select": "ctxsim.tasks.select_contexts:SelectStage",  # diverse context sets Cs (Sec. 3.3)
    "pairs": "ctxsim.tasks.pairs:PairsStage",  # which sentence pairs get labels
    "score": "ctxsim.tasks.score:ScoreStage",  # S(s, c), Eq. 3
    "label": "ctxsim.tasks.label:LabelStage",  # cosine of context vectors, Eq. 4
    "train": "ctxsim.tasks.train:TrainStage",  # Siamese surrogate (Sec. 3.4)
    "evaluate": "ctxsim.tasks.evaluate:EvaluateStage",  # STS / iSTS evaluation (Sec. 4)
}


@cache
def load_stage(name: str) -> Stage:
    """Import a stage class by name and return an instance."""
    if name not in STAGES:
        raise KeyError(f"unknown stage {name!r}; known: {', '.join(STAGES)}")
    module, cls = STAGES[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def upstream_of(name: str) -> set[str]:
    """Every stage ``name`` reads, directly or through others (inputs and optional inputs)."""
    out: set[str] = set()
    todo = [name]
    while todo:
        st = load_stage(todo.pop())
        for dep in (*st.inputs, *st.optional_inputs):
            if dep not in out:
                out.add(dep)
                todo.append(dep)
    return out
