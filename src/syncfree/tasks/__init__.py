"""The task registry: every task, built-in or from a family such as `gym:<id>`, is one `TaskSpec` that owns its
env's settings type, presets, env factory, default algorithm and renderer. Each module of this package declares its tasks in
`TASKS` (and families in `SOURCES`); adding a task is its env and one module here. `register` adds a task from
outside the package."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil
from typing import Any

import torch

from syncfree.algo import algorithm_for
from syncfree.config import TrainConfig
from syncfree.core.switches import Scope
from syncfree.envs.adapters.host_worker import usable_cores
from syncfree.envs.api import VecEnv
from syncfree.errors import UserError
from syncfree.policy import actor_critic
from syncfree.tasks.configs import (
    choose_algorithm,
    config_file_arguments,
    config_from_dict,
    config_type,
    default_config,
    stored_algorithm,
    upgrade_config,
    validated,
    with_algorithm,
)
from syncfree.tasks.spec import TaskSource, TaskSpec, missing_extra

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
        if info.name in ("spec", "configs"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for spec in (*getattr(module, "TASKS", ()), *getattr(module, "SOURCES", ())):
            register(spec)


def find_task(name: str) -> TaskSpec | None:
    """The spec of a task name, or None when no task or family has it."""
    if name in TASKS:
        return TASKS[name]
    source = source_of(name)
    return source.resolve(name) if source is not None else None


def source_of(name: str) -> TaskSource | None:
    """The family that claims a task name, or None."""
    ordered = sorted(SOURCES.values(), key=lambda s: s.matches is not None)  # prefixes first: `gym:` is no module
    return next((s for s in ordered if s.claims(name)), None)


def action_map_of(name: str) -> str:
    """What a task's envs do to continuous actions after the policy gives them (`TaskSpec.action_map`; "" for a
    name no task or family has), read from the registry without making the task's spec (no package is imported)."""
    if name in TASKS:
        return TASKS[name].action_map
    source = source_of(name)
    return source.action_map if source is not None else ""


def task_names() -> list[str]:
    """The tasks and families, as a user names them."""
    return [*sorted(TASKS), *(s.usage for s in SOURCES.values())]


def listing() -> list[tuple[str, str]]:
    """`syncfree tasks`: (name, description) of every task and family, and the ids of the families that list
    theirs (or why they cannot be listed here)."""
    rows = [(spec.name, spec.description + own_presets(spec) + missing_extra(spec.needs))
            for spec in TASKS.values()]
    for source in SOURCES.values():
        rows.append((source.usage, source.description + missing_extra(source.needs)))
        if source.listing is not None:
            try:
                rows += [(f"{source.prefix}{name}", "") for name in source.listing()]
            except UserError as e:
                rows.append(("", f"({e})"))
    return rows


def own_presets(spec: TaskSpec) -> str:
    """`; own presets for --algorithm sac, td3` for a task with presets for other algorithms than its own."""
    return f"; own presets for --algorithm {', '.join(spec.algorithm_presets)}" if spec.algorithm_presets else ""


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


def preset(task: str, size: str = "default", algorithm: str | None = None) -> TrainConfig:
    """The config `syncfree train --task` starts from (`size`: another of the task's presets, e.g. `small`), trained
    by `algorithm` (default: the task's own)."""
    return get_task(task).preset(size, task, algorithm)


def preset_or_none(task: str, algorithm: str | None = None) -> TrainConfig | None:
    """The task's preset, or None for a name no task has (a user's own env) or one that cannot be built here."""
    try:
        return preset(task, algorithm=algorithm) if find_task(task) is not None else None
    except UserError:
        return None


def make_task_env(cfg: TrainConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
    """`num_envs` envs of `cfg.task` with the options its config gives (grid-arena: `num_envs` simulations)."""
    spec = get_task(cfg.task)
    if not isinstance(cfg.env, spec.env_config):
        raise UserError(f"config: task {cfg.task!r} reads a {spec.env_config.__name__} env section, not the "
                        f"{type(cfg.env).__name__} given (name the task with --task, so that its preset gives the "
                        "options)")
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


_discover()

__all__ = ["SOURCES", "TASKS", "TaskSource", "TaskSpec", "action_map_of", "check_task", "choose_algorithm", "config_file_arguments",
           "config_from_dict", "config_type", "default_config", "find_task", "get_task", "make_env", "make_task_env",
           "preset", "preset_or_none", "register", "source_of", "stored_algorithm", "switch_scope", "task_names", "upgrade_config",
           "validated", "with_algorithm"]
