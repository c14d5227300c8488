"""Classic control in batched torch: the equations of Gymnasium's CartPole-v1 and Pendulum-v1."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from syncfree.envs.api import ActionSpec, TorchVecEnv


class CartPole(TorchVecEnv):
    """Balance a pole on a cart (Barto, Sutton & Anderson, 1983), explicit Euler as in CartPole-v1.

    Reward 1 per step, including the terminating one. Continuous variant: force = 10 N * clip(a, -1, 1).
    """

    state_names = ("state",)
    default_max_episode_length = 500
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masscart + masspole
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02
    x_threshold = 2.4
    theta_threshold = 12 * 2 * math.pi / 360

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
                 max_episode_length: int = 0, continuous: bool = False) -> None:
        super().__init__(num_envs, device, seed, max_episode_length)
        self.continuous = continuous
        self.action_spec = ActionSpec("continuous", 1) if continuous else ActionSpec("discrete", 2)
        self.obs_shapes = {"policy": (4,), "critic": (4,)}
        self.state = torch.zeros(num_envs, 4, device=self.device)
        self.reset()

    def _initial_state(self) -> dict[str, Tensor]:
        return {"state": self._uniform(-0.05, 0.05, 4)}

    def _force(self, actions: Tensor) -> Tensor:
        if self.continuous:
            return self.force_mag * actions[:, 0].clamp(-1.0, 1.0)
        return torch.where(actions == 1, self.force_mag, -self.force_mag)

    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        next_state = cartpole_dynamics(self.state, self._force(actions))
        self.state.copy_(next_state)
        x, theta = next_state[:, 0], next_state[:, 2]
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold)
        reward = torch.ones_like(x)
        return reward, terminated

    def _observe(self) -> dict[str, Tensor]:
        return {"policy": self.state, "critic": self.state}


def cartpole_dynamics(state: Tensor, force: Tensor) -> Tensor:
    """One explicit-Euler step of CartPole-v1's equations of motion."""
    c = CartPole
    x, x_dot, theta, theta_dot = state.unbind(-1)
    costheta, sintheta = torch.cos(theta), torch.sin(theta)
    temp = (force + c.polemass_length * theta_dot.square() * sintheta) / c.total_mass
    thetaacc = (c.gravity * sintheta - costheta * temp) / (
        c.length * (4.0 / 3.0 - c.masspole * costheta.square() / c.total_mass)
    )
    xacc = temp - c.polemass_length * thetaacc * costheta / c.total_mass
    return torch.stack(
        (x + c.tau * x_dot, x_dot + c.tau * xacc, theta + c.tau * theta_dot, theta_dot + c.tau * thetaacc), dim=-1
    )


class Pendulum(TorchVecEnv):
    """Swing a pendulum up and hold it, as in Pendulum-v1. Torque = 2 N·m * clip(a, -1, 1); never terminates."""

    state_names = ("state",)
    default_max_episode_length = 200
    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    g = 10.0
    m = 1.0
    l = 1.0  # noqa: E741

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
                 max_episode_length: int = 0) -> None:
        super().__init__(num_envs, device, seed, max_episode_length)
        self.action_spec = ActionSpec("continuous", 1)
        self.obs_shapes = {"policy": (3,), "critic": (3,)}
        self.state = torch.zeros(num_envs, 2, device=self.device)
        self._obs = torch.zeros(num_envs, 3, device=self.device)
        self._high = torch.tensor([math.pi, 1.0], device=self.device)
        self.reset()

    def _initial_state(self) -> dict[str, Tensor]:
        return {"state": self._uniform(-self._high, self._high, 2)}

    def _advance(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        torque = self.max_torque * actions[:, 0].clamp(-1.0, 1.0)
        next_state, reward = pendulum_dynamics(self.state, torque)
        self.state.copy_(next_state)
        return reward, torch.zeros_like(reward, dtype=torch.bool)

    def _observe(self) -> dict[str, Tensor]:
        th, thdot = self.state.unbind(-1)
        torch.stack((torch.cos(th), torch.sin(th), thdot), dim=-1, out=self._obs)
        return {"policy": self._obs, "critic": self._obs}


def pendulum_dynamics(state: Tensor, torque: Tensor) -> tuple[Tensor, Tensor]:
    """One step of Pendulum-v1: returns (next [theta, theta_dot], reward). `torque` is already in N·m."""
    p = Pendulum
    th, thdot = state.unbind(-1)
    u = torque.clamp(-p.max_torque, p.max_torque)
    costs = angle_normalize(th).square() + 0.1 * thdot.square() + 0.001 * u.square()
    newthdot = thdot + (3 * p.g / (2 * p.l) * torch.sin(th) + 3.0 / (p.m * p.l**2) * u) * p.dt
    newthdot = newthdot.clamp(-p.max_speed, p.max_speed)
    newth = th + newthdot * p.dt
    return torch.stack((newth, newthdot), dim=-1), -costs


def angle_normalize(x: Tensor) -> Tensor:
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi
