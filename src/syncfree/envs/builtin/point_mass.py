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


class PointMassMaze(PointMassGoal):
    """point-mass-goal's point in a U-shaped corridor, paid only at its far end, for exploration. Two lanes run along
    x from -0.5 m to 2 m, the lower one (1 m wide) from the start (at rest near the origin) to a gap beyond the wall
    between them (x > 1.2 m), the upper one (0.5 m) back to the goal disc (radius 0.25 m) above the start:
    1 per step inside it, 0 elsewhere. A point that enters the goal stays there, at rest, so an episode's return
    counts the steps left when it got there; nothing ends an episode before its time limit. The force is at most 1
    in any direction and the drag bounds the speed at 1 m/s, so the goal takes about 5 m and 120 of the 200 steps;
    walls stop the point (its velocity across a wall is zeroed). No constant force reaches the goal: it carries the
    point into a corner of one lane and holds it there (`tests/test_rnd.py` tries 72 directions). A policy must turn
    at the corridor's bends, which random forces (reaching about 0.7 m from the start) do not show it."""

    goal = (0.0, 0.8)
    goal_radius = 0.25
    low, high = (-0.5, -0.5), (2.0, 1.0)
    """The outer walls' corners."""
    wall_y, wall_end = 0.5, 1.2
    """The wall between the lanes: along y = `wall_y` from the left outer wall to x = `wall_end`."""

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
                 max_episode_length: int = 0) -> None:
        super().__init__(num_envs, device, seed, max_episode_length)
        self._goal = torch.tensor(self.goal, device=self.device)
        self._low = torch.tensor(self.low, device=self.device)
        self._high = torch.tensor(self.high, device=self.device)

    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        force = actions / actions.norm(dim=-1, keepdim=True).clamp(min=1.0)
        held = self._inside(self.state).unsqueeze(-1)
        velocity = (self.state[:, 2:] + self.dt * (force - self.drag * self.state[:, 2:])).masked_fill(held, 0.0)
        position = self.state[:, :2] + self.dt * velocity
        against_wall = (position < self._low) | (position > self._high)
        position = torch.maximum(torch.minimum(position, self._high), self._low)
        was_below = self.state[:, 1] < self.wall_y
        crossed = (was_below != (position[:, 1] < self.wall_y)) & (position[:, 0] < self.wall_end)
        y = torch.where(crossed, torch.where(was_below, self.wall_y - 1e-3, self.wall_y + 1e-3), position[:, 1])
        against_wall[:, 1] |= crossed
        torch.cat((position[:, :1], y.unsqueeze(-1), velocity.masked_fill(against_wall, 0.0)), dim=-1,
                  out=self.state)
        inside = self._inside(self.state)
        return inside.float(), torch.zeros_like(inside)

    def _inside(self, state: Tensor) -> Tensor:
        return (state[:, :2] - self._goal).norm(dim=-1) < self.goal_radius
