"""Env-only throughput: an env stepped with actions drawn beforehand, without training."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from syncfree.bench.config import BenchConfig, train_config
from syncfree.bench.timing import sync
from syncfree.core.device import resolve_device
from syncfree.core.switches import PerfConfig
from syncfree.envs.api import VecEnv
from syncfree.errors import UserError
from syncfree.train.runner import make_task_env


def env_only_throughput(env: VecEnv, steps: int = 200, warmup: int = 10, seed: int = 0) -> float:
    """Agent-steps (env rows) per second of stepping `env` with uniformly random actions, drawn beforehand."""
    if steps < 1:
        raise UserError(f"env_only_throughput: steps={steps} must be >= 1")
    gen = torch.Generator(device=env.device)
    gen.manual_seed(seed)
    shape = (min(steps, 16), env.num_envs)
    if env.action_spec.kind == "discrete":
        actions = torch.randint(0, env.action_spec.size, shape, generator=gen, device=env.device)
    else:
        actions = torch.rand(*shape, env.action_spec.size, generator=gen, device=env.device) * 2 - 1
    env.reset()
    for t in range(warmup):
        env.step(actions[t % len(actions)])
    sync(env.device)
    start = time.perf_counter()
    for t in range(steps):
        env.step(actions[t % len(actions)])
    sync(env.device)
    return steps * env.num_envs / (time.perf_counter() - start)


def env_only(bench: BenchConfig, num_envs: int, repeats: int) -> dict[str, Any]:
    """Agent steps per second of stepping `num_envs` MettaGrid simulations with random actions drawn beforehand,
    without training: MettaGrid alone (`mettagrid_raw_throughput`) and through the adapter
    (`env_only_throughput`), alternated `repeats` times (median, min, max)."""
    from syncfree.envs.adapters.mettagrid import MettaGridSpec, mettagrid_raw_throughput  # imports mettagrid

    cfg = train_config(bench, num_envs, PerfConfig(compile="off"))
    spec = MettaGridSpec.from_options(cfg.env.grid, cfg.env.max_episode_length)
    env = make_task_env(cfg, num_envs, resolve_device(cfg.device), cfg.seed)
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

    return {"mettagrid_raw_steps_per_s": stats(raw), "adapter_steps_per_s": stats(adapter),
            "num_agents": num_envs * spec.agents_per_env, "runs": len(raw)}
