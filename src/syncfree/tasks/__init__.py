"""The task registry: every task, built-in or from a family such as `gym:<id>`, is one `TaskSpec` that owns its
config type, presets, env factory, algorithm and renderer. Each module of this package declares its tasks in
`TASKS` (and families in `SOURCES`); adding a task is its env and one module here. `register` adds a task from
outside the package."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import pkgutil
import typing
from typing import Any, cast

import torch

from syncfree.algo import algorithm_for
from syncfree.config import (
    PolicyConfig,
    PPOConfig,
    RecurrentFlatTrainConfig,
    RecurrentMLPPolicyConfig,
    RecurrentPPOConfig,
    RecurrentTrainConfig,
    TrainConfig,
    from_dict,
)
from syncfree.core.switches import Scope
from syncfree.envs.adapters.host_worker import usable_cores
from syncfree.envs.api import VecEnv
from syncfree.errors import UserError
from syncfree.policy import actor_critic
from syncfree.tasks.spec import TaskSource, TaskSpec

TASKS: dict[str, TaskSpec] = {}
"""The built-in tasks (and those `register`ed), by name."""
SOURCES: dict[str, TaskSource] = {}
"""Task families by prefix (`gym:`)."""


def register(spec: TaskSpec | TaskSource) -> None:
    """Add a task (or a family of tasks) to the registry; a name already taken is an error."""
    table: dict[str, Any] = SOURCES if isinstance(spec, TaskSource) else TASKS
    key = spec.prefix if isinstance(spec, TaskSource) else spec.name
    if key in table and table[key] is not spec:
        raise ValueError(f"task {key!r} is registered already")
    table[key] = spec


def _discover() -> None:
    """Register the tasks and families every module of this package declares."""
    for info in pkgutil.iter_modules(__path__):
        if info.name == "spec":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for spec in (*getattr(module, "TASKS", ()), *getattr(module, "SOURCES", ())):
            register(spec)


def find_task(name: str) -> TaskSpec | None:
    """The spec of a task name, or None when no task or family has it."""
    if name in TASKS:
        return TASKS[name]
    ordered = sorted(SOURCES.values(), key=lambda s: s.matches is not None)  # prefixes first: `gym:` is no module
    source = next((s for s in ordered if s.claims(name)), None)
    return source.resolve(name) if source is not None else None


def task_names() -> list[str]:
    """The tasks and families, as a user names them."""
    return [*sorted(TASKS), *(s.usage for s in SOURCES.values())]


def listing() -> list[tuple[str, str]]:
    """`syncfree tasks`: (name, description) of every task and family, and the ids of the families that list
    theirs (or why they cannot be listed here)."""
    rows = [(spec.name, spec.description) for spec in TASKS.values()]
    for source in SOURCES.values():
        rows.append((source.usage, source.description))
        if source.listing is not None:
            try:
                rows += [(f"{source.prefix}{name}", "") for name in source.listing()]
            except UserError as e:
                rows.append(("", f"({e})"))
    return rows


def get_task(name: str, where: str = "config") -> TaskSpec:
    """The spec of `name`; one line naming the allowed tasks when there is none (`where`: the line's first word)."""
    spec = find_task(name)
    if spec is None:
        near = difflib.get_close_matches(name, [n for n in task_names() if not n.endswith(">")], n=1)
        raise UserError(f"{where}: task={name!r} is invalid; allowed: {', '.join(task_names())}"
                        + (f"; did you mean {near[0]}?" if near else ""))
    return spec


def check_task(name: str, where: str = "config") -> None:
    get_task(name, where)


def preset(task: str, size: str = "default") -> TrainConfig:
    """The config `syncfree train --task` starts from (`size`: another of the task's presets, e.g. `small`)."""
    return get_task(task).preset(size, task)


def preset_or_none(task: str) -> TrainConfig | None:
    """The task's preset, or None for a name no task has (a user's own env) or one that cannot be built here."""
    try:
        return preset(task) if find_task(task) is not None else None
    except UserError:
        return None


def config_class(task: str, kind: str = "") -> type[TrainConfig]:
    """The task's config type (`TrainConfig` for a name no task has: a user's own env); with `kind="recurrent"` on
    a task whose type trains no recurrent policy, its recurrent variant (`recurrent_variant`)."""
    spec = find_task(task)
    cls = spec.config if spec is not None else TrainConfig
    return recurrent_variant(cls) if kind == "recurrent" else cls


_RECURRENT_VARIANTS: dict[type[TrainConfig], type[TrainConfig]] = {}


def recurrent_variant(cls: type[TrainConfig]) -> type[TrainConfig]:
    """The config type of `policy.kind=recurrent` on a task of config type `cls`: `cls`'s sections (its env's
    options) with the recurrent MLP policy, PPO on BPTT segments and the losses section of
    `RecurrentFlatTrainConfig`. A type that trains a recurrent policy already is its own variant."""
    if issubclass(cls, RecurrentTrainConfig):
        return cls
    if cls not in _RECURRENT_VARIANTS:
        # the task's own sections are declared again: a dataclass base's fields (`RecurrentFlatTrainConfig`'s
        # inherited `env: EnvConfig`) would otherwise replace those of the bases after it
        hints = typing.get_type_hints(cls)
        own = [(f.name, hints[f.name], dataclasses.field(default_factory=f.default_factory))
               for f in dataclasses.fields(cls) if f.name not in _RECURRENT_SECTIONS
               and f.default_factory is not dataclasses.MISSING]
        _RECURRENT_VARIANTS[cls] = dataclasses.make_dataclass(
            f"Recurrent{cls.__name__}", own, bases=(RecurrentFlatTrainConfig, cls),
            namespace={"__doc__": f"{cls.__doc__}\n\n{RecurrentFlatTrainConfig.__doc__}", "__module__": cls.__module__})
    return _RECURRENT_VARIANTS[cls]


_RECURRENT_SECTIONS = ("policy", "ppo", "losses")
"""The sections the recurrent variant of a config type takes from `RecurrentFlatTrainConfig`."""


def with_policy_kind(cfg: TrainConfig, kind: str) -> TrainConfig:
    """`cfg` for training the policy of `kind`: for `recurrent` on a type that trains none, its values in the
    recurrent variant (the MLP fields kept, the rollout one BPTT segment per env: `ppo.bptt_horizon=0`); any
    other kind leaves `cfg` as it is (its validation says whether the task trains it)."""
    cls = config_class(cfg.task, kind) if kind == "recurrent" else type(cfg)
    if cls is type(cfg):
        return cfg
    shared = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in ("policy", "ppo")}
    ppo = {f.name: getattr(cfg.ppo, f.name) for f in dataclasses.fields(PPOConfig)}
    policy = {f.name: getattr(cfg.policy, f.name) for f in dataclasses.fields(PolicyConfig)}
    return cls(**shared, policy=RecurrentMLPPolicyConfig(**{**policy, "kind": "recurrent"}),
               ppo=RecurrentPPOConfig(**ppo, bptt_horizon=0))


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """A config stored as a dict (a checkpoint's, a run's `config.yaml`) as its task's config type (the recurrent
    variant when its `policy.kind` says so); a dict of the earlier layout, in which every config held every task's
    options, is read too."""
    policy = data.get("policy")
    kind = str(policy.get("kind", "")) if isinstance(policy, dict) else ""
    cls = config_class(str(data.get("task", TrainConfig.task)), kind)
    return cast(TrainConfig, from_dict(cls, upgrade_config(data, cls)))


