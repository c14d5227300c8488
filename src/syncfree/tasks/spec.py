"""A task is one registry entry: its env's settings type, presets, env factory, default algorithm, renderer and
help."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from syncfree.algo import algorithm_named
from syncfree.algo.configs import convert
from syncfree.config import EnvConfig, TrainConfig
from syncfree.envs.api import VecEnv
from syncfree.errors import UserError

EnvFactory = Callable[[Any, int, torch.device, int], VecEnv]
"""`make_env(cfg, num_envs, device, seed)`: `num_envs` envs of the task with the options its config gives (its
`env` section is of the task's `env_config` type)."""

Drawer = Callable[[], np.ndarray]
"""Draws env 0 as it is now: an [height, width, 3] uint8 image."""

Renderer = Callable[[Any, torch.device, int, int, int], tuple[VecEnv, Drawer]]
"""`render(cfg, device, seed, width, height)`: one env of the task made to be drawn, and its drawer."""

Preset = Callable[[str], TrainConfig]
"""A preset: the task's config for the task name it is given (a `gym:<id>` family shares its presets), of the
config type of the algorithm it names."""

ConfigCheck = Callable[[Any], None]
"""Checks across a task's sections that no section can make alone (g1-track: its env's encoder types against the token
policy's encoders); one line (`UserError`) naming the key."""

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
    env_config: type[EnvConfig]
    """The type of the task's `env` section: the options its envs read (settings typed once, validating itself)."""
    presets: Mapping[str, Preset]
    """Named presets; `default` is what `syncfree train --task` starts from (its algorithm is the task's)."""
    make_env: EnvFactory
    algorithm: str
    """The algorithm that trains the task unless `--algorithm` names another (`syncfree.algo.ALGORITHMS`)."""
    algorithm_presets: Mapping[str, Preset] = field(default_factory=dict)
    """Algorithm name -> what `--algorithm <name>` starts from on this task (e.g. pendulum's `sac` and `td3`); an
    algorithm without one starts from the default preset's settings it shares (`convert`)."""
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
    """`env_only(cfg, num_envs, repeats)`: the bench's report of the env's own stepping speed, beside the training
    rows: `{"steps_per_s": {loop: {"median", "min", "max"}}, "runs": repeats}`, env rows stepped per second with
    random actions drawn beforehand and no policy, per loop named as the report names it (e.g. a simulator alone,
    the first, which the report compares training with, and through its adapter); None: not reported."""
    sections: Mapping[str, Mapping[str, type]] = field(default_factory=dict)
    """Algorithm name -> the types the task gives some of that algorithm's sections (g1-track's PPO `policy` section
    offers the token policy too)."""
    check: ConfigCheck | None = None
    """Checks of a config of this task across its sections (after each section's own)."""
    needs: tuple[str, str] = ("", "")
    """The package the task's envs need and the extra that installs it (grid-arena: `mettagrid`, `grid`);
    `syncfree tasks` marks a task whose package is missing."""
    action_map: str = ""
    """What the task's envs do to continuous actions after the policy (the exported graph) gives them, for the
    sidecar's `action.env_map` (a Gymnasium adapter's map onto the Box); empty: nothing beyond `action_bounds`."""
    imports: str = ""
    """The module of the user's choosing that making the task's envs imports (a `module:factory`'s, a
    `gym:<module>:<id>`'s); empty when only installed packages run (`syncfree.core.imports.allow_import`)."""

    def __post_init__(self) -> None:
        if "default" not in self.presets:
            raise ValueError(f"task {self.name!r}: its presets need a 'default' one")
        if not issubclass(self.env_config, EnvConfig):
            raise ValueError(f"task {self.name!r}: env_config {self.env_config.__name__} is not an EnvConfig")
        if self.algorithm in self.algorithm_presets:
            raise ValueError(f"task {self.name!r}: its own algorithm {self.algorithm!r} takes the default preset")

    def section_types(self, algorithm: str) -> dict[str, type]:
        """The types this task gives the sections of a config of `algorithm`: its `env`, and any of `sections`."""
        return {"env": self.env_config, **self.sections.get(algorithm, {})}

    def preset(self, size: str = "default", name: str | None = None, algorithm: str | None = None) -> TrainConfig:
        """The preset named `size`, for the task name `name` (default: the spec's), trained by `algorithm` (default:
        the preset's own). Another algorithm's default is its own preset where the task has one
        (`algorithm_presets`), else the settings it shares with the preset (`convert`)."""
        if size not in self.presets:
            raise UserError(f"task {self.name}: no preset {size!r}; it has {', '.join(self.presets)}")
        if size == "default" and algorithm is not None and algorithm in self.algorithm_presets:
            return self.algorithm_presets[algorithm](name or self.name)
        cfg = self.presets[size](name or self.name)
        if algorithm is None or algorithm == cfg.algorithm:
            return cfg
        return convert(cfg, algorithm_named(algorithm).config_type, self.section_types(algorithm))


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
    needs: tuple[str, str] = ("", "")
    """The package the family's envs need and the extra that installs it (`gym:`: `gymnasium`, `gym`)."""
    action_map: str = ""
    """Its tasks' `TaskSpec.action_map`, known without resolving one (which may import the family's package)."""

    def claims(self, name: str) -> bool:
        """Whether `name` is one of this family's tasks."""
        if self.matches is not None:
            return self.matches(name)
        return name.startswith(self.prefix) and len(name) > len(self.prefix)


def missing_extra(needs: tuple[str, str]) -> str:
    """` (needs pip install 'syncfree[<extra>]')` when the package `needs` names is not installed, else ""."""
    import importlib.util

    package, extra = needs
    if not package or importlib.util.find_spec(package) is not None:
        return ""
    return f" (needs pip install 'syncfree[{extra}]')"
