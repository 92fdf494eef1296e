"""Stage `select`: a diverse context set Cs for every query (Sec. 3.3, "Constructing C").

Candidates are the query's screened contexts in discriminator rank order (Eq. 1 via `screen`);
Cs is built incrementally (models/corpus/selection.py): one context per text chunk, and no context
whose
(i-1)-th sentence has word-set Jaccard >= 0.5 with that of a chosen one, up to |Cs| (paper 500).

``order_by: score`` is the paper's order: the top ``rerank_top`` screened candidates of each
query are scored with the full Eq. 3 S(s, c) (the generator through the score stage's engine, with
the `score` section's lambdas unless ``scoring`` is given) and taken in descending S, then the
rest in screen order; the diversity rules apply unchanged. It costs ``rerank_top`` generative
scores per query, so the default ``screen`` order (free: the screen already ranked them) is what
a CPU run uses.

``source``: where candidates come from: ``retrieve`` (the screened corpus contexts), ``generate``
(the query's own LM-sampled contexts from `gencontexts`, in sample order; no retrieval stages
needed) or ``both`` (merged by rank: screen rank r beside sample r). Generated slots pass the same
diversity rule, on their one sentence; the own-window exclusion does not apply to them.

Ablations of Sec. 5.4: ``strategy: random`` draws |Cs| contexts uniformly from the whole corpus;
``one_per_chunk: false`` + ``jaccard_threshold: null`` is "two-step without diversity".

Rows: query_id, context_id, position (0-based order within Cs), chunk_id, rank (the screen rank),
order_score (the S it was ordered by; NaN in screen order or past ``rerank_top``).

Files: ``params.py`` (the config section), ``stage.py`` (the stage: candidates, their order,
the selection), ``lookups.py`` (contexts by id, sentences' word sets); the selection rules are
models/corpus/selection.py.
"""

from ctxsim.tasks.select_contexts.params import SelectParams
from ctxsim.tasks.select_contexts.stage import SelectStage

__all__ = ["SelectParams", "SelectStage"]
