"""An environment assembled from managers, stepped the way Isaac Lab's manager-based RL env steps.

One control step: process actions → `decimation` physics steps → terminations → rewards → reset finished
envs → advance the command → interval events → observations. The conventional reset picks the finished
envs with `nonzero()` and skips the reset on the host when there are none; with `perf.reset_without_sync`
every manager resets by mask instead.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
from torch import Tensor

from syncfree.core.switches import PerfConfig
from syncfree.envs.api import StepResult, VecEnv, draw_episode_steps
from syncfree.envs.managers.commands import CommandTerm
from syncfree.envs.managers.events import EventManager, EventTerm
from syncfree.envs.managers.log import EnvLog
from syncfree.envs.managers.observations import ObservationManager, ObsGroup
from syncfree.envs.managers.rewards import RewardManager, RewardTerm, TerminationManager, TerminationTerm
from syncfree.envs.managers.select import fill_
from syncfree.envs.physics import Physics
from syncfree.errors import UserError


def joint_limit_bounds(lower: Tensor, upper: Tensor, offset: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    """The actions whose joint-position targets (`offset + scale * action`) span each joint's range: `(limit - offset)
    / scale` (`VecEnv.action_bounds`); an unlimited joint keeps [-1, 1]."""
    ends = torch.stack(((lower - offset) / scale, (upper - offset) / scale))
    low, high = ends.min(dim=0).values, ends.max(dim=0).values
    limited = torch.isfinite(low) & torch.isfinite(high) & (high > low)
    return torch.where(limited, low, -1.0).float(), torch.where(limited, high, 1.0).float()


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

    def reset(self, selection: Tensor) -> None:
        fill_(self.raw, selection, 0.0)
        fill_(self.previous, selection, 0.0)


class ManagerBasedEnv(VecEnv):
    """Base of manager-built tasks. Subclasses create `physics`, `action` and `command`, then call
    `build_managers` with their term tables."""

    physics: Physics
    action: JointPositionAction
    command: CommandTerm
    decimation: int = 4

    def __init__(self, num_envs: int, device: torch.device | str, seed: int, max_episode_length: int,
                 perf: PerfConfig | None = None) -> None:
        self.perf = perf or PerfConfig()
        """The env-side switches (`shared_obs_terms`, `reset_without_sync`, `fast_history`, ...)."""
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
        self.log = EnvLog(self.device)

    @property
    def step_dt(self) -> float:
        return self.physics.sim_dt * self.decimation

    def build_managers(self, observations: dict[str, ObsGroup], rewards: dict[str, RewardTerm],
                       terminations: dict[str, TerminationTerm], events: dict[str, EventTerm]) -> None:
        self.rewards = RewardManager(self, rewards, self.step_dt)
        self.terminations = TerminationManager(self, terminations)
        self.events = EventManager(self, events, self.generator)
        self.observations = ObservationManager(self, observations, self.generator,
                                               shared_terms=self.perf.shared_obs_terms,
                                               fast_history=self.perf.fast_history)
        self.obs_shapes = self.observations.shapes

    @abstractmethod
    def before_physics(self) -> None:
        """Task hook run once per control step before the physics steps."""

    # -- stepping ----------------------------------------------------------------------------------------

    def reset(self) -> dict[str, Tensor]:
        self.draw_reset_randomness()
        self.reset_envs(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        self.command.update()
        return self.observations.compute()

    def step(self, actions: Tensor) -> StepResult:
        if self.perf.log_env_actions:
            self.extras["env_actions"] = actions.detach().cpu()
        self.action.process(actions)
        self.before_physics()
        for _ in range(self.decimation):
            self.action.apply()
            self.physics.step()
        self.update_kinematics()
        self.episode_length += 1
        terminated, truncated = self.terminations.compute()
        reward = self.rewards.compute()
        self.episode_return += reward
        self.after_rewards(terminated)
        self._final_return.copy_(self.episode_return)
        self._final_length.copy_(self.episode_length)
        done = terminated | truncated
        self.draw_reset_randomness()
        if self.perf.reset_without_sync:
            self.reset_envs(done)
        else:
            reset_ids = done.nonzero(as_tuple=False).squeeze(-1)
            if len(reset_ids) > 0:
                self.reset_envs(reset_ids)
        self.command.compute()
        self.events.apply_interval(self.step_dt, without_sync=self.perf.reset_without_sync)
        self.after_step()
        info = {"episode_return": self._final_return, "episode_length": self._final_length}
        return StepResult(self.observations.compute(), reward, terminated, truncated, info)

    def start_at_random_steps(self) -> None:
        draw_episode_steps(self.episode_length, self.max_episode_length, self.generator)

    def update_kinematics(self) -> None:
        """Body poses and velocities from the current joint and root state (after stepping or writing state)."""
        self.physics.update_kinematics()

    def draw_reset_randomness(self) -> None:
        """Every step, for all envs: what a reset would draw (commands, events), used by the envs that reset."""
        self.command.draw()
        self.events.draw()

    def after_rewards(self, terminated: Tensor) -> None:
        """Task hook between rewards and resets (e.g. failure statistics)."""

    def after_step(self) -> None:
        """Task hook after the command and events, before observations."""

    def reset_envs(self, selection: Tensor) -> None:
        """Reset the selected envs: int64 ids (conventional path) or a bool mask (sync-free path)."""
        seconds = self.max_episode_length * self.step_dt
        self.rewards.reset(selection, seconds, self.log)
        self.terminations.reset(selection, self.log)
        self.command.reset(selection, self.episode_length, self.log, batched=self.perf.batched_command_metrics)
        self.events.apply_reset(selection)
        self.update_kinematics()
        self.observations.reset(selection)
        self.action.reset(selection)
        fill_(self.episode_length, selection, 0)
        fill_(self.episode_return, selection, 0.0)

    def pop_log(self) -> dict[str, Tensor]:
        return self.log.pop()

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

    def check_state_dict(self, state: Any) -> None:
        check_clips = getattr(self.command, "check_clips", None)  # commands of motion clips name a clip set
        if isinstance(state, dict) and check_clips is not None:
            check_clips(state.get("command"))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["episode_length"].shape != self.episode_length.shape:
            raise UserError(f"env state: {state['episode_length'].shape[0]} envs saved, this env has {self.num_envs}")
        self.generator.set_state(state["generator"])
        self.episode_length.copy_(state["episode_length"])
        self.episode_return.copy_(state["episode_return"])
        self.physics.load_state_dict(state["physics"])
        self.update_kinematics()
        self.action.raw.copy_(state["action"]["raw"])
        self.action.previous.copy_(state["action"]["previous"])
        self.command.load_state_dict(state["command"])
        self.observations.load_state_dict(state["observations"])
        self.events.load_state_dict(state["events"])
        for k, v in self.rewards.episode_sums.items():
            v.copy_(state["reward_sums"][k])
