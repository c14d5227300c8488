"""A task is one registry entry: its config type, presets, env factory, algorithm, renderer and help."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from syncfree.algo.base import Algorithm
from syncfree.config import TrainConfig
from syncfree.envs.api import VecEnv

EnvFactory = Callable[[Any, int, torch.device, int], VecEnv]
"""`make_env(cfg, num_envs, device, seed)`: `num_envs` envs of the task with the options its config gives (the
config is the task's own type)."""

Drawer = Callable[[], np.ndarray]
"""Draws env 0 as it is now: an [height, width, 3] uint8 image."""

Renderer = Callable[[Any, torch.device, int, int, int], tuple[VecEnv, Drawer]]
"""`render(cfg, device, seed, width, height)`: one env of the task made to be drawn, and its drawer."""

Preset = Callable[[str], TrainConfig]
"""A preset: the task's config for the task name it is given (a `gym:<id>` family shares its presets)."""

BenchSizes = dict[str, Any]
"""A bench profile's defaults for a task: `num_envs`, `scaling`, `ablations`, `repeats`, `iterations`."""

FLAT_BENCH_PROFILES: dict[str, BenchSizes] = {
    "quick": dict(num_envs=[64, 1024], scaling=[], ablations=False, repeats=3, iterations=2),
    "full": dict(num_envs=[64, 4096], scaling=[16, 64, 256, 1024, 4096, 16384], ablations=True, repeats=3,
                 iterations=2),
    "gpu-smoke": dict(num_envs=[1024, 4096], scaling=[], ablations=False, repeats=3, iterations=3),
}
"""The bench's profiles for a task of cheap device-resident envs (sizes in envs)."""


@dataclass(frozen=True)
class TaskSpec:
    """Everything syncfree knows of a task; the rest of the package asks the spec rather than the task's name."""

    name: str
    description: str
    """One line for `syncfree tasks`."""
    config: type[TrainConfig]
    """The task's config type: `TrainConfig`, or a subclass whose sections hold what its envs, policy and
    algorithm read (settings typed once, each section validating itself)."""
    presets: Mapping[str, Preset]
    """Named presets; `default` is what `syncfree train --task` starts from."""
    make_env: EnvFactory
    algorithm: type[Algorithm]
    """The algorithm that trains the task's policies (its `config_type` is a base of `config`)."""
    env_layer: bool = False
    """The env is manager-based (observation groups, history, commands): it reads the env-side switches."""
    env_switches: frozenset[str] = frozenset()
    """Other perf switches the task's env reads itself (its `VecEnv.env_switches`)."""
    render: Renderer | None = None
    """How `syncfree play` draws the task; None: it cannot be drawn, for the reason in `cannot_render`."""
    cannot_render: str = ""
    bench_profiles: Mapping[str, BenchSizes] = field(default_factory=lambda: FLAT_BENCH_PROFILES)
    """`syncfree bench`'s default sizes and repeats per profile."""
    env_only: Callable[[Any, int, int], dict[str, Any]] | None = None
    """`env_only(cfg, num_envs, repeats)`: the bench's report of the env's own stepping speed (e.g. a simulator
    alone and through its adapter), beside the training rows; None: not reported."""

    def __post_init__(self) -> None:
        if "default" not in self.presets:
            raise ValueError(f"task {self.name!r}: its presets need a 'default' one")
        if not issubclass(self.config, self.algorithm.config_type):
            raise ValueError(f"task {self.name!r}: config type {self.config.__name__} is not a "
                             f"{self.algorithm.config_type.__name__}, which {self.algorithm.__name__} trains from")

    def preset(self, size: str = "default", name: str | None = None) -> TrainConfig:
        """The preset named `size`, for the task name `name` (default: the spec's)."""
        if size not in self.presets:
            from syncfree.errors import UserError

            raise UserError(f"task {self.name}: no preset {size!r}; it has {', '.join(self.presets)}")
        return self.presets[size](name or self.name)


@dataclass(frozen=True)
class TaskSource:
    """A family of tasks named `<prefix><id>` (e.g. `gym:Hopper-v5`), resolved to a spec per id."""

    prefix: str
    usage: str
    """How the family is named, e.g. `gym:<id>`."""
    description: str
    """One line for `syncfree tasks`."""
    resolve: Callable[[str], TaskSpec]
    """The spec of a full task name (prefix included)."""
    matches: Callable[[str], bool] | None = None
    """Whether a name is one of the family's, for a family named by a pattern rather than a prefix (`module:factory`;
    families with a prefix are asked first)."""
    listing: Callable[[], list[str]] | None = None
    """The ids the family has (`syncfree tasks` lists them), for families that can list theirs; raises `UserError`
    when they cannot be listed here (their package is missing)."""

    def claims(self, name: str) -> bool:
        """Whether `name` is one of this family's tasks."""
        if self.matches is not None:
            return self.matches(name)
        return name.startswith(self.prefix) and len(name) > len(self.prefix)
