"""Configuration: YAML files in configs/, validated section by section.

A config has a `run` section (ctxsim.store.stage.RunParams) and one section per stage, named
like the stage and validated by that stage's pydantic Params. Unknown sections and keys are
errors that name the file and the key. ``--set retrieve.top_k=2000`` overrides any value
(parsed as YAML).

Checked at load, for every section, so that no stage runs on a value that cannot work: every
number is finite and not negative (``NEGATIVE_ALLOWED`` lists the keys where a negative number
means something), and every field that names a model (marked on its Params, or listed in
``MODEL_FIELDS``) names one that can be loaded here.
"""

from __future__ import annotations

import math
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


#: numeric keys where a negative number means something; every other number anywhere in a config
#: must be finite and >= 0 (a NaN split ratio put every pair in `train` without a word)
NEGATIVE_ALLOWED: dict[str, str] = {
    "train.max_steps": "-1 trains for `epochs`",
    "train.clrcmd_positive_threshold": "a cosine threshold, in [-1, 1]",
}

#: the json_schema_extra key that marks a Params field naming a model (resolved at load):
#: ``Field("minilm", json_schema_extra={NAMES_MODEL: ["tiny-random"]})``, the list holding the
#: field's values that are built-in choices rather than models
NAMES_MODEL = "names_model"

#: fields naming a model on Params that do not mark them (section -> key -> built-in values
#: that are not models); a new stage marks its field instead of adding a row
MODEL_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {"backbone": ("tiny-random",), "teacher": ()},
    "gencontexts": {"model": ()},
    "pairs": {"encoder": ("tfidf",)},
    "embed": {"model": ()},
    "score": {"disc_encoder": ()},
}


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


def _drop_aliases(raw: dict[str, Any], key: str) -> None:
    """An override under one name of a key (a field and its validation aliases: evaluate's
    eval_dir and its old name sts_dir) replaces the file's value under another name."""
    section, _, name = key.partition(".")
    node = raw.get(section)
    if section not in STAGES or "." in name or not isinstance(node, dict):
        return
    for field_name, info in load_stage(section).Params.model_fields.items():
        alias = info.validation_alias
        names = {field_name} | {a for a in getattr(alias, "choices", [alias]) if isinstance(a, str)}
        if name in names:
            for other in names - {name}:
                node.pop(other, None)


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
    return "\n".join(error_lines(source, section, err, overridden))


def error_lines(
    source: str,
    section: str,
    err: ValidationError,
    overridden: dict[str, str] | None = None,
    unknown: str = "unknown key",
) -> list[str]:
    """Each of pydantic's problems as ``origin: section.key: what is wrong`` (origin: the
    ``--set`` that gave the key, else ``source``)."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in (section, *e["loc"]))
        msg = unknown if e["type"] == "extra_forbidden" else e["msg"]
        msg = msg.removeprefix("Value error, ")
        lines.append(f"{_origin_of(loc, source, overridden or {})}: {loc}: {msg}")
    return lines


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
        raw = _read_yaml(p)
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: top level must be a mapping of sections")
        for section, value in raw.items():  # before the overrides descend into them
            if value is not None and not isinstance(value, dict):
                raise ConfigError(
                    f"{p}: section {section!r} must be a mapping of keys (it is "
                    f"{type(value).__name__} {value!r:.40})"
                )
    overridden: dict[str, str] = {}
    for ov in overrides or []:
        key, value = parse_override(ov)
        _set_dotted(raw, key, value, f"--set {ov}")
        _drop_aliases(raw, key)
        overridden[key] = ov
    if root is not None:
        raw.setdefault("run", {})["root"] = root
    for section in raw:
        if section != "run" and section not in STAGES:
            raise ConfigError(
                f"{_origin_of(section, source, overridden)}: unknown section {section!r} "
                f"(known: run, {', '.join(STAGES)})"
            )
    if not isinstance(raw.get("run") or {}, dict):
        origin = _origin_of("run", source, overridden)
        raise ConfigError(f"{origin}: section 'run' must be a mapping")
    try:
        run = RunParams(**(raw.get("run") or {}))
    except ValidationError as e:
        raise ConfigError(_format_error(source, "run", e, overridden)) from None
    _check_numbers("run", run, source, overridden)
    present = [s for s in STAGES if s in raw or s in (with_sections or ())] or list(STAGES)
    names = [s for s in present if stages is None or s in stages]
    parsed: dict[str, BaseModel] = {}
    for name in names:
        section = raw.get(name) or {}
        if not isinstance(section, dict):
            raise ConfigError(
                f"{_origin_of(name, source, overridden)}: section {name!r} must be a mapping"
            )
        try:
            parsed[name] = load_stage(name).Params(**section)
        except ValidationError as e:
            raise ConfigError(_format_error(source, name, e, overridden)) from None
        _check_numbers(name, parsed[name], source, overridden)
        _check_models(name, parsed[name], source, overridden)
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
        except InputError as e:  # settings of two sections that do not fit together
            raise ConfigError(f"{source}: section {name!r}: {e}") from None
    return PipelineConfig(run=run, stages=parsed, source=source, raw=raw)


def _read_yaml(p: Path) -> Any:
    """The file's YAML (a UTF-8 BOM is allowed); an unreadable file names itself."""
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = p.read_bytes()[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{p}:{line}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
            "save the config as UTF-8"
        ) from None
    except OSError as e:
        raise ConfigError(f"config file {p}: cannot be read ({e.strerror or e})") from None
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: invalid YAML: {e}") from None


