"""The `label` config section (docs/stages.md lists its keys): what every contextual model
shares, and one sub-section per contextual model with settings (``label.lm``, ``label.encoder``).

A sub-section belongs to the contextual model of its name; setting the sub-section of a model
other than ``label.contextual`` is refused at config load in one line, so a setting never sits
in a config without effect. The flat keys of before (``label.encoder_form``, ``label.tau``,
``label.k``, ``label.centred``, ``label.similarity``, ``label.ablations``,
``label.block_pairs``) are still read, with a deprecation warning naming the new key.

The fingerprint keeps the flat layout of before (``LabelParams.fingerprint_layout``), so the
sub-sections moved no artefact. The settings classes live with their contextual models
(tasks/label/contextual/): this module imports that package (every model registered) and makes a
field of each; ``diagnostics.py``, ``report.py`` and the stage take LabelParams from here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, create_model, field_validator, model_validator

from ctxsim.models.contextual.origin import check_split_ratios
from ctxsim.product.contamination import ContaminationParams
from ctxsim.store.logs import get_logger
from ctxsim.store.stage import StageParams, fingerprint_params
from ctxsim.tasks.label.contextual import CONTEXTUAL, ContextualSettings, get_contextual


def route_sections() -> dict[str, type[ContextualSettings]]:
    """The sub-sections: ``label.<name>`` holds the settings of the contextual model <name>, for
    every registered model that has settings (its ``settings`` class, in its own file)."""
    return {name: m.settings for name, m in CONTEXTUAL.items() if m.settings is not None}


#: the sub-sections of the registered contextual models (tasks/label/contextual/)
ROUTE_SECTIONS = route_sections()


class LabelSection(StageParams):
    """What every contextual model shares in the `label` config section; ``LabelParams`` adds
    one field per registered model with settings (``label_params_class``)."""

    #: the sub-sections this class has a field for: model name -> its settings class
    sections: ClassVar[dict[str, type[ContextualSettings]]] = {}

    contextual: str = Field(
        "lm",
        description=(
            "The contextual model (tasks/label/contextual/): lm = Eq. 3 scores (score stage) over "
            "the context sets of select; encoder = the embed stage's encoder, cosine fit scores "
            "over every context unit of the corpus. Its settings are the sub-section of its name."
        ),
    )
    split_ratios: list[float] = Field(
        default_factory=lambda: [98.0, 1.0, 1.0],
        description=(
            "Relative sizes of the train, dev and test splits the labelled pairs are assigned to "
            "(seeded)."
        ),
    )
    hist_bins: int = Field(
        20,
        ge=2,
        description="Bins of the label histogram in the stats and the report.",
    )
    reference_encoder: str = Field(
        "none",
        description=(
            "Diagnostics (product/diagnostics.py): labels compared against a reference encoder's "
            "similarity: none, tfidf (word TF-IDF cosine) or a sentence-transformers registry name "
            "or path (its weights must be installed)."
        ),
    )
    near_one_tol: float = Field(
        1e-4,
        gt=0,
        description=(
            "Diagnostics: the share of labels within this distance of 1.0 is reported (Eq. 4 "
            "cosines crowd near 1)."
        ),
    )
    warn_band_width: float = Field(
        0.05,
        ge=0,
        description=(
            "Diagnostics: warn when most labels sit in a band narrower than this (labels that "
            "barely vary teach little)."
        ),
    )
    contamination: ContaminationParams = Field(
        default_factory=ContaminationParams,
        description=(
            "The STS test-set contamination check of the mined pairs (product/contamination.py)."
        ),
    )
    max_nonfinite_fraction: float = Field(
        0.01,
        ge=0.0,
        le=1.0,
        exclude=True,
        description=(
            "Fail the stage when more than this share of the labels is NaN or infinite (a pair "
            "whose context sets share no scored context); all of them always fails. A check, not an"
            " input of the output: kept out of the fingerprint. `ctxsim export` refuses any "
            "non-finite label."
        ),
    )

    #: the flat keys of the fingerprint layout left out at these values (the encoder route's,
    #: added after the LM route's artefacts existed): LM-route artefacts keep their fingerprints
    added_defaults: ClassVar[dict[str, Any]] = {"contextual": "lm"}
    fingerprint_defaults: ClassVar[dict[str, Any]] = {
        "contextual": "lm",
        "encoder_form": "closed",
        "tau": 0.05,
        "k": 32,
        "centred": True,
    }

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        """The flat keys of before, moved into their sub-section with a deprecation warning. A
        flat key of the other route at its default (old dumps always held ``similarity`` and
        ``ablations``) is dropped; otherwise it lands in its sub-section and is judged there."""
        if not isinstance(data, dict):
            return data
        moved = [
            (section, field, flat)
            for section, settings in cls.sections.items()
            for field, flat in settings.flat_keys.items()
            if flat in data
        ]
        if not moved:
            return data
        data = dict(data)
        contextual = data.get("contextual", "lm")
        for section, field, flat in moved:
            value = data.pop(flat)
            get_logger("ctxsim.config").warning(
                "label.%s is deprecated: write it as label.%s.%s", flat, section, field
            )
            default = cls.sections[section].model_fields[field].default
            if section != contextual and value == default and section not in data:
                continue
            sub = data.get(section)
            sub = dict(sub) if isinstance(sub, dict) else {}
            if field in sub:
                raise ValueError(f"label.{flat} and label.{section}.{field} are both set")
            sub[field] = value
            data[section] = sub
        return data

    @field_validator("contextual")
    @classmethod
    def _known_contextual(cls, value: str) -> str:
        get_contextual(value)  # registered (tasks/label/contextual/), else a ValueError naming them
        return value

    @model_validator(mode="after")
    def _one_route(self) -> LabelSection:
        """A sub-section set for another contextual model is refused: it would have no effect."""
        for section in self.sections:
            if section != self.contextual and section in self.model_fields_set:
                raise ValueError(
                    f"label.{section}: set, but label.contextual is {self.contextual!r} (its "
                    f"settings apply only with contextual: {section}); remove it"
                )
        return self

    @field_validator("split_ratios")
    @classmethod
    def _three(cls, v: list[float]) -> list[float]:
        return check_split_ratios(v, "label.split_ratios")

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """The dump without the sub-sections of the other contextual models (so the dump reads
        back, e.g. in a shard worker, without being refused)."""
        out = super().model_dump(**kwargs)
        for section in self.sections:
            if section != self.contextual:
                out.pop(section, None)
        return out

    def fingerprint_layout(self, dump: dict[str, Any]) -> dict[str, Any]:
        """The fingerprint's params in the flat layout of before the sub-sections: each
        sub-section's fields under their flat key (a sub-section not in the dump at its
        defaults), then the encoder keys left out at their defaults, so every label artefact
        kept its fingerprint (tests/tasks/test_label_contextual.py pins two)."""
        flat = {k: v for k, v in dump.items() if k not in self.sections}
        for section, settings in self.sections.items():
            sub = dump.get(section)
            if not settings.flat_keys:  # a model newer than the flat layout: its sub-section
                if sub is not None:
                    flat[section] = sub
                continue
            if sub is None:
                sub = fingerprint_params(settings())
            for field, value in sub.items():
                flat[settings.flat_keys[field]] = value
        for key, default in self.fingerprint_defaults.items():
            if key in flat and flat[key] == default:
                del flat[key]
        return flat

    def link(self, sections: dict[str, StageParams]) -> None:
        c = self.contamination
        if c.enabled and c.sts_dir is None:
            for name in ("train", "evaluate"):
                sts_dir = getattr(sections.get(name), "sts_dir", None)
                if sts_dir:
                    c.sts_dir = sts_dir
                    break

    def settings(self) -> ContextualSettings | None:
        """The settings of the chosen contextual model (None: it has none)."""
        return getattr(self, self.contextual) if self.contextual in self.sections else None


def label_params_class(sections: dict[str, type[ContextualSettings]] | None = None) -> type:
    """The `label` section's class: ``LabelSection`` and a field ``<name>`` (the sub-section
    ``label.<name>``) for each contextual model with settings, so a model's settings are its own
    file's class and nothing here names them."""
    sections = route_sections() if sections is None else sections
    fields: dict[str, Any] = {
        name: (
            cls,
            Field(
                default_factory=cls,
                description=(
                    f"contextual {name} only: its settings (refused under another contextual model)"
                ),
            ),
        )
        for name, cls in sections.items()
    }
    cls = create_model(
        "LabelParams",
        __base__=LabelSection,
        __module__=__name__,
        __doc__="The `label` config section.",
        **fields,
    )
    cls.sections = dict(sections)
    return cls


#: the `label` config section, with the sub-sections of the registered contextual models
LabelParams = label_params_class(ROUTE_SECTIONS)
