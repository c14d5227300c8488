"""A study's search space: `{dotted key: {type: float|int|categorical, low, high, log, step, choices}}`, read from a
YAML file as plain data (nothing in it is imported or called), every mistake one line naming the key; or the
algorithm's default space (`Algorithm.search_space`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from syncfree.algo import algorithm_for
from syncfree.config import (
    TrainConfig,
    check_type,
    dotted_keys,
    field_types,
    key_hint,
    read_config_file,
    sections_of,
    with_values,
)
from syncfree.config.keys import section_types
from syncfree.errors import UserError
from syncfree.tasks import validated

TYPES = ("float", "int", "categorical")
FIELDS = {"float": ("type", "low", "high", "log", "step"), "int": ("type", "low", "high", "log", "step"),
          "categorical": ("type", "choices")}
"""The fields each type of parameter takes."""
RUN_KEYS = ("iterations", "resume", "resume_in_place", "threads", "save_every", "log.")
"""Settings a study sets itself (the budget, each trial's folder and threads) or that no trial may change."""


@dataclass(frozen=True)
class Parameter:
    """One searched setting."""

    key: str
    type: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        """The trial's value (an `optuna.Trial` draws it)."""
        if self.type == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.type == "int":
            return trial.suggest_int(self.key, int(self.low or 0), int(self.high or 0), step=int(self.step or 1),
                                     log=self.log)
        return trial.suggest_float(self.key, float(self.low or 0), float(self.high or 0), step=self.step, log=self.log)

    def extremes(self) -> list[Any]:
        """The values a config must accept for every draw to: the bounds, or each choice."""
        return list(self.choices) if self.type == "categorical" else [self.low, self.high]

    def describe(self) -> str:
        if self.type == "categorical":
            return f"{self.key} in {{{', '.join(map(str, self.choices))}}}"
        return f"{self.key} in [{self.low:g}, {self.high:g}]{' log' if self.log else ''}"


def read_space(path: str, base: TrainConfig) -> list[Parameter]:
    """The space in the YAML file at `path`, checked against `base`'s config type."""
    return parse_space(read_config_file(path), base, path)


def default_space(base: TrainConfig) -> list[Parameter]:
    """The algorithm's documented default space around `base` (one line when it has none)."""
    space = algorithm_for(base).search_space(base)
    if not space:
        raise UserError(f"tune: --algorithm {base.algorithm} has no default search space; give one with --space "
                        "(see docs/tune.md)")
    return parse_space(space, base, f"the default space of {base.algorithm}")


def parse_space(data: Mapping[str, Any], base: TrainConfig, source: str) -> list[Parameter]:
    """The parameters `data` declares; every mistake is one line of the `UserError`, naming `source` and the key."""
    if not isinstance(data, Mapping) or not data:
        raise UserError(f"{source}: a search space is a mapping of settings, e.g. "
                        "`ppo.learning_rate: {type: float, low: 1e-4, high: 1e-2, log: true}`")
    cls, sections = type(base), sections_of(base)
    keys = set(dotted_keys(cls, sections=sections))
    subs = section_types(cls, sections)
    parameters, mistakes = [], []
    for key, spec in data.items():
        key = str(key)
        if key in subs:
            mistakes.append(f"{key}: is a section, not a setting; name its settings ({key}.<name>)")
            continue
        if key not in keys:
            mistakes.append(f"{key}: unknown key{key_hint(key, cls, sections)}")
            continue
        if key.startswith(RUN_KEYS[-1]) or key in RUN_KEYS:
            mistakes.append(f"{key}: set by the study itself (the budget, each trial's folder and threads), not "
                            "searched")
            continue
        try:
            found = parameter(key, spec, field_type(cls, sections, key), getattr_dotted(base, key))
            for value in found.extremes():  # each bound (or choice) must make a valid config by itself
                validated(with_values(base, {key: value}))
            parameters.append(found)
        except UserError as e:
            mistakes.append(f"{key}: {str(e).removeprefix('config: ')}")
    if mistakes:
        raise UserError("\n".join(f"{source}: {line}" for line in mistakes))
    return parameters


def field_type(cls: type, sections: Mapping[str, type], key: str) -> Any:
    """The declared type of the setting at the dotted `key`."""
    *path, name = key.split(".")
    for part in path:
        cls = section_types(cls, sections)[part]
        sections = {}
    return field_types(cls)[name]


def getattr_dotted(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _number(value: Any, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if integer else isinstance(value, (int, float)) and math.isfinite(value)


def parameter(key: str, spec: Any, annotation: Any, current: Any) -> Parameter:
    """One parameter from its spec, checked against the setting's type (`current`: its value in the base config)."""
    if not isinstance(spec, Mapping):
        raise UserError(f"expected {{type: float|int|categorical, ...}}, found {type(spec).__name__} {spec!r}")
    kind = spec.get("type")
    if kind not in TYPES:
        raise UserError(f"type={kind!r} is invalid; allowed: {', '.join(TYPES)}")
    extra = sorted(set(map(str, spec)) - set(FIELDS[kind]))
    if extra:
        raise UserError(f"{', '.join(extra)}: not a field of a {kind} parameter (allowed: {', '.join(FIELDS[kind])})")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise UserError(f"choices={choices!r} is invalid; allowed: a non-empty list of values")
        for choice in choices:
            if not (choice is None or isinstance(choice, (bool, int, float, str))):
                raise UserError(f"choice {choice!r} is invalid; allowed: numbers, strings, true, false, null")
            check_choice(choice, annotation, key)
        if len(set(map(repr, choices))) < len(choices):
            raise UserError(f"choices={choices!r} repeat a value")
        return Parameter(key, kind, choices=tuple(choices))
    integer = kind == "int"
    if integer and (isinstance(current, float) or not isinstance(current, int) or isinstance(current, bool)):
        raise UserError(f"an int parameter on a setting of type {type(current).__name__}; use float or categorical")
    if not integer and (not isinstance(current, float)):
        raise UserError(f"a float parameter on a setting of type {type(current).__name__}; use "
                        f"{'int' if isinstance(current, int) and not isinstance(current, bool) else 'categorical'}")
    low, high, step, log = spec.get("low"), spec.get("high"), spec.get("step"), spec.get("log", False)
    number = "an integer" if integer else "a finite number"
    for name, value in (("low", low), ("high", high)):
        if not _number(value, integer):
            raise UserError(f"{name}={value!r} is invalid; allowed: {number}")
    assert low is not None and high is not None
    if low > high:
        raise UserError(f"low={low!r} is above high={high!r}")
    if not isinstance(log, bool):
        raise UserError(f"log={log!r} is invalid; allowed: true, false")
    if log and low <= 0:
        raise UserError(f"low={low!r} is invalid with log: true; allowed: a number > 0")
    if step is not None:
        if not _number(step, integer) or step <= 0:
            raise UserError(f"step={step!r} is invalid; allowed: {number} > 0")
        if log:
            raise UserError("step and log: true cannot be combined (a log scale has no fixed step)")
    return Parameter(key, kind, low, high, log, step)


def check_choice(value: Any, annotation: Any, key: str) -> None:
    """A categorical choice has the setting's type (a number for a float setting, one of a literal's values)."""
    try:
        check_type(value, annotation, key)
    except UserError as e:
        raise UserError(str(e).removeprefix(f"config: {key}=").replace(" is invalid", " is an invalid choice", 1)
                        ) from None


def describe(parameters: list[Parameter]) -> str:
    return "; ".join(p.describe() for p in parameters)