def make_task_env(cfg: TrainConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
    """`num_envs` envs of `cfg.task` with the options its config gives (grid-arena: `num_envs` simulations)."""
    spec = get_task(cfg.task)
    if not isinstance(cfg, spec.config):
        raise UserError(f"config: task {cfg.task!r} reads a {spec.config.__name__}, not the {type(cfg).__name__} given "
                        "(name the task with --task, so that its preset gives the options)")
    return spec.make_env(cfg, num_envs, device, seed)


def make_env(task: str, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
             **env_options: Any) -> VecEnv:
    """`num_envs` envs of `task` with its preset's options, any of them replaced by `env_options` (fields of the
    task's `env` section, e.g. `max_episode_length=10`)."""
    cfg = preset(task)
    names = {f.name for f in dataclasses.fields(cfg.env)}
    unknown = sorted(set(env_options) - names)
    if unknown:
        raise UserError(f"env: task {task!r} has no option {', '.join(unknown)} (its env options: "
                        f"{', '.join(sorted(names))})")
    cfg.env = dataclasses.replace(cfg.env, num_envs=num_envs, **env_options)
    cfg.env.validate()
    return make_task_env(cfg, num_envs, torch.device(device), seed)


def switch_scope(cfg: TrainConfig, device: torch.device | str = "cpu", world_size: int = 1,
                 env_layer: bool | None = None, env_switches: frozenset[str] | None = None,
                 policy: torch.nn.Module | None = None) -> Scope:
    """Where a run of `cfg` on `device` with `world_size` processes stands for the perf switches (`env_layer`: the
    env is manager-based; `env_switches`: the switches the env reads itself; by default, as the task's spec
    says; `policy`: the run's built policy, which then decides what `autocast=auto` lowers, else the config
    does)."""
    spec = find_task(cfg.task)
    if env_layer is None:
        env_layer = spec is not None and spec.env_layer
    if env_switches is None:
        env_switches = spec.env_switches if spec is not None else frozenset()
    scope = algorithm_for(cfg).scope(cfg, torch.device(device).type, world_size, env_layer)
    if policy is not None:
        scope = dataclasses.replace(scope, auto_precision_modules=actor_critic.auto_lowers(policy, scope.policy_rows))
    return dataclasses.replace(scope, native_bf16=actor_critic.native_bf16(torch.device(device)),
                               env_switches=env_switches, num_envs=cfg.env.num_envs, host_cores=usable_cores())


# -- configs of the earlier layout -------------------------------------------------------------------------------

_EARLIER_ENV_SECTIONS = ("g1", "grid")
"""Sections of the earlier `env` layout, each the options of one task, held by every config."""


def upgrade_config(data: dict[str, Any], cls: type[TrainConfig]) -> dict[str, Any]:
    """`data` in the layout of `cls` when it is of the earlier one (recognised by its `env.g1` and `env.grid`
    sections): each option moved to where `cls` keeps it (`env.g1.history` -> `env.history`, `env.grid.map` ->
    `env.map`, a set `env.max_episode_length` -> a grid's `env.max_steps`), and the options of other tasks and
    algorithms, which this task never read, dropped. Any other dict is returned as it is."""
    env = data.get("env")
    if not isinstance(env, dict) or not all(isinstance(env.get(s), dict) for s in _EARLIER_ENV_SECTIONS):
        return data
    out = copy.deepcopy(data)
    env = out["env"]
    flat = {k: v for k, v in env.items() if k not in _EARLIER_ENV_SECTIONS}
    for section in _EARLIER_ENV_SECTIONS:
        flat.update(env[section])
    if flat.get("backend") == "":
        flat["backend"] = "torch"
    if env.get("max_episode_length"):
        flat["max_steps"] = env["max_episode_length"]
    env_fields = _field_names(cls, "env")
    if "max_steps" in env_fields:
        flat.pop("max_episode_length", None)
    out["env"] = {k: v for k, v in flat.items() if k in env_fields}
    for section in ("policy", "ppo"):
        if isinstance(out.get(section), dict):
            names = _field_names(cls, section) - set(getattr(_section_type(cls, section), "UNREAD", ()))
            out[section] = {k: v for k, v in out[section].items() if k in names}
    if "losses" in out and "losses" not in {f.name for f in dataclasses.fields(cls)}:
        del out["losses"]
    return out


def config_file_arguments(argv: list[str], path: str, data: dict[str, Any], cls: type[TrainConfig]) -> list[str]:
    """`argv` with the config file at `path` (read as `data`) given as its content in the layout of `cls` when it
    is of the earlier layout (a run's `config.yaml` of an earlier version), else `argv` as it is."""
    upgraded = upgrade_config(data, cls)
    if upgraded is data:
        return argv
    import yaml

    content = yaml.safe_dump(upgraded, sort_keys=False)
    return [content if a == path else f"--config={content}" if a == f"--config={path}" else a for a in argv]


def _section_type(cls: type[TrainConfig], section: str) -> type:
    field = next(f for f in dataclasses.fields(cls) if f.name == section)
    return cast(type, field.default_factory)  # a section's default factory is its dataclass


def _field_names(cls: type[TrainConfig], section: str) -> set[str]:
    return {f.name for f in dataclasses.fields(_section_type(cls, section))}


_discover()

__all__ = ["SOURCES", "TASKS", "TaskSource", "TaskSpec", "check_task", "config_class", "config_file_arguments",
           "config_from_dict", "find_task", "get_task", "make_env", "make_task_env", "preset", "recurrent_variant",
           "register",
           "switch_scope", "task_names", "upgrade_config", "with_policy_kind"]
