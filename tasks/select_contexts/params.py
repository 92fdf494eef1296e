"""The `select` config section (docs/stages.md lists its keys)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ctxsim.scores import ScoreParams
from ctxsim.store.errors import InputError
from ctxsim.store.stage import StageParams


class SelectParams(StageParams):
    max_size: int = Field(
        8,
        ge=1,
        description=(
            "|Cs|, the contexts kept per query (the paper: 500, Table 7). Larger sets give smoother"
            " Eq. 4 labels and cost score time linearly."
        ),
    )
    strategy: Literal["ranked", "random"] = Field(
        "ranked",
        description=(
            "ranked keeps the best-ordered candidates that pass the diversity rules; random draws "
            "|Cs| contexts uniformly from the whole corpus (the Sec. 5.4 ablation (2))."
        ),
    )
    one_per_chunk: bool = Field(
        True,
        description=(
            "At most one context per text chunk, so a set is not filled from one paragraph (false "
            'with jaccard_threshold null is the paper\'s "two-step without diversity" ablation).'
        ),
    )
    jaccard_threshold: float | None = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description=(
            "Skip a candidate whose (i-1)-th sentence has word-set Jaccard similarity at least this"
            " with that of a chosen one (the paper's diversity rule, 0.5); None disables the rule."
        ),
    )
    method: Literal["prefix", "lsh", "exact"] = Field(
        "prefix",
        description=(
            "How the Jaccard rule is checked (models/corpus/selection.py): prefix (prefix "
            "filtering, equal"
            " to the rule and fast), exact (the every-pair reference) or lsh (MinHash LSH: faster "
            "on large sets, may rarely miss a conflict)."
        ),
    )
    num_perm: int = Field(
        128,
        ge=8,
        description="MinHash permutations (method lsh): more are more exact and slower.",
    )
    lsh_threshold: float = Field(
        0.3,
        gt=0.0,
        lt=1.0,
        description=(
            "LSH operating point (method lsh), set below the rule's threshold so that few conflicts"
            " are missed; hits are verified exactly."
        ),
    )
    exclude_own: bool = Field(
        True,
        description=(
            "Drop contexts whose window contains the query sentence itself (its own context would "
            "make every label trivially high)."
        ),
    )
    order_by: Literal["screen", "score"] = Field(
        "screen",
        description=(
            "Candidate order: screen (the discriminator's rank) or score (the full Eq. 3 S, the "
            "paper's order; costs rerank_top generative scores per query)."
        ),
    )
    rerank_top: int = Field(
        32,
        ge=1,
        description=(
            "With order_by score: the top screened candidates per query rescored by Eq. 3 and "
            "reordered; the rest follow in screen order."
        ),
    )
    scoring: ScoreParams | None = Field(
        None,
        description=(
            "The Eq. 3 settings of order_by score (a `score` section); default: the config's "
            "`score` section."
        ),
    )
    source: Literal["retrieve", "generate", "both"] = Field(
        "retrieve",
        description=(
            "Candidates: screened corpus contexts (retrieve), the contexts the gencontexts stage "
            "samples (generate), or both (module doc)."
        ),
    )

    def required_sections(self) -> dict[str, tuple[str, str]]:
        """Sections the config must have for these settings: {section: (key, why)} (checked
        by flows/config.py before any stage runs)."""
        if self.source == "retrieve":
            return {}
        return {
            "gencontexts": (
                "source",
                f"{self.source!r} takes the contexts the `gencontexts` stage samples",
            )
        }

    def link(self, sections: dict[str, StageParams]) -> None:
        if self.order_by == "score" and self.scoring is None:
            score = sections.get("score")
            self.scoring = score if isinstance(score, ScoreParams) else ScoreParams()
        gen = sections.get("gencontexts")
        if self.source == "generate" and gen is not None:
            if getattr(gen, "k_right", 1) == 0 and getattr(gen, "k_left", 0) == 0:
                raise InputError(
                    "select.source 'generate' with gencontexts.k_right=0 and k_left=0 can select "
                    "no context (every label would be NaN): sample a side (k_right or k_left > 0) "
                    "or use select.source: both or retrieve"
                )
