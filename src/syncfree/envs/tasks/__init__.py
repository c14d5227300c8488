"""Registry of built-in tasks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from syncfree.envs.api import VecEnv
from syncfree.envs.tasks.classic import CartPole, Pendulum
from syncfree.envs.tasks.point_mass import PointMass
from syncfree.errors import UserError


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    make: Callable[..., VecEnv]
    """`make(num_envs, device, seed, max_episode_length, **options)`."""
    options: tuple[str, ...] = ()
    """Options this task reads: `EnvConfig` fields (e.g. `robot`, `motions`), `tokenizer` (compute the token
    policy's observation group) and `perf` (the env-side switches)."""


def _g1_track(*args: Any, **kwargs: Any) -> VecEnv:
    from syncfree.envs.tasks.g1_track import make_g1_track  # imports mujoco: only when asked for

    return make_g1_track(*args, **kwargs)


def _grid_arena(num_envs: int, device: torch.device | str, seed: int, max_episode_length: int = 0,
                grid: Any = None) -> VecEnv:
    """`num_envs` MettaGrid simulations of `grid` (the `env.grid` section of the config, read by attribute; the
    defaults of `MettaGridSpec` when None)."""
    try:  # imports mettagrid: only when asked for
        from syncfree.envs.adapters.mettagrid import MettaGridSpec, MettaGridVecEnv
    except ImportError:
        raise UserError("task grid-arena needs MettaGrid: pip install 'syncfree[grid]'") from None

    return MettaGridVecEnv(MettaGridSpec.from_options(grid, max_episode_length), num_envs, device, seed)


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("cartpole", "CartPole-v1 dynamics, 2 discrete actions, 500-step limit", CartPole),
        Task("cartpole-continuous", "CartPole-v1 dynamics, force in [-10, 10] N, 500-step limit",
             lambda *a, **k: CartPole(*a, **k, continuous=True)),
        Task("pendulum", "Pendulum-v1 swing-up, torque in [-2, 2] N·m, 200-step limit", Pendulum),
        Task("point-mass", "2-D point mass pushed to the origin, 2 continuous actions, 200-step limit "
             "(the benchmark's toy task)", PointMass),
        Task("g1-track", "Unitree G1 (29 joints) tracks whole-body reference motions; physics: torch PD joints "
             "with the root driven along the reference (default), or MuJoCo / MuJoCo Warp with contacts "
             "(env.backend); adaptive start sampling", _g1_track, options=("robot", "motions", "backend", "tokenizer", "perf", "g1")),
        Task("grid-arena", "MettaGrid gridworld (C++ core, CPU), many agents per simulation, token observations, "
             "5 discrete actions; map from env.grid (default: mines, which pay a heart per push); recurrent policy",
             _grid_arena, options=("grid",)),
    )
}


SECTIONS = ("perf", "grid", "g1")
"""Options that are whole config sections, always given: a task that does not read one ignores it."""

GYMNASIUM_PREFIX = "gym:"
"""`gym:<id>` names a registered Gymnasium env (e.g. `gym:Humanoid-v5`), run as CPU vector envs."""


def is_task(name: str) -> bool:
    return name in TASKS or (name.startswith(GYMNASIUM_PREFIX) and len(name) > len(GYMNASIUM_PREFIX))


def check_task(name: str, where: str = "config") -> None:
    """One line naming the allowed tasks when `name` is none of them (`where`: the message's first word)."""
    if not is_task(name):
        raise UserError(f"{where}: task={name!r} is invalid; allowed: {', '.join(sorted(TASKS))}, "
                        f"{GYMNASIUM_PREFIX}<id> (a Gymnasium env)")


def make_env(task: str, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
             max_episode_length: int = 0, **options: Any) -> VecEnv:
    """Options left at their empty defaults are dropped, and so are config sections (`perf`, `grid`) the task does
    not read; a set option the task does not read is an error."""
    if task.startswith(GYMNASIUM_PREFIX):
        return _make_gymnasium(task, num_envs, device, seed, max_episode_length, options)
    check_task(task)
    spec = TASKS[task]
    options = {k: v for k, v in options.items() if v and (k not in SECTIONS or k in spec.options)}
    for key in options:
        if key not in spec.options:
            raise UserError(f"env.{key}: task {task!r} does not use it"
                            + (f" (it reads {', '.join('env.' + o for o in spec.options)})" if spec.options else ""))
    return spec.make(num_envs, device, seed, max_episode_length, **options)


def _make_gymnasium(task: str, num_envs: int, device: torch.device | str, seed: int, max_episode_length: int,
                    options: dict[str, Any]) -> VecEnv:
    from syncfree.envs.adapters.gymnasium import make_gymnasium

    unused = [f"env.{k}" for k, v in options.items() if v and k not in SECTIONS]
    if max_episode_length:
        unused.append("env.max_episode_length")
    if unused:
        raise UserError(f"{', '.join(unused)}: task {task!r} does not use it (Gymnasium envs keep their own "
                        "time limit)")
    return make_gymnasium(task[len(GYMNASIUM_PREFIX):], num_envs, device, seed)
