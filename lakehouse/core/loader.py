"""Typed settings from layered YAML files and the environment, for any schema of frozen
dataclasses (`lakehouse.core.settings` is the project's): files merged in order, then
`PREFIX` + `SECTION__KEY` variables by path; `${NAME}` in a string names an environment
variable. Each field's type decides how its value is read; an `Annotated` type adds
`Rule`s its value must keep and `Convert`s applied to it. Every error names the key and
where its value came from."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from lakehouse.core.errors import SettingsError

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Rule:
    """What a setting's value must be beyond its type; `must` ends the error's line."""

    holds: Callable[[Any], bool]
    must: str


@dataclass(frozen=True)
class Convert:
    """How a setting's value, once read and checked, is given to the program."""

    convert: Callable[[Any], Any]


def load(
    schema: type,
    files: Sequence[Path],
    environ: Mapping[str, str],
    prefix: str,
    given: Mapping[str, tuple[Any, str]],
) -> Any:
    """`schema` from `files` (later ones override), then the variables of `environ` named
    `prefix` + a key's path (`SECTION__KEY`), then `given` (top-level keys the caller
    decides: key -> (value, where it came from))."""
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for path in files:
        _merge(merged, _read_yaml(path), sources, str(path), prefix="")
    for name, raw in environ.items():
        if name.startswith(prefix):
            keys = [k.lower() for k in name[len(prefix) :].split("__")]
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError as error:  # its value is not repeated: it may be a secret
                raise SettingsError(
                    f"${name}: not a YAML value ({getattr(error, 'problem', error)}); quote "
                    "a string that starts with a quote, brace or bracket"
                ) from None
            _merge(merged, _nest(keys, value), sources, f"${name}", prefix="")
    for key, (value, where) in given.items():
        merged[key], sources[key] = value, where
    return _build(schema, merged, sources, environ, prefix="")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise SettingsError(
            f"{where}: not valid YAML ({getattr(error, 'problem', error)})"
        ) from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of sections at the top level")
    return data


def _nest(keys: list[str], value: Any) -> dict[str, Any]:
    for key in reversed(keys):
        value = {key: value}
    return value


def _merge(
    into: dict[str, Any], new: dict[str, Any], sources: dict[str, str], source: str, prefix: str
) -> None:
    for key, value in new.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value, sources, source, prefix=f"{path}.")
        else:
            into[key] = value
        sources[path] = source


def _source(sources: dict[str, str], path: str) -> str:
    while path:
        if path in sources:
            return sources[path]
        path = path.rpartition(".")[0]
    return "conf/base.yaml"


def _build(
    cls: type, data: Any, sources: dict[str, str], environ: Mapping[str, str], prefix: str
) -> Any:
    section = prefix.rstrip(".") or "the top level"
    if not isinstance(data, dict):
        raise SettingsError(f"{section} in {_source(sources, section)}: expected a mapping")
    # A field the lake decides (`from_lake`) keeps its default: no file sets it.
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("from_lake")}
    hints = typing.get_type_hints(cls, include_extras=True)
    for key in data:
        if key not in fields:
            path = f"{prefix}{key}"
            raise SettingsError(
                f"unknown key {path!r} in {_source(sources, path)} (known in {section}: "
                f"{', '.join(sorted(fields))})"
            )
    values = {}
    for name in fields:
        path = f"{prefix}{name}"
        if name not in data:
            raise SettingsError(f"missing key {path!r} (set it in conf/base.yaml)")
        hint = hints[name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            values[name] = _build(hint, data[name], sources, environ, prefix=f"{path}.")
        else:
            values[name] = _coerce(hint, data[name], path, sources, environ)
    return cls(**values)


def _coerce(
    hint: Any, value: Any, path: str, sources: dict[str, str], environ: Mapping[str, str]
) -> Any:
    where = _source(sources, path)
    if typing.get_origin(hint) is Annotated:
        base, *rules = typing.get_args(hint)
        value = _coerce(base, value, path, sources, environ)
        for rule in rules:
            if isinstance(rule, Rule) and not rule.holds(value):
                raise SettingsError(f"{path!r} in {where}: {value!r} {rule.must}")
            if isinstance(rule, Convert):
                value = rule.convert(value)
        return value
    if typing.get_origin(hint) is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise SettingsError(f"{path!r} in {where}: {value!r} is none of {', '.join(allowed)}")
        return value
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise SettingsError(f"{path!r} in {where}: expected a list, got {value!r}")
        return [
            _build(item, v, sources, environ, prefix=f"{path}[{i}].")
            if isinstance(item, type) and dataclasses.is_dataclass(item)
            else _coerce(item, v, f"{path}[{i}]", sources, environ)
            for i, v in enumerate(value)
        ]
    if typing.get_origin(hint) is dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise SettingsError(f"{path!r} in {where}: expected a mapping, got {value!r}")
        return {
            str(k): _coerce(str, str(v), f"{path}.{k}", sources, environ) for k, v in value.items()
        }
    ok = isinstance(value, hint) and not (hint is int and isinstance(value, bool))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise SettingsError(
            f"{path!r} in {where}: expected {hint.__name__}, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, str):
        value = _interpolate(value, path, where, environ)
    return value


def _interpolate(value: str, path: str, where: str, environ: Mapping[str, str]) -> str:
    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise SettingsError(f"{path!r} in {where} needs environment variable {name}, unset")
        return environ[name]

    return _VARIABLE.sub(lookup, value)
