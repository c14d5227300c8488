"""The compute floor of an iteration: env-only, policy-forward-only and update-only loops at the same sizes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from syncfree.algo.recurrent import RecurrentPPO
from syncfree.bench.config import BenchConfig, is_recurrent, train_config
from syncfree.bench.timing import sync, time_iterations
from syncfree.core.compile import hot
from syncfree.core.device import set_deterministic
from syncfree.core.switches import PerfConfig
from syncfree.train.runner import Runner


class Floor:
    """The compute floor of one iteration: env-only (the env stepped with actions the policy drew beforehand),
    policy-forward-only and update-only (`update()` on the storage one real iteration filled) loops at the same
    sizes, with the optimized switches (compiled kernels unless the bench runs eagerly), on a runner of its own."""

    def __init__(self, bench: BenchConfig, num_envs: int) -> None:
        compiled = PerfConfig().compile if bench.compile else "off"
        self.runner = Runner(train_config(bench, num_envs, PerfConfig(compile=compiled)))
        time_iterations(self.runner, 1)
        with torch.inference_mode():
            self.prepare()
            self.actions = torch.stack([self.forward() for _ in range(self.runner.algorithm.steps_per_env)])

    def prepare(self) -> None:
        """Copy what the policy forward reads from the runner after its iteration."""

    def forward(self) -> torch.Tensor:
        """One policy forward of a rollout step, without storage; returns the actions."""
        raise NotImplementedError

    def measure(self) -> dict[str, float]:
        runner, steps = self.runner, self.runner.algorithm.steps_per_env
        set_deterministic(runner.cfg.perf.deterministic)  # process-wide: the last runner timed may have set it

        def policy_loop() -> None:
            with torch.inference_mode():
                self.prepare()
                for _ in range(steps):
                    self.forward()

        return floor_seconds(runner.device, lambda: env_loop(runner.env, self.actions), policy_loop,
                             runner.algorithm.update)


class FeedForwardFloor(Floor):
    """The policy forward is the policy's act as the runner runs it (one compiled graph with compile on), on a
    copy of the last observation."""

    def prepare(self) -> None:
        runner = self.runner
        if not hasattr(self, "act"):
            self.act = hot(runner.policy.act, runner.cfg.perf, runner.device)
            self.obs = {k: v.clone() for k, v in runner.obs.items()}

    def forward(self) -> torch.Tensor:
        return self.act(self.obs["policy"], self.obs["critic"]).actions


class RecurrentFloor(Floor):
    """The policy forward is the policy's step as the runner runs it (one compiled graph with compile on) on a
    copy of the runner's observations, recurrent state, done flags and, if the policy reads them, last actions;
    the state is carried from step to step."""

    def prepare(self) -> None:
        algorithm: RecurrentPPO = self.runner.algorithm
        if not hasattr(self, "obs"):
            everyone = slice(0, algorithm.num_envs)
            self.obs, self.done = self.runner.obs["policy"].clone(), algorithm.done.clone()
            self.start_state = type(algorithm.state)(*(s.clone() for s in algorithm.state))
            self.last_actions = (algorithm.buffer.previous_actions(everyone).clone()
                                 if "last_actions" in algorithm.buffer.data else None)
        self.state = self.start_state

    def forward(self) -> torch.Tensor:
        out, self.state = self.runner.algorithm.policy_step(self.obs, self.state, self.done, self.last_actions)
        return out.actions


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


def make_floor(bench: BenchConfig, num_envs: int) -> Floor:
    """The floor for the task's algorithm."""
    return RecurrentFloor(bench, num_envs) if is_recurrent(bench.task) else FeedForwardFloor(bench, num_envs)
