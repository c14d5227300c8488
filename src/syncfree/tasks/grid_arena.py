"""grid-arena: MettaGrid gridworlds, many agents per simulation, token observations, a recurrent policy trained on
BPTT segments (`syncfree.envs.adapters.mettagrid`, `syncfree.algo.recurrent`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch

from syncfree.algo.configs import RecurrentPPOTrainConfig
from syncfree.algo.settings import LossesConfig, RecurrentPPOConfig
from syncfree.config import EnvConfig, EnvNouns, TrainConfig
from syncfree.core.device import resolve_device
from syncfree.envs.adapters.host_worker import worth_a_worker
from syncfree.envs.adapters.mettagrid_map import MettaGridMap
from syncfree.envs.api import VecEnv
from syncfree.errors import UserError, check
from syncfree.policy.settings import RecurrentTokenPolicyConfig
from syncfree.tasks.spec import BenchSizes, TaskSpec


@dataclass
class GridArenaEnvConfig(MettaGridMap, EnvConfig):
    """MettaGrid simulations: `num_envs` of them, each with `agents_per_env` agents on the map below (every agent is
    one env row of the trainer)."""

    NOUNS: ClassVar[EnvNouns] = EnvNouns("simulations", "agent", "agents")

    def rows(self) -> int:
        return self.num_envs * self.agents_per_env

    def describe(self, rows: int) -> str:
        return f"{rows} agents ({rows // self.agents_per_env} simulations x {self.agents_per_env})"

    def summary(self) -> str:
        return (f"{self.map} map, {self.width} x {self.height}, {self.agents_per_env} agents each, "
                f"{self.max_steps}-step episodes")

    def validate(self, prefix: str = "env.") -> None:
        EnvConfig.validate(self)
        MettaGridMap.validate(self, prefix)


def env_config(cfg: TrainConfig) -> GridArenaEnvConfig:
    """The env section, of grid-arena's type (`make_task_env` checks it)."""
    return cast(GridArenaEnvConfig, cfg.env)


def check_config(cfg: TrainConfig) -> None:
    """The scripted teacher of `losses.supervised` walks to mines: only the `mines` map has it."""
    losses = getattr(cfg, "losses", None)
    if isinstance(losses, LossesConfig):
        check(losses.supervised == 0 or env_config(cfg).map == "mines", "losses.supervised",
              "0 unless env.map=mines (the scripted teacher walks to mines)", losses.supervised)


def preset(task: str) -> RecurrentPPOTrainConfig:
    """Agents on MettaGrid maps trained with the recurrent token policy (and its teacher losses)."""
    cfg = RecurrentPPOTrainConfig(task=task, env=GridArenaEnvConfig(), policy=RecurrentTokenPolicyConfig())
    cfg.env.num_envs = 16  # MettaGrid simulations (x 4 agents)
    cfg.ppo = RecurrentPPOConfig(steps_per_env=32, num_epochs=4, num_minibatches=4, learning_rate=3e-3,
                                 schedule="fixed", gamma=0.99, lam=0.95, entropy_coef=0.01, value_loss_coef=0.5,
                                 max_grad_norm=0.5, bptt_horizon=16)
    cfg.iterations = 100
    cfg.save_every = 25
    return cfg


def make_env(cfg: TrainConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
    """`num_envs` MettaGrid simulations of `cfg.env`'s map."""
    try:  # imports mettagrid: only when asked for
        from syncfree.envs.adapters.mettagrid import MettaGridSpec, MettaGridVecEnv
    except ImportError:
        raise UserError("task grid-arena needs MettaGrid: pip install 'syncfree[grid]'") from None
    return MettaGridVecEnv(MettaGridSpec.of(env_config(cfg)), num_envs, device, seed,
                           cache_game_config=cfg.perf.cache_game_config,
                           worker=cfg.perf.host_env_worker and worth_a_worker(num_envs))


def env_only(cfg: TrainConfig, num_envs: int, repeats: int) -> dict[str, Any]:
    """Agent steps per second of stepping `num_envs` simulations with random actions drawn beforehand, without
    training: MettaGrid alone (`mettagrid_raw_throughput`) and through the adapter with the run's switches
    (`env_only_throughput`), alternated `repeats` times (median, min, max)."""
    from syncfree.envs.adapters.mettagrid import MettaGridSpec, mettagrid_raw_throughput
    from syncfree.envs.throughput import env_only_throughput

    spec = MettaGridSpec.of(env_config(cfg))
    env = make_env(cfg, num_envs, resolve_device(cfg.device), cfg.seed)
    raw, adapter = [], []
    try:
        with torch.inference_mode():
            for _ in range(max(repeats, 1)):
                raw.append(mettagrid_raw_throughput(spec, num_envs, seed=cfg.seed))
                adapter.append(env_only_throughput(env, seed=cfg.seed))
    finally:
        env.close()

    def stats(xs: list[float]) -> dict[str, float]:
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    return {"steps_per_s": {"MettaGrid raw": stats(raw), "through the adapter": stats(adapter)}, "runs": len(raw)}


BENCH_PROFILES: dict[str, BenchSizes] = {
    "quick": dict(num_envs=[16, 64], scaling=[], ablations=False, repeats=3, iterations=1),
    "full": dict(num_envs=[16, 256], scaling=[4, 16, 64, 256], ablations=True, repeats=3, iterations=1),
    "gpu-smoke": dict(num_envs=[64, 256], scaling=[], ablations=False, repeats=3, iterations=1),
}
"""Sizes in MettaGrid simulations of `env.agents_per_env` agents each (the preset's 4: 64 to 1024 agents), where
one iteration of 256 simulations takes tens of seconds on one CPU thread; MettaGrid steps on the CPU whatever the
device."""

TASKS = (
    TaskSpec("grid-arena", "MettaGrid gridworld (C++ core, CPU), many agents per simulation, token observations, 5 "
             "discrete actions; map from env.map (default: mines, which pay a heart per push); recurrent policy",
             GridArenaEnvConfig, {"default": preset}, make_env, "recurrent-ppo", needs=("mettagrid", "grid"),
             sections={"recurrent-ppo": {"policy": RecurrentTokenPolicyConfig}}, check=check_config,
             cannot_render="its MettaGrid simulations have no renderer here; `syncfree eval` measures its return",
             bench_profiles=BENCH_PROFILES, env_only=env_only,
             env_switches=frozenset({"cache_game_config", "host_env_worker"})),
)
