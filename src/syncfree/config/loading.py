"""Configs from plain data (a checkpoint's dict, a YAML file, the API's keywords): built section by section, every
key and value checked against its field's type, one line naming the first that is not."""

from __future__ import annotations

import dataclasses
import functools
import logging
import types
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from syncfree.config.keys import key_hint, section_types, sections_of
from syncfree.config.sections import TrainConfig
from syncfree.core.switches import RETIRED, PerfConfig
from syncfree.errors import UserError

log = logging.getLogger("syncfree")


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def from_dict(cls: type, data: dict[str, Any], prefix: str = "", root: type | None = None,
              sections: Mapping[str, type] | None = None, root_sections: Mapping[str, type] | None = None) -> Any:
    """Build a nested config dataclass from a plain dict (as stored in checkpoints), rejecting unknown keys;
    `sections` gives the types of some of `cls`'s sections (a task's `env` type) in place of the declared ones
    (`root` and `root_sections`: the outermost type and its, for the hints of a nested section's unknown key)."""
    if root is None:
        root, root_sections = cls, sections
    fields = {f.name: f for f in dataclasses.fields(cls)}
    subs = section_types(cls, sections)
    kwargs = {}
    for key, value in data.items():
        if cls is PerfConfig and key in RETIRED:
            log.warning("config: %s is ignored: the switch was removed (%s)", prefix + key, RETIRED[key])
            continue
        if key not in fields:
            hint = (key_hint(prefix + key, root, root_sections) if issubclass(root, TrainConfig)
                    else f" (allowed: {', '.join(fields)})")
            raise UserError(f"config: unknown key {prefix + key!r}{hint}")
        if key in subs:
            if not isinstance(value, dict):
                raise UserError(f"config: {prefix + key} is a section (a mapping of options), found "
                                f"{type(value).__name__} {_shown(value)}")
            value = from_dict(subs[key], value, prefix=f"{prefix}{key}.", root=root, root_sections=root_sections)
        else:
            annotation = field_types(cls)[key]
            check_type(value, annotation, prefix + key)
            if annotation is float and isinstance(value, int):  # `3` given for a number: stored as the number 3.0
                value = float(value)
        kwargs[key] = value
    for key, sub in subs.items():  # a section the data leaves out: the given type's defaults
        if key not in kwargs and sections is not None and key in sections:
            kwargs[key] = sub()
    return cls(**kwargs)


@functools.cache
def field_types(cls: type) -> Mapping[str, Any]:
    """The resolved type of each field of the config dataclass `cls` (resolved once per type: reading a config
    asks for each of its keys)."""
    import typing

    return types.MappingProxyType(typing.get_type_hints(cls))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} characters)"


def _type_words(annotation: Any) -> str:
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is list:
        return f"a list of {_type_words(args[0])}s" if args else "a list"
    if origin in (typing.Union, __import__("types").UnionType):
        return " or ".join(_type_words(a) for a in args)
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            type(None): "null"}.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _is_type(value: Any, annotation: Any) -> bool:
    import types
    import typing

    if annotation is Any:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(_is_type(value, a) for a in args)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple)) and (not args or all(_is_type(v, args[0]) for v in value))
    if origin is dict:
        return isinstance(value, dict)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is type(None):
        return value is None
    return isinstance(value, annotation) if isinstance(annotation, type) else True


def check_type(value: Any, annotation: Any, key: str) -> None:
    """A stored config's value has its field's type (a config file, a checkpoint's config): one line naming the key
    otherwise."""
    if not _is_type(value, annotation):
        raise UserError(f"config: {key}={_shown(value)} is invalid; allowed: {_type_words(annotation)}")


def merge(tree: dict[str, Any], path: list[str], value: Any) -> None:
    """Set `tree[path[0]]...[path[-1]] = value`; a dict value updates a section key by key."""
    *sections, name = path
    for section in sections:
        tree = tree.setdefault(section, {})
        if not isinstance(tree, dict):
            raise UserError(f"config: {'.'.join(path)}: {section} is not a section")
    if isinstance(value, dict) and isinstance(tree.get(name), dict):
        for key, item in value.items():
            merge(tree[name], [key], item)
    else:
        tree[name] = value


ConfigT = TypeVar("ConfigT")


def with_values(cfg: ConfigT, values: Mapping[str, Any]) -> ConfigT:
    """A copy of the config `cfg` with `values` set: top-level fields by name, sections as dicts, or dotted keys
    (`ppo.learning_rate`); a misspelt key is one line naming the nearest one. Not validated."""
    tree = to_dict(cfg)
    for key, value in values.items():
        merge(tree, str(key).split("."), value)
    return cast(ConfigT, from_dict(type(cfg), tree, sections=sections_of(cfg)))


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` as `{"a.b": 1}`; lists compared as tuples."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
    return flat