def _numbers(key: str, value: Any) -> list[tuple[str, str, float]]:
    """(key, shown key, number) for every number in a parsed value, lists and mappings
    included (``label.split_ratios[1]``)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, int | float):
        return [(key, key, float(value))]
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return [n for k in fields for n in _numbers(f"{key}.{k}", getattr(value, k))]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(f"{key}.{k}", v)]
    if isinstance(value, list | tuple):
        out = []
        for i, v in enumerate(value):
            out += [(k, s.replace(key, f"{key}[{i}]", 1), x) for k, s, x in _numbers(key, v)]
        return out
    return []


def _check_numbers(
    section: str, params: BaseModel, source: str, overridden: dict[str, str]
) -> None:
    """No NaN or infinity anywhere, and no negative number but where a key means one."""
    for key, shown, x in _numbers(section, params):
        if not math.isfinite(x):
            why = f"{x} is not a finite number"
        elif x < 0 and key not in NEGATIVE_ALLOWED:
            why = f"{x:g} is negative; use a number >= 0"
        else:
            continue
        raise ConfigError(f"{_origin_of(key, source, overridden)}: {shown}: {why}")


def model_fields(section: str, params: BaseModel) -> dict[str, tuple[str, ...]]:
    """The fields of a parsed section that name a model (marked with ``NAMES_MODEL`` or listed
    in ``MODEL_FIELDS``), each with its built-in values that are not models."""
    out = dict(MODEL_FIELDS.get(section, {}))
    for key, info in type(params).model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and NAMES_MODEL in extra:
            out[key] = tuple(extra[NAMES_MODEL] or ())  # type: ignore[arg-type]
    return out


def model_problem(name: str) -> str | None:
    """Why ``name`` cannot be loaded as a model here, or None: a registered short name (its
    package is checked by preflight), a local model directory (config.json, modules.json or a
    GGUF file), or a hub id in the local Hugging Face cache."""
    from ctxsim.models.registry import REGISTRY, model_name_problem, resolve_model

    if name in REGISTRY:
        return None
    local = resolve_model(name)
    if isinstance(local, Path):
        if not local.is_dir():
            return f"{name} is a file, not a model directory (one holding config.json)"
        if not any((local / f).is_file() for f in ("config.json", "modules.json")) and not any(
            local.glob("*.gguf")
        ):
            return f"{name} holds no model (no config.json, modules.json or *.gguf in it)"
        return None
    return model_name_problem(name)


def _check_models(section: str, params: BaseModel, source: str, overridden: dict[str, str]) -> None:
    """Every model a section names (a field's string, or each value of a mapping field: name
    -> model) can be loaded here, or a ConfigError names the key."""
    for key, builtin in model_fields(section, params).items():
        value = getattr(params, key, None)
        named = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, name in named:
            if not isinstance(name, str) or name in builtin:
                continue
            problem = model_problem(name)
            if problem:
                loc = f"{section}.{key}" + (f".{sub}" if sub is not None else "")
                raise ConfigError(f"{_origin_of(loc, source, overridden)}: {loc}: {problem}")


def select_stages(cfg: PipelineConfig, until: str | None) -> list[str]:
    """The config's stages in order; with ``until``, that stage and what it is built from."""
    names = cfg.stage_names
    if until is not None:
        if until not in STAGES:
            raise ConfigError(f"--until {until!r} is not a stage; known: {', '.join(STAGES)}")
        if until not in names:
            raise ConfigError(f"--until {until!r}: that stage is not in the config")
        # only what `until` is built from: `--until generator` trains the generator without
        # retrieving and screening first (optional inputs count when the config has them)
        need, todo = {until}, [until]
        while todo:
            name = todo.pop()
            stage = load_stage(name)
            params = cfg.stages[name]
            for up in (*stage.inputs_for(params), *stage.optional_inputs_for(params)):
                if up in names and up not in need:
                    need.add(up)
                    todo.append(up)
        names = [n for n in names[: names.index(until) + 1] if n in need]
    return names
