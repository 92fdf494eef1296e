"""Configuration: YAML files in configs/, validated section by section.

A config has a `run` section (ctxsim.store.stage.RunParams) and one section per stage, named
like the stage and validated by that stage's pydantic Params. Unknown sections and keys are
errors that name the file and the key. ``--set retrieve.top_k=2000`` overrides any value
(parsed as YAML).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ctxsim.store.errors import InputError
from ctxsim.store.stage import RunParams
from ctxsim.tasks import STAGES, load_stage


class ConfigError(InputError):
    """A config file or override is invalid; the message names the file and the key."""


@dataclass
class PipelineConfig:
    run: RunParams
    stages: dict[str, BaseModel]
    source: str = "<defaults>"
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def stage_names(self) -> list[str]:
        """Stages of this run, in pipeline order."""
        return [s for s in STAGES if s in self.stages]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run.model_dump(mode="json"),
            **{k: v.model_dump(mode="json") for k, v in self.stages.items()},
        }


def _set_dotted(cfg: dict[str, Any], key: str, value: Any, origin: str) -> None:
    parts = key.split(".")
    if len(parts) < 2 or not all(parts):
        raise ConfigError(f"{origin}: override {key!r} must look like section.key=value")
    node = cfg
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{origin}: {key!r} descends into a non-mapping value")
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. retrieve.top_k=2000")
    key, value = text.split("=", 1)
    if not value.strip():
        return key.strip(), None
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(
            f"--set {text!r}: the value is not YAML ({first}); put text that starts with "
            "{ [ * & ! or holds ': ' in YAML quotes inside the shell's: \"key='text'\""
        ) from None


def _format_error(
    source: str, section: str, err: ValidationError, overridden: dict[str, str] | None = None
) -> str:
    """One line per problem, naming where the value came from: the file, or the ``--set``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in (section, *e["loc"]))
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        msg = msg.removeprefix("Value error, ")
        lines.append(f"{_origin_of(loc, source, overridden or {})}: {loc}: {msg}")
    return "\n".join(lines)


def _origin_of(loc: str, source: str, overridden: dict[str, str]) -> str:
    """``--set KEY=VALUE`` when an override set ``loc`` (or a key above or below it), else the
    file."""
    parts = loc.split(".")
    for i in range(len(parts), 0, -1):
        text = overridden.get(".".join(parts[:i]))
        if text is not None:
            return f"--set {text}"
    below = [text for key, text in overridden.items() if key.startswith(loc + ".")]
    return f"--set {below[0]}" if below else source


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    root: str | None = None,
    stages: list[str] | None = None,
    with_sections: list[str] | None = None,
) -> PipelineConfig:
    """Read, override and validate a config. ``stages`` restricts the sections kept (default:
    every stage section present in the file; a file with no stage sections runs every stage).
    ``with_sections``: stage sections to keep (with their defaults) even when the file has no
    such section (a derived config of the same stages, e.g. `ctxsim plan`'s pilot)."""
    source = str(path) if path else "<defaults>"
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        try:
            raw = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: invalid YAML: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: top level must be a mapping of sections")
    overridden: dict[str, str] = {}
    for ov in overrides or []:
        key, value = parse_override(ov)
        _set_dotted(raw, key, value, f"--set {ov}")
        overridden[key] = ov
    if root is not None:
        raw.setdefault("run", {})["root"] = root
    for section in raw:
        if section != "run" and section not in STAGES:
            raise ConfigError(
                f"{_origin_of(section, source, overridden)}: unknown section {section!r} "
                f"(known: run, {', '.join(STAGES)})"
            )
    try:
        run = RunParams(**(raw.get("run") or {}))
    except ValidationError as e:
        raise ConfigError(_format_error(source, "run", e, overridden)) from None
    present = [s for s in STAGES if s in raw or s in (with_sections or ())] or list(STAGES)
    names = [s for s in present if stages is None or s in stages]
    parsed: dict[str, BaseModel] = {}
    for name in names:
        section = raw.get(name) or {}
        if not isinstance(section, dict):
            raise ConfigError(f"{source}: section {name!r} must be a mapping")
        try:
            parsed[name] = load_stage(name).Params(**section)
        except ValidationError as e:
            raise ConfigError(_format_error(source, name, e, overridden)) from None
    for name, params in parsed.items():  # sections this one needs, before any work
        needs = getattr(params, "required_sections", None)
        for section, (key, why) in (needs() if needs else {}).items():
            if section not in present:
                loc = f"{name}.{key}"
                raise ConfigError(
                    f"{_origin_of(loc, source, overridden)}: {loc}: {why}; the config has no "
                    f"`{section}:` section"
                )
    for name, params in parsed.items():
        try:
            params.link(parsed)  # type: ignore[attr-defined]
        except ValueError as e:  # settings of two sections that do not fit together
            raise ConfigError(f"{source}: section {name!r}: {e}") from None
    return PipelineConfig(run=run, stages=parsed, source=source, raw=raw)


def select_stages(cfg: PipelineConfig, until: str | None) -> list[str]:
    """The config's stages in order; with ``until``, that stage and what it is built from."""
    names = cfg.stage_names
    if until is not None:
        if until not in STAGES:
            raise ValueError(f"--until {until!r} is not a stage; known: {', '.join(STAGES)}")
        if until not in names:
            raise ValueError(f"--until {until!r}: that stage is not in the config")
        # only what `until` is built from: `--until generator` trains the generator without
        # retrieving and screening first (optional inputs count when the config has them)
        need, todo = {until}, [until]
        while todo:
            name = todo.pop()
            stage = load_stage(name)
            for up in (*stage.inputs, *stage.optional_inputs_for(cfg.stages[name])):
                if up in names and up not in need:
                    need.add(up)
                    todo.append(up)
        names = [n for n in names[: names.index(until) + 1] if n in need]
    return names
