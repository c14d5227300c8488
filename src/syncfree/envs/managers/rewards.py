"""Weighted reward terms and termination terms, with per-episode sums and counts for logging."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class RewardTerm:
    func: Callable[[Any], Tensor]
    """`func(env) -> [num_envs]`."""
    weight: float


class RewardManager:
    """reward = Σ weight · term · dt (Isaac Lab's convention); per-term sums over the episode for logging."""

    def __init__(self, env: Any, terms: dict[str, RewardTerm], dt: float) -> None:
        self.env, self.terms, self.dt = env, terms, dt
        self.reward = torch.zeros(env.num_envs, device=env.device)
        self.episode_sums = {name: torch.zeros(env.num_envs, device=env.device) for name in terms}

    def compute(self) -> Tensor:
        self.reward.zero_()
        for name, term in self.terms.items():
            value = term.func(self.env) * (term.weight * self.dt)
            self.reward += value
            self.episode_sums[name] += value
        return self.reward

    def reset(self, env_ids: Tensor, episode_seconds: float) -> dict[str, Tensor]:
        """Mean per-second episode reward of each term over `env_ids` (device scalars), then clear them."""
        log = {}
        for name, sums in self.episode_sums.items():
            log[f"episode_reward/{name}"] = torch.mean(sums[env_ids]) / episode_seconds
            sums[env_ids] = 0.0
        return log


@dataclass(frozen=True)
class TerminationTerm:
    func: Callable[[Any], Tensor]
    """`func(env) -> [num_envs] bool`."""
    time_out: bool = False
    """A time limit (bootstrap from the value) rather than a failure."""


class TerminationManager:
    def __init__(self, env: Any, terms: dict[str, TerminationTerm]) -> None:
        self.env, self.terms = env, terms
        self.term_dones = {name: torch.zeros(env.num_envs, dtype=torch.bool, device=env.device) for name in terms}
        self.terminated = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
        self.time_outs = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)

    def compute(self) -> tuple[Tensor, Tensor]:
        self.terminated.zero_()
        self.time_outs.zero_()
        for name, term in self.terms.items():
            value = term.func(self.env)
            self.term_dones[name].copy_(value)
            (self.time_outs if term.time_out else self.terminated).logical_or_(value)
        self.time_outs.logical_and_(~self.terminated)
        return self.terminated, self.time_outs

    def reset(self, env_ids: Tensor) -> dict[str, float]:
        """How many of `env_ids` each term ended, one host read per term."""
        return {f"episode_termination/{name}": torch.count_nonzero(done[env_ids]).item()
                for name, done in self.term_dones.items()}
