"""What `syncfree bench` measures: profiles, sizes, repeats, and the training config of each measured run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from syncfree.config import TrainConfig
from syncfree.core.switches import PerfConfig
from syncfree.envs.tasks import GYMNASIUM_PREFIX
from syncfree.presets import preset

Profile = Literal["quick", "full", "gpu-smoke"]

PROFILES: dict[str, dict[str, Any]] = {
    "quick": dict(num_envs=[64, 1024], scaling=[], ablations=False, repeats=3, iterations=2),
    "full": dict(num_envs=[64, 4096], scaling=[16, 64, 256, 1024, 4096, 16384], ablations=True, repeats=3,
                 iterations=2),
    "gpu-smoke": dict(num_envs=[1024, 4096], scaling=[], ablations=False, repeats=3, iterations=3),
}
"""The profiles' defaults for the feed-forward tasks (sizes in envs)."""
RECURRENT_PROFILES: dict[str, dict[str, Any]] = {
    "quick": dict(num_envs=[16, 64], scaling=[], ablations=False, repeats=3, iterations=1),
    "full": dict(num_envs=[16, 256], scaling=[4, 16, 64, 256], ablations=True, repeats=3, iterations=1),
    "gpu-smoke": dict(num_envs=[64, 256], scaling=[], ablations=False, repeats=3, iterations=1),
}
"""The profiles' defaults for the recurrent tasks (grid-arena; sizes in MettaGrid simulations)."""
GYMNASIUM_PROFILES: dict[str, dict[str, Any]] = {
    "quick": dict(num_envs=[16, 64], scaling=[], ablations=False, repeats=3, iterations=1),
    "full": dict(num_envs=[16, 64], scaling=[4, 16, 64, 256], ablations=True, repeats=3, iterations=1),
    "gpu-smoke": dict(num_envs=[16, 64], scaling=[], ablations=False, repeats=3, iterations=1),
}
"""The profiles' defaults for `gym:<id>` tasks (sizes in Gymnasium envs, which step on the host one after another:
the presets run 16)."""


@dataclass
class BenchConfig:
    """What to measure. Sizes and steps default to the task's preset and the profile.

    Profile defaults (`num_envs`; `scaling`; ablations; repeats x iterations):

    - feed-forward tasks, sizes in envs: quick [64, 1024]; none; off; 3 x 2. full [64, 4096]; [16, 64, 256, 1024,
      4096, 16384]; on; 3 x 2. gpu-smoke [1024, 4096]; none; off; 3 x 3.
    - grid-arena (recurrent algorithm), sizes in MettaGrid simulations of `env.grid.agents_per_env` agents each (the
      preset's 4: 64 to 1024 agents), where one iteration of 256 simulations takes tens of seconds on one CPU
      thread: quick [16, 64]; none; off; 3 x 1. full [16, 256]; [4, 16, 64, 256]; on; 3 x 1. gpu-smoke [64, 256];
      none; off; 3 x 1 (MettaGrid steps on the CPU whatever the device).
    - `gym:<id>` tasks, sizes in Gymnasium envs (stepped on the host, one after another): quick [16, 64]; none; off;
      3 x 1. full [16, 64]; [4, 16, 64, 256]; on; 3 x 1. gpu-smoke as quick.
    """

    task: str = "point-mass"
    """A built-in task (`syncfree tasks`) or `gym:<id>`, a Gymnasium env."""
    backend: str = ""
    """g1-track's physics backend (`env.backend`: torch, mujoco, mujoco-warp; empty: the task's default)."""
    profile: Profile = "quick"
    num_envs: list[int] = field(default_factory=list)
    """Sizes for the configuration comparison (empty: the profile's)."""
    scaling: list[int] = field(default_factory=list)
    """Sizes for the scaling sweep (empty: the profile's; the quick and gpu-smoke profiles have none)."""
    ablations: bool | None = None
    """Leave-one-out and add-one-in rows for every switch that acts at the bench's sizes (default: only in the full
    profile; `syncfree.bench.matrix` leaves out the inert ones and says why)."""
    add_one_in: bool = True
    """With ablations: the add-one-in rows too (false: leave-one-out only, half the trainers and memory)."""
    rows: list[str] = field(default_factory=list)
    """Only these configurations, by their names in the report (e.g. `optimized - autocast`, `baseline +
    compile`); `baseline` and `optimized` always run. Empty: all of them."""
    repeats: int = 0
    """Interleaved repeats (0: the profile's)."""
    iterations: int = 0
    """Timed training iterations per configuration and repeat (0: the profile's)."""
    warmup: int = 1
    """Untimed iterations per configuration before the first repeat."""
    min_seconds: float = 1.0
    """Each measurement runs at least this long (more iterations at small sizes, where one is short)."""
    device: str = "auto"
    threads: int = 0
    """torch intra-op threads (0: leave torch's default)."""
    compile: bool = True
    """False: every configuration runs eagerly and the `compile` rows are left out (no compile time to wait
    for; for checking the bench itself)."""
    seed: int = 0

    def resolved(self) -> BenchConfig:
        if self.task.startswith(GYMNASIUM_PREFIX):
            defaults = GYMNASIUM_PROFILES[self.profile]
        else:
            defaults = (RECURRENT_PROFILES if is_recurrent(self.task) else PROFILES)[self.profile]
        out = dataclasses.replace(self)
        for key, value in defaults.items():
            if getattr(out, key) in (None, 0, []):
                setattr(out, key, value)
        return out


def is_recurrent(task: str) -> bool:
    """Whether the task trains a recurrent policy (with `RecurrentPPO`; grid-arena)."""
    return preset(task).policy.kind == "recurrent"


def train_config(bench: BenchConfig, num_envs: int, perf: PerfConfig) -> TrainConfig:
    cfg = preset(bench.task)
    cfg.env.num_envs, cfg.perf, cfg.seed, cfg.device = num_envs, perf, bench.seed, bench.device
    cfg.env.backend = bench.backend
    cfg.log.progress = False
    batch = num_envs * cfg.ppo.steps_per_env
    if cfg.policy.kind == "recurrent":  # minibatches of whole BPTT segments
        batch = num_envs * cfg.env.grid.agents_per_env * (cfg.ppo.steps_per_env // cfg.ppo.bptt_horizon)
    while batch % cfg.ppo.num_minibatches:
        cfg.ppo.num_minibatches -= 1
    return cfg
