"""The `evaluate` config section (docs/stages.md lists its keys)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, Field, field_validator

from ctxsim.store.stage import StageParams, knob


class EvaluateParams(StageParams):
    """The `evaluate` config section."""

    eval_dir: str | None = Field(
        None,
        validation_alias=AliasChoices("eval_dir", "sts_dir"),
        description=(
            "Folder of evaluation sets, searched at any depth: every file of every task format "
            "(readers/evaluators: STS sets, *.pairs.tsv pair classification, *_qa.jsonl "
            "retrieval) is evaluated and reported; None: none. Its old name sts_dir is read too."
        ),
    )
    ists_dir: str | None = Field(
        None,
        description="Folder of iSTS sets (alignment evaluation with RCMD); None: none.",
    )
    similarities: list[Literal["cosine", "rcmd"]] = Field(
        default_factory=lambda: ["cosine", "rcmd"],
        description=(
            "How two sentence embeddings are compared: cosine (of the sentence embeddings) and/or "
            "rcmd (token alignment, CLRCMD)."
        ),
    )
    baselines: list[Literal["backbone", "minilm", "dynamax", "tfidf"]] = Field(
        default_factory=lambda: ["backbone", "minilm", "dynamax"],
        description=(
            "Systems reported beside the trained surrogate: backbone (the untrained start), minilm,"
            " dynamax (word-vector DynaMax) and tfidf (word TF-IDF cosine of each pair)."
        ),
    )
    extra_models: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={"names_model": []},
        description=(
            "More encoders in the same report and paired CIs (e.g. a SimCSE model trained on the "
            "same sentences with train.objective simcse): name -> sentence-transformers / HF model "
            "dir."
        ),
    )

    #: keys added after artefacts existed: their default leaves the fingerprint as it was
    added_defaults: ClassVar[dict[str, Any]] = {"bf16_cpu": False}

    @property
    def sts_dir(self) -> str | None:
        """``eval_dir`` under its old name (the label stage's contamination default reads it)."""
        return self.eval_dir

    def fingerprint_layout(self, dump: dict[str, Any]) -> dict[str, Any]:
        """``eval_dir`` hashed under its old key, so the rename moved no artefact."""
        return {("sts_dir" if k == "eval_dir" else k): v for k, v in dump.items()}

    @field_validator("extra_models")
    @classmethod
    def _extra_names(cls, value: dict[str, str]) -> dict[str, str]:
        taken = {"surrogate", "backbone", "minilm", "dynamax", "tfidf"} & set(value)
        if taken:
            raise ValueError(f"evaluate.extra_models: {sorted(taken)} name built-in systems")
        return value

    dynamax_vectors: Literal["auto", "wordllama", "backbone"] = Field(
        "auto",
        description=(
            "Word vectors of the dynamax baseline: wordllama (when installed), backbone (the "
            "surrogate's input embeddings), or auto (wordllama when installed, else backbone)."
        ),
    )
    batch_size: int = knob(
        64,
        ge=1,
        description=(
            "Sentences per encoder forward pass. Speed and memory only: out of the fingerprint."
        ),
    )
    max_seq_length: int = Field(
        128,
        ge=1,
        description="Tokens per sentence when encoding; longer sentences are truncated.",
    )
    max_pairs_per_subset: int | None = Field(
        None,
        ge=1,
        description="Seeded sample of each STS subset's pairs, for quick runs; None: every pair.",
    )
    bootstrap_resamples: int = Field(
        1000,
        description=(
            "Resamples of the paired BCa bootstrap CIs (the DynaMax paper: 10000); more give "
            "steadier intervals and cost time."
        ),
    )
    confidence: float = Field(
        0.95,
        description="Confidence level of the bootstrap intervals.",
    )
    hard_quantile: float = Field(
        0.2,
        description=(
            "Hard splits (Wieting et al. 2020): the quantile of the symmetric word error rate "
            "(SWER) above (below) which a pair's word overlap counts as low (high)."
        ),
    )
    hard_high_gold: tuple[float, float] = Field(
        (4.0, 5.0),
        description=(
            "Hard splits: the gold range of similar pairs (with low word overlap: hard positives)."
        ),
    )
    hard_low_gold: tuple[float, float] = Field(
        (0.0, 1.0),
        description=(
            "Hard splits: the gold range of dissimilar pairs (with high word overlap: hard "
            "negatives)."
        ),
    )
    ists_remove_oppo: bool = Field(
        False,
        description=(
            "iSTS gold: also drop OPPO alignments (as CLRCMD's *.wa.equi variant that removes "
            "them)."
        ),
    )
    bf16_cpu: bool = Field(
        False,
        description=(
            "Encode in bf16 autocast on a CPU with bf16 units (AVX512-BF16 or AMX; float32 on "
            "one without), as every pass on CUDA already is: 1.77x fewer CPU-s on MedQuAD's dev "
            "tasks, every figure within 0.03 of float32 (bench/results/evaluate_bf16.md)."
        ),
    )
    cache: bool = knob(
        True,
        description=(
            "Keep the baselines' encodings (domain tasks) and pair scores (STS sets) in "
            "ROOT/_cache/evaluate and read them back on later runs (a download scores the same "
            "texts the same way every time; the surrogate is always encoded). Speed only: out "
            "of the fingerprint."
        ),
    )
    plots: bool = Field(
        True,
        description=(
            "Write report.md and its plots into the artefact's files/ (false: results.json only, "
            "faster without matplotlib)."
        ),
    )
