"""Policy evaluation: the first episode of each of N fresh environments, and the one way to load a policy from a
checkpoint (`load_policy`), used by `syncfree eval`, `play`, `export` and the Python API."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from syncfree.algo import algorithm_for
from syncfree.config import TrainConfig
from syncfree.core.device import resolve_device
from syncfree.core.imports import UserNames, active, user_names
from syncfree.envs.api import ActionSpec, VecEnv
from syncfree.errors import POLICY_MEMORY, UserError, allocating
from syncfree.policy.actor_critic import set_autocast
from syncfree.policy.build import EnvShape
from syncfree.tasks import find_task, make_task_env
from syncfree.tasks.spec import TaskSpec
from syncfree.train import checkpoint
from syncfree.train.schema import check_checkpoint


@dataclass
class CheckpointShape:
    """The observation shapes and action spec a checkpoint records: what building its policy reads."""

    obs_shapes: dict[str, tuple[int, ...]]
    action_spec: ActionSpec

    def check_env(self, env: EnvShape, source: str) -> None:
        """One line naming both when `env` does not give the observations or take the actions the policy was trained
        on (its task's env changed since, or another env), before the policy acts there."""
        given = {name: tuple(env.obs_shapes[name]) for name in self.obs_shapes if name in env.obs_shapes}
        trained = (self.action_spec.kind, self.action_spec.size)
        takes = (env.action_spec.kind, env.action_spec.size)
        if given == self.obs_shapes and takes == trained:
            return
        env_shapes = {name: tuple(shape) for name, shape in env.obs_shapes.items()}
        raise UserError(f"{source}: the policy was trained on observations {_shapes(self.obs_shapes)} and "
                        f"{trained[0]} actions of size {trained[1]}, but this env gives {_shapes(env_shapes)} and takes "
                        f"{takes[0]} actions of size {takes[1]} (the env changed since the run trained); evaluate it "
                        "on the env it trained on")


def _shapes(shapes: dict[str, tuple[int, ...]]) -> str:
    """`policy (3,), critic (3,)`."""
    return ", ".join(f"{name} {shape}" for name, shape in shapes.items())


@dataclass
class LoadedPolicy:
    """A checkpoint's policy, built from the checkpoint alone (no env, no trainer)."""

    path: Path
    cfg: TrainConfig
    """The run's config, as its task's config type."""
    task: TaskSpec | None
    """The run's task; None for a run on a user's own env (no registered task makes its envs)."""
    policy: nn.Module
    iteration: int
    env_steps: int
    device: torch.device
    shape: CheckpointShape
    """The observation shapes and actions the policy was trained on (an env it acts in must give and take them)."""
    names: UserNames = field(default_factory=UserNames)
    """What the command or call that loaded it named: the code of the run's task (`module:factory`,
    `gym:<module>:<id>`) is imported only if among it (`syncfree.core.imports`)."""

    def make_env(self, num_envs: int, seed: int) -> VecEnv:
        """`num_envs` fresh envs of the run's task with the run's options, on the policy's device."""
        if self.task is None:
            raise UserError(f"checkpoint {self.path}: task {self.cfg.task!r} is not a registered task (a run on "
                            "your own env): make the env yourself")
        with user_names(self.names):
            return make_task_env(self.cfg, num_envs, self.device, seed)

    def evaluate(self, env: VecEnv, greedy: bool = True) -> np.ndarray:
        """The return of each env row's first episode (`Algorithm.evaluate`), on an env that fits the policy."""
        self.check_env(env)
        return algorithm_for(self.cfg).evaluate(self.policy, env, greedy)

    def check_env(self, env: EnvShape) -> None:
        """One line when `env` does not fit the policy (`CheckpointShape.check_env`)."""
        self.shape.check_env(env, f"checkpoint {self.path}")


LOADED_HOW = "load it with trust=True, or make its env yourself (syncfree.evaluate(..., env=your_env))"
"""How to allow the code a loaded checkpoint names, in Python."""


def load_policy(path: str | Path, device: str | torch.device = "cpu", autocast: bool = True,
                trust: bool = False) -> LoadedPolicy:
    """The policy of the checkpoint at `path`, on `device` (`auto`: CUDA when available), in evaluation mode, with
    the run's `perf.autocast` unless `autocast` is false. The file is data: the code its task names is imported
    (making its envs) only when the running command names it, or with `trust`. Bad input is one `UserError` line
    naming the file."""
    path = Path(path)
    names = active() or UserNames(trust=trust, how=LOADED_HOW)  # the command's, or this call's
    with user_names(names):
        cfg, state = checkpoint.read(path)
    source = f"checkpoint {path}"
    shape = recorded_shape(state, source)
    policy = recorded_policy(cfg, state, source, shape)
    target = resolve_device(str(device))
    try:
        policy.load_state_dict(state["policy"])
    except RuntimeError as e:
        lines = str(e).strip().splitlines()
        detail = lines[1].strip() if len(lines) > 1 else lines[0]
        raise UserError(f"{source}: policy does not fit its config ({detail})") from None
    policy = policy.to(target).eval().requires_grad_(False)
    set_autocast(policy, cfg.perf.autocast if autocast else "off", target)
    return LoadedPolicy(path, cfg, find_task(cfg.task), policy, int(state["iteration"]), int(state["env_steps"]),
                        target, shape, names)


def recorded_shape(state: dict[str, Any], source: str) -> CheckpointShape:
    """The observation shapes (those of its last observations) and the action spec a checkpoint records."""
    try:
        kind, size = state["action_spec"]
        shape = CheckpointShape({name: tuple(value.shape[1:]) for name, value in state["obs"].items()},
                                ActionSpec(kind, int(size)))
    except (TypeError, ValueError, AttributeError) as e:
        raise UserError(f"{source}: its observations or action spec are unreadable ({type(e).__name__})") from None
    if kind not in ("continuous", "discrete") or isinstance(size, bool) or shape.action_spec.size < 1:
        raise UserError(f"{source}: action_spec {[kind, size]!r} is invalid; expected ['continuous' or 'discrete', an "
                        "integer >= 1]")
    return shape


def recorded_policy(cfg: TrainConfig, state: dict[str, Any], source: str, shape: CheckpointShape | None = None
                    ) -> nn.Module:
    """The policy `cfg` builds for the observation shapes and action spec `state` records (`shape`, when read
    already), `state`'s weights checked against it (dtypes, shapes, ranges: `check_checkpoint`) but not yet loaded
    into it."""
    shape = shape or recorded_shape(state, source)
    try:
        with torch.random.fork_rng(devices=[]), allocating(POLICY_MEMORY):  # the initial weights are replaced: the
            policy = algorithm_for(cfg).build_policy(cfg, shape)  # caller's draws stay as they were
    except UserError as e:
        raise UserError(f"{source}: {e}") from None
    check_checkpoint(state, {"policy": policy.state_dict()}, source)
    return policy


def read_checked(path: str) -> tuple[TrainConfig, dict[str, Any]]:
    """A checkpoint a config names (a teacher): its config and state, its policy's weights checked as `load_policy`
    checks them before an algorithm copies any into the policy it builds."""
    cfg, state = checkpoint.read(path)
    recorded_policy(cfg, state, f"checkpoint {path}")
    return cfg, state


def evaluate_task(cfg: TrainConfig, policy: Any, num_envs: int, device: torch.device, seed: int,
                  greedy: bool = True, loaded: LoadedPolicy | None = None) -> np.ndarray:
    """First-episode returns of the policy's deterministic (greedy) or sampled actions on `num_envs` fresh envs of the
    run's task (a multi-agent task: one return per agent), as `syncfree eval` plays a checkpoint. Sampled actions
    draw from torch's generator seeded with `seed`, its state outside the call left as it was. `loaded`: the
    checkpoint the policy came from, whose shapes the envs must fit."""
    env = make_task_env(cfg, num_envs, device, seed)
    cuda = list(range(torch.cuda.device_count())) if device.type == "cuda" else []  # manual_seed seeds them all
    try:
        if loaded is not None:
            loaded.check_env(env)
        with torch.random.fork_rng(devices=cuda, enabled=not greedy):
            if not greedy:
                torch.manual_seed(seed)
            return algorithm_for(cfg).evaluate(policy, env, greedy)
    finally:
        env.close()
