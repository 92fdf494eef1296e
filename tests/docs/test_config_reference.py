"""Every config key explains itself: the reference (docs/stages.md) is generated from the fields'
descriptions, so a key without one would be a blank row that a newcomer cannot act on."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel

from ctxsim.store.stage import RunParams
from ctxsim.tasks import STAGES, load_stage


def _sections() -> Iterator[tuple[str, type[BaseModel]]]:
    """(config section, model) for `run`, every stage and their nested sections."""
    todo: list[tuple[str, type[BaseModel]]] = [("run", RunParams)]
    todo += [(name, type(load_stage(name)).Params) for name in STAGES]
    while todo:
        section, model = todo.pop()
        yield section, model
        for key, field in model.model_fields.items():
            default = field.default_factory() if field.default_factory else field.default
            if isinstance(default, BaseModel):
                todo.append((f"{section}.{key}", type(default)))


def test_every_config_key_has_a_description() -> None:
    sections = dict(_sections())
    assert "label.contamination" in sections  # nested sections are walked too
    missing = [
        f"{section}.{key}"
        for section, model in sections.items()
        for key, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not missing, f"config keys without Field(description=...): {missing}"


def test_the_reference_shows_every_description() -> None:
    from tests.conftest import REPO

    text = (REPO / "docs" / "stages.md").read_text()
    field = RunParams.model_fields["torch_threads"]
    assert field.description and field.description.replace("|", "\\|") in text
