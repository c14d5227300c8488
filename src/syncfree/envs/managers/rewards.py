"""Weighted reward terms and termination terms, with per-episode sums and counts for logging."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.managers.log import EnvLog
from syncfree.envs.managers.select import fill_, is_mask, selected_mean


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
        self.log_names = tuple(f"episode_reward/{name}" for name in terms)

    def compute(self) -> Tensor:
        self.reward.zero_()
        for name, term in self.terms.items():
            value = term.func(self.env) * (term.weight * self.dt)
            self.reward += value
            self.episode_sums[name] += value
        return self.reward

    def reset(self, selection: Tensor, episode_seconds: float, log: EnvLog) -> None:
        """Log the mean per-second episode reward of each term over the reset envs (device values), clear them."""
        sums = torch.stack(list(self.episode_sums.values()), dim=-1)
        means, count = selected_mean(sums, selection)
        log.add_device(self.log_names, means / episode_seconds, count > 0 if is_mask(selection) else True)
        for value in self.episode_sums.values():
            fill_(value, selection, 0.0)


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
        self.log_names = tuple(f"episode_termination/{name}" for name in terms)

    def compute(self) -> tuple[Tensor, Tensor]:
        self.terminated.zero_()
        self.time_outs.zero_()
        for name, term in self.terms.items():
            value = term.func(self.env)
            self.term_dones[name].copy_(value)
            (self.time_outs if term.time_out else self.terminated).logical_or_(value)
        self.time_outs.logical_and_(~self.terminated)
        return self.terminated, self.time_outs

    def reset(self, selection: Tensor, log: EnvLog) -> None:
        """How many of the reset envs each term ended: one `.item()` per term with env ids (Isaac Lab's way),
        device counts with a mask."""
        if is_mask(selection):
            counts = torch.stack([torch.count_nonzero(done & selection) for done in self.term_dones.values()])
            log.add_device(self.log_names, counts.float(), selection.any())
        else:
            log.add_host({name: torch.count_nonzero(done[selection]).item()
                          for name, done in zip(self.log_names, self.term_dones.values(), strict=True)})
