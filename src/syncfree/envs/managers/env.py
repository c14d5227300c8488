"""An environment assembled from managers, stepped the way Isaac Lab's manager-based RL env steps.

One control step: process actions → `decimation` physics steps → terminations → rewards → reset finished
envs → advance the command → interval events → observations. The conventional reset picks the finished
envs with `nonzero()` and skips the reset on the host when there are none.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import defaultdict
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.api import StepResult, VecEnv
from syncfree.envs.managers.commands import CommandTerm
from syncfree.envs.managers.events import EventManager, EventTerm
from syncfree.envs.managers.observations import ObservationManager, ObsGroup
from syncfree.envs.managers.rewards import RewardManager, RewardTerm, TerminationManager, TerminationTerm
from syncfree.envs.physics import Physics


class JointPositionAction:
    """Actions are offsets of joint position targets: target = default + scale · action."""

    def __init__(self, physics: Physics, default: Tensor, scale: Tensor) -> None:
        self.physics, self.default, self.scale = physics, default, scale
        joints = default.shape[-1]
        self.raw = torch.zeros(physics.num_envs, joints, device=physics.device)
        self.previous = torch.zeros_like(self.raw)
        self.targets = torch.zeros_like(self.raw)

    def process(self, actions: Tensor) -> None:
        self.previous.copy_(self.raw)
        self.raw.copy_(actions)
        torch.addcmul(self.default, self.scale, self.raw, out=self.targets)

    def apply(self) -> None:
        self.physics.set_joint_targets(self.targets)

    def reset(self, env_ids: Tensor) -> None:
        self.raw[env_ids] = 0.0
        self.previous[env_ids] = 0.0


class ManagerBasedEnv(VecEnv):
    """Base of manager-built tasks. Subclasses create `physics`, `action` and `command`, then call
    `build_managers` with their term tables."""

    physics: Physics
    action: JointPositionAction
    command: CommandTerm
    decimation: int = 4

    def __init__(self, num_envs: int, device: torch.device | str, seed: int, max_episode_length: int) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_length = max_episode_length
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        zeros = lambda dtype: torch.zeros(num_envs, dtype=dtype, device=self.device)  # noqa: E731
        self.episode_length = zeros(torch.int64)
        self.episode_return = zeros(torch.float32)
        self._final_return = zeros(torch.float32)
        self._final_length = zeros(torch.int64)
        self.extras: dict[str, Any] = {}
        self._log: dict[str, list[Any]] = defaultdict(list)

    @property
    def step_dt(self) -> float:
        return self.physics.sim_dt * self.decimation

    def build_managers(self, observations: dict[str, ObsGroup], rewards: dict[str, RewardTerm],
                       terminations: dict[str, TerminationTerm], events: dict[str, EventTerm]) -> None:
        self.rewards = RewardManager(self, rewards, self.step_dt)
        self.terminations = TerminationManager(self, terminations)
        self.events = EventManager(self, events, self.generator)
        self.observations = ObservationManager(self, observations, self.generator)
        self.obs_shapes = self.observations.shapes

    @abstractmethod
    def before_physics(self) -> None:
        """Task hook run once per control step before the physics steps."""

    # -- stepping ----------------------------------------------------------------------------------------

    def reset(self) -> dict[str, Tensor]:
        self.reset_envs(torch.arange(self.num_envs, device=self.device))
        self.command.update()
        return self.observations.compute()

    def step(self, actions: Tensor) -> StepResult:
        self.action.process(actions)
        self.before_physics()
        for _ in range(self.decimation):
            self.action.apply()
            self.physics.step()
        self.physics.update_kinematics()
        self.episode_length += 1
        terminated, truncated = self.terminations.compute()
        reward = self.rewards.compute()
        self.episode_return += reward
        self.after_rewards(terminated)
        self._final_return.copy_(self.episode_return)
        self._final_length.copy_(self.episode_length)
        reset_ids = (terminated | truncated).nonzero(as_tuple=False).squeeze(-1)
        if len(reset_ids) > 0:
            self.reset_envs(reset_ids)
        self.command.compute()
        self.events.apply_interval(self.step_dt)
        info = {"episode_return": self._final_return, "episode_length": self._final_length}
        return StepResult(self.observations.compute(), reward, terminated, truncated, info)

    def after_rewards(self, terminated: Tensor) -> None:
        """Task hook between rewards and resets (e.g. failure statistics)."""

    def reset_envs(self, env_ids: Tensor) -> None:
        seconds = self.max_episode_length * self.step_dt
        self.log(self.rewards.reset(env_ids, seconds))
        self.log(self.terminations.reset(env_ids))
        self.log(self.command.reset(env_ids, self.episode_length))
        self.events.apply_reset(env_ids)
        self.physics.update_kinematics()
        self.observations.reset(env_ids)
        self.action.reset(env_ids)
        self.episode_length[env_ids] = 0
        self.episode_return[env_ids] = 0.0

    # -- logging -----------------------------------------------------------------------------------------

    def log(self, values: dict[str, Any]) -> None:
        """Queue values (floats or device scalars) for this iteration's means; see `pop_log`."""
        for key, value in values.items():
            self._log[key].append(value)

    def pop_log(self) -> dict[str, float]:
        """Means of everything logged since the last call (one host read per key)."""
        means = {}
        for key, values in self._log.items():
            if isinstance(values[0], Tensor):
                means[key] = torch.stack(values).float().mean().item()
            else:
                means[key] = float(sum(values) / len(values))
        self._log.clear()
        return means

    # -- checkpoints -------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "generator": self.generator.get_state(),
            "episode_length": self.episode_length.clone(),
            "episode_return": self.episode_return.clone(),
            "physics": self.physics.state_dict(),
            "action": {"raw": self.action.raw.clone(), "previous": self.action.previous.clone()},
            "command": self.command.state_dict(),
            "observations": self.observations.state_dict(),
            "events": self.events.state_dict(),
            "reward_sums": {k: v.clone() for k, v in self.rewards.episode_sums.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["episode_length"].shape != self.episode_length.shape:
            raise ValueError(f"env state: {state['episode_length'].shape[0]} envs saved, "
                             f"this env has {self.num_envs}")
        self.generator.set_state(state["generator"])
        self.episode_length.copy_(state["episode_length"])
        self.episode_return.copy_(state["episode_return"])
        self.physics.load_state_dict(state["physics"])
        self.action.raw.copy_(state["action"]["raw"])
        self.action.previous.copy_(state["action"]["previous"])
        self.command.load_state_dict(state["command"])
        self.observations.load_state_dict(state["observations"])
        self.events.load_state_dict(state["events"])
        for k, v in self.rewards.episode_sums.items():
            v.copy_(state["reward_sums"][k])
