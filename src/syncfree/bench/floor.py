"""The compute floor of an iteration: env-only, policy-forward-only and update-only loops at the same sizes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from syncfree.bench.config import BenchConfig, train_config
from syncfree.bench.timing import sync, time_iterations
from syncfree.core.device import set_deterministic
from syncfree.core.switches import PerfConfig
from syncfree.train.runner import Runner


class Floor:
    """The compute floor of one iteration: env-only (the env stepped with actions the policy drew beforehand),
    policy-forward-only (the algorithm's `forward_only`: the rollout's policy forwards as `act` runs them, one
    compiled graph each with compile on, on copies of the last observation and per-row state) and update-only
    (`update()` on the storage one real iteration filled) loops at the same sizes, with the optimized switches
    (compiled kernels unless the bench runs eagerly), on a runner of its own."""

    def __init__(self, bench: BenchConfig, num_envs: int) -> None:
        compiled = PerfConfig.preset("optimized").compile if bench.compile else "off"
        self.runner = Runner(train_config(bench, num_envs, PerfConfig(compile=compiled)))
        time_iterations(self.runner, 1)
        with torch.inference_mode():
            self.forward = self.runner.algorithm.forward_only(self.runner.obs)
            self.actions = torch.stack(self.forward())

    def measure(self) -> dict[str, float]:
        runner = self.runner
        set_deterministic(runner.cfg.perf.deterministic)  # process-wide: the last runner timed may have set it

        def policy_loop() -> None:
            with torch.inference_mode():
                self.forward()

        return floor_seconds(runner.device, lambda: env_loop(runner.env, self.actions), policy_loop,
                             runner.algorithm.update)


def env_loop(env: Any, actions: torch.Tensor) -> None:
    """The env alone, stepped with actions drawn beforehand (one per step)."""
    with torch.inference_mode():
        for step_actions in actions:
            env.step(step_actions)


def floor_seconds(device: torch.device, env_loop: Callable[[], Any], policy_loop: Callable[[], Any],
                  update: Callable[[], Any]) -> dict[str, float]:
    def timed(fn: Callable[[], Any]) -> float:
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - start

    result = {"env": timed(env_loop), "policy_forward": timed(policy_loop), "update": timed(update)}
    result["total"] = sum(result.values())
    return result
