"""A toy 2-D point mass driven to the origin: nearly free to simulate, so a benchmark measures the trainer."""

from __future__ import annotations

import torch
from torch import Tensor

from syncfree.envs.api import ActionSpec, TorchVecEnv
from syncfree.envs.mirror import Reflection, SignedPermutation


class PointMass(TorchVecEnv):
    """State (x, y, vx, vy); action = force in [-1, 1]^2; reward = 1 - distance / 4 - 0.01 |a|^2 per step alive.
    Leaving the 4 m box terminates the episode."""

    state_names = ("state",)
    default_max_episode_length = 200
    dt = 0.05
    box = 4.0

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
                 max_episode_length: int = 0) -> None:
        super().__init__(num_envs, device, seed, max_episode_length)
        self.action_spec = ActionSpec("continuous", 2)
        self.obs_shapes = {"policy": (4,), "critic": (4,)}
        self.state = torch.zeros(num_envs, 4, device=self.device)
        self.reset()

    def _initial_state(self) -> dict[str, Tensor]:
        position = self._uniform(-1.0, 1.0, 2)
        return {"state": torch.cat((position, torch.zeros_like(position)), dim=-1)}

    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        force = actions.clamp(-1.0, 1.0)
        velocity = self.state[:, 2:] + self.dt * force
        position = self.state[:, :2] + self.dt * velocity
        torch.cat((position, velocity), dim=-1, out=self.state)
        distance = position.norm(dim=-1)
        reward = 1.0 - distance / self.box - 0.01 * force.square().sum(-1)
        return reward, distance > self.box

    def _observe(self) -> dict[str, Tensor]:
        return {"policy": self.state, "critic": self.state}

    def mirror(self) -> Reflection | None:
        """Reflection in the y axis: x, vx and the x force change sign (the dynamics and the reward, which depends
        on the distance and the force's size, are the same for the reflected state)."""
        state = SignedPermutation(range(4), [-1.0, 1.0, -1.0, 1.0], self.device)
        return Reflection({"policy": state, "critic": state}, SignedPermutation(range(2), [-1.0, 1.0], self.device))


class PointMassGoal(PointMass):
    """The point mass with drag and a sparse reward, for exploration: it starts at rest near the origin and earns 1
    for each step it spends inside a goal disc of radius `goal_radius` centered `goal` away (3.5 m), 0 elsewhere;
    leaving the 4 m box ends the episode. The drag (`velocity' = force - drag * velocity`) bounds the speed at
    1 m/s, so the goal takes about 4.5 s of full thrust (90 steps) of the 200-step limit to reach, and random forces
    (a policy's initial spread) keep the point within about 0.7 m of where it started: reaching the goal takes a
    directed search. The goal lies off the diagonals, where forces clipped to [-1, 1] in both axes would carry a
    policy whose mean has drifted to a corner of the action box."""

    default_max_episode_length = 200
    goal = (3.0, 1.8)
    goal_radius = 0.3
    drag = 1.0

    def _initial_state(self) -> dict[str, Tensor]:
        position = self._uniform(-0.1, 0.1, 2)
        return {"state": torch.cat((position, torch.zeros_like(position)), dim=-1)}

    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        force = actions.clamp(-1.0, 1.0)
        velocity = self.state[:, 2:] + self.dt * (force - self.drag * self.state[:, 2:])
        position = self.state[:, :2] + self.dt * velocity
        torch.cat((position, velocity), dim=-1, out=self.state)
        goal = torch.tensor(self.goal, device=position.device)
        inside = (position - goal).norm(dim=-1) < self.goal_radius
        return inside.float(), position.norm(dim=-1) > self.box

    def mirror(self) -> None:
        """None: the goal lies off the y axis, so point-mass's reflection in it would not keep the reward."""
        return None
