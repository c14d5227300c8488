"""What `syncfree bench` measures: profiles, sizes, repeats, and the training config of each measured run."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from syncfree.config import TrainConfig, with_values
from syncfree.core.switches import PerfConfig
from syncfree.errors import UserError
from syncfree.tasks import get_task, preset, validated
from syncfree.train.arguments import config_parser

Profile = Literal["quick", "full", "gpu-smoke"]


@dataclass
class BenchConfig:
    """What to measure. Sizes and steps default to the task's preset and the profile.

    Profile defaults (`num_envs`; `scaling`; ablations; repeats x iterations) are each task's own
    (`syncfree.tasks.TaskSpec.bench_profiles`, sizes in what the task calls its envs); those of device-resident
    tasks: quick [64, 1024]; none; off; 3 x 2. full [64, 4096]; [16, 64, 256, 1024, 4096, 16384]; on; 3 x 2.
    gpu-smoke [1024, 4096]; none; off; 3 x 3. Tasks stepped on the host declare smaller ones (the `BENCH_PROFILES`
    of their module in `syncfree.tasks`).
    """

    task: str = "point-mass"
    """A built-in task (`syncfree tasks`) or `gym:<id>`, a Gymnasium env."""
    backend: str = ""
    """The env's physics backend, for a task whose env section has one (g1-track's `env.backend`: torch, mujoco,
    mujoco-warp); empty: the preset's."""
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
    """Untimed iterations per configuration before the first repeat, and then more until one has trained (an
    off-policy learner fills its buffer first); 0: none."""
    min_seconds: float = 1.0
    """Each measurement runs at least this long (more iterations at small sizes, where one is short)."""
    device: str = "auto"
    threads: int = 0
    """torch intra-op threads (0: leave torch's default)."""
    compile: bool = True
    """False: every configuration runs eagerly and the `compile` rows are left out (no compile time to wait
    for; for checking the bench itself)."""
    seed: int = 0
    algorithm: str = ""
    """The algorithm every configuration trains with (empty: the task's; `syncfree train --help` lists them), from
    the preset's settings it shares."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Settings of every configuration by dotted key, applied to the preset before the switches, e.g.
    `{"distill.teacher": "runs/t/latest.pt"}` (distillation's teacher)."""

    def checked(self) -> BenchConfig:
        """This config, after one line naming the first bad value."""
        get_task(self.task, "bench")
        for key in ("num_envs", "scaling"):
            if any(n < 1 for n in getattr(self, key)):
                raise UserError(f"bench: {key}={getattr(self, key)} is invalid; allowed: integers >= 1")
        if self.repeats < 0 or self.iterations < 0 or self.warmup < 0:
            raise UserError("bench: repeats, iterations and warmup must be >= 0")
        return self

    def resolved(self) -> BenchConfig:
        """Sizes, repeats and iterations left at 0 or empty take the task's profile defaults (`TaskSpec.
        bench_profiles`)."""
        defaults = get_task(self.task, "bench").bench_profiles[self.profile]
        out = dataclasses.replace(self)
        for key, value in defaults.items():
            if getattr(out, key) in (None, 0, []):
                setattr(out, key, value)
        return out


def train_config(bench: BenchConfig, num_envs: int, perf: PerfConfig) -> TrainConfig:
    """The task's preset for the bench's algorithm at `num_envs`, with its `settings` and `perf`; what must divide the
    rollout lowered until it does (`TrainConfig.fit_to_rollout`)."""
    cfg = preset(bench.task, algorithm=bench.algorithm or None)
    if bench.settings:
        cfg = with_values(cfg, bench.settings)
    cfg.env.num_envs, cfg.perf, cfg.seed, cfg.device = num_envs, perf, bench.seed, bench.device
    if bench.backend:
        if not hasattr(cfg.env, "backend"):
            raise UserError(f"bench: task {bench.task!r} has no env.backend (backend={bench.backend!r})")
        setattr(cfg.env, "backend", bench.backend)  # noqa: B010 - a field some tasks' env sections have
    cfg.log.progress = False
    cfg.fit_to_rollout()
    return validated(cfg)


def parse_arguments(argv: Sequence[str]) -> tuple[BenchConfig, str]:
    """`syncfree bench`'s arguments -> (the checked `BenchConfig`, the output folder or "")."""
    parser = config_parser("syncfree bench", "Time baseline, optimized and ablated configurations side by side.",
                           BenchConfig, BenchConfig())
    parser.add_argument("--out", default="", help="Output folder (default: benchmarks/results/<task>-<profile>-"
                        "<device>, a `gym:` task's colon as `_`).")
    try:
        ns = parser.parse_args(list(argv))
    except Exception as e:
        raise UserError(f"bench: {' '.join(line.strip() for line in str(e).splitlines() if line.strip())}") from None
    out = ns.pop("out")
    return BenchConfig(**ns.as_dict()).checked(), out
