"""Registry of built-in tasks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from syncfree.envs.api import VecEnv
from syncfree.envs.tasks.classic import CartPole, Pendulum
from syncfree.envs.tasks.point_mass import PointMass


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    make: Callable[..., VecEnv]
    """`make(num_envs, device, seed, max_episode_length)`."""


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("cartpole", "CartPole-v1 dynamics, 2 discrete actions, 500-step limit", CartPole),
        Task("cartpole-continuous", "CartPole-v1 dynamics, force in [-10, 10] N, 500-step limit",
             lambda *a, **k: CartPole(*a, **k, continuous=True)),
        Task("pendulum", "Pendulum-v1 swing-up, torque in [-2, 2] N·m, 200-step limit", Pendulum),
        Task("point-mass", "2-D point mass pushed to the origin, 2 continuous actions, 200-step limit "
             "(the benchmark's toy task)", PointMass),
    )
}


def make_env(task: str, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
             max_episode_length: int = 0) -> VecEnv:
    return TASKS[task].make(num_envs, device, seed, max_episode_length)
