"""`module:factory`: your own env as a task (`syncfree train --task my_envs:make_reach`), in every command that takes
a task. The checkpoints record the name as data: `eval` and `--resume` import the module only when their command
line names it too (`--task my_envs:make_reach`) or trusts the file (`--trust`); `export` needs neither.

The factory is a callable of an importable module (the `syncfree` command finds it in the current folder, as
`python -m` does; in Python, on `sys.path`). It returns a syncfree `VecEnv` or an rsl_rl-style one
(`get_observations`, `step` returning four values; adapted as `syncfree.envs.adapters.from_rsl_rl.RslRlVecEnv`). It
is called with the keywords it takes of `num_envs`, `device` and `seed`; the preset's env count is its `num_envs`
default, or the count of an env made once to ask when it takes no `num_envs`. Every env it makes is checked
(`syncfree.check_env`) before anything is built on it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from syncfree.algo.configs import PPOTrainConfig
from syncfree.config import EnvConfig, TrainConfig
from syncfree.core.imports import allow_import, is_callable_name, load_callable
from syncfree.envs.api import VecEnv
from syncfree.envs.check import check_env
from syncfree.errors import UserError
from syncfree.tasks.spec import TaskSource, TaskSpec

is_factory_name = is_callable_name


def load(task: str, what: str = "") -> Callable[..., Any]:
    """The callable `task` names, if the running command or call allows its import (one line, beginning with
    `what`, naming what is missing when it cannot be found)."""
    if not is_factory_name(task):
        raise UserError(f"{what or f'task {task!r}'} is not module:factory")
    allow_import(task, "task", task.partition(":")[0])
    return load_callable(task, what or f"task {task!r}")


def as_vec_env(env: Any, what: str) -> VecEnv:
    """A syncfree `VecEnv` as it is; an rsl_rl-style env (`get_observations`, `num_actions`) through the adapter;
    anything else one line beginning with `what`."""
    if isinstance(env, VecEnv):
        return env
    if hasattr(env, "get_observations") and hasattr(env, "num_actions"):
        from syncfree.envs.adapters.from_rsl_rl import RslRlVecEnv

        return RslRlVecEnv(env)
    raise UserError(f"{what}: the factory returned a {type(env).__name__}, neither a syncfree VecEnv nor an rsl_rl "
                    "VecEnv")


def _parameters(factory: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        return {}


def build(task: str, num_envs: int | None, device: torch.device | str, seed: int) -> VecEnv:
    """The factory's env, made with the keywords it takes, adapted to a syncfree `VecEnv` and checked."""
    factory = load(task)
    takes = _parameters(factory)
    given = {"num_envs": num_envs, "device": str(device), "seed": seed}
    env = as_vec_env(factory(**{k: v for k, v in given.items() if k in takes and v is not None}), f"task {task!r}")
    try:
        check_env(env)
        env.reset()
        if num_envs is not None and env.num_envs != num_envs:
            why = ("it was asked for that many" if "num_envs" in takes else
                   "it takes no num_envs argument: give it one, or leave env.num_envs at the preset's")
            raise UserError(f"task {task!r}: env.num_envs={num_envs}, but the factory made {env.num_envs} envs "
                            f"({why})")
    except BaseException:
        env.close()  # a refused env releases what it holds (simulators, threads)
        raise
    return env


def preset(task: str) -> PPOTrainConfig:
    """syncfree's defaults, with the factory's env count and device: its `num_envs` and `device` defaults, else
    those of an env made once to ask."""
    takes = _parameters(load(task))
    cfg = PPOTrainConfig(task=task)
    defaults = {name: p.default for name, p in takes.items() if p.default is not inspect.Parameter.empty}
    if isinstance(defaults.get("num_envs"), int) and "device" in takes:
        cfg.env.num_envs = defaults["num_envs"]
        cfg.device = str(defaults.get("device", cfg.device))
    else:
        env = build(task, None, defaults.get("device", "cpu"), 0)
        cfg.env.num_envs, cfg.device = env.num_envs, str(env.device)
        env.close()
    return cfg


def resolve(task: str) -> TaskSpec:
    def make_env(cfg: TrainConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
        return build(task, num_envs, device, seed)

    return TaskSpec(task, f"your env from {task}", EnvConfig, {"default": preset}, make_env, "ppo",
                    cannot_render="an env from a factory has no renderer syncfree knows", imports=task.partition(":")[0])


SOURCES = (TaskSource("<module>:<factory>", "<module>:<factory>", "your own env: a callable returning a syncfree "
                      "VecEnv or an rsl_rl VecEnv (num_envs, device, seed passed where it takes them)", resolve,
                      matches=is_factory_name),)
