"""Env-only throughput: an env stepped with actions drawn beforehand, without training."""

from __future__ import annotations

import time

import torch

from syncfree.envs.api import VecEnv
from syncfree.errors import UserError


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
    _sync(env.device)
    start = time.perf_counter()
    for t in range(steps):
        env.step(actions[t % len(actions)])
    _sync(env.device)
    return steps * env.num_envs / (time.perf_counter() - start)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
