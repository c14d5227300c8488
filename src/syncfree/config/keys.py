"""The keys of a config type, as a user writes them (`ppo.learning_rate`), and the hint for a key it lacks."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import cast

from syncfree.config.sections import TrainConfig


def section_types(cls: type, sections: Mapping[str, type] | None = None) -> dict[str, type]:
    """The dataclass type of each section of the config type `cls` (a field whose default is a dataclass), with
    `sections` replacing some (a task's own `env` type, a policy type the task trains)."""
    found = {f.name: cast(type, f.default_factory) for f in dataclasses.fields(cls)
             if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory)}
    return {**found, **(sections or {})}


def sections_of(cfg: object) -> dict[str, type]:
    """The type of each section `cfg` holds (a task's `env` type where the config type declares `EnvConfig`): what
    reading a config of the same shape from plain data builds."""
    return {name: type(getattr(cfg, name)) for name in section_types(type(cfg))}


def dotted_keys(cls: type, prefix: str = "", sections: Mapping[str, type] | None = None) -> list[str]:
    """Every option of the config type `cls` as a dotted key (`ppo.learning_rate`), sections walked into."""
    subs = section_types(cls, sections)
    keys = []
    for f in dataclasses.fields(cls):
        if f.name in subs:
            keys += dotted_keys(subs[f.name], f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


def options_named(name: str, root: type, exact: bool = True, sections: Mapping[str, type] | None = None
                  ) -> list[str]:
    """The options of `root` (any section) whose last part is `name` (`-` read as `_`), or with `exact=False` the
    nearest such name's."""
    by_leaf: dict[str, list[str]] = {}
    for dotted in dotted_keys(root, sections=sections):
        by_leaf.setdefault(dotted.rsplit(".", 1)[-1], []).append(dotted)
    leaf = name.replace("-", "_")
    if exact:
        return by_leaf.get(leaf, [])
    return [key for near in difflib.get_close_matches(leaf, list(by_leaf), n=1) for key in by_leaf[near]]


def key_hint(key: str, root: type = TrainConfig, sections: Mapping[str, type] | None = None) -> str:
    """For an unknown dotted key of the config type `root`: the nearest known key at its level, else an option of
    that name (or a near one) in another section, and the keys of its section, as `; did you mean
    ppo.learning_rate? (allowed: ppo.steps_per_env, ...)`."""
    parts, cls, prefix, in_section = key.split("."), root, "", True
    leaf = parts[-1]
    subs = section_types(root, sections)
    for part in parts[:-1]:  # down to the section the unknown name is in
        if part not in subs:
            parts, in_section = [part], False  # a section that does not exist: the unknown name is the section's
            break
        cls, prefix = subs[part], f"{prefix}{part}."
        subs = section_types(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    near = [prefix + name for name in difflib.get_close_matches(parts[-1].replace("-", "_"), names, n=1)]
    # `--num_envs`, `--ppo.num_envs`, `--envs.num_envs`: an option of that name in another section comes first
    close = (options_named(leaf, root, sections=sections) or (near if in_section else [])
             or options_named(leaf, root, exact=False, sections=sections) or near)
    close.sort(key=lambda option: -difflib.SequenceMatcher(None, key, option).ratio())  # `ppp.x`: ppo.x first
    guess = f"; did you mean {' or '.join(close[:3])}?" if close else ""
    return f"{guess} (allowed: {', '.join(prefix + name for name in names)})"
