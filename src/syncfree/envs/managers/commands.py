"""Command terms: what the agent is asked to do, resampled at reset, with per-episode metrics."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor


class CommandTerm(ABC):
    """A command with per-env error metrics accumulated over the episode.

    Conventional reset (Isaac Lab's `CommandTerm.reset`): each metric's mean over the reset envs is read on
    the host with its own `.item()`.
    """

    metric_names: tuple[str, ...] = ()

    def __init__(self, env: Any) -> None:
        self.env = env
        self.metrics = {name: torch.zeros(env.num_envs, device=env.device) for name in self.metric_names}

    @property
    @abstractmethod
    def command(self) -> Tensor:
        """[num_envs, dim]."""

    @abstractmethod
    def resample(self, env_ids: Tensor) -> None:
        """Draw new commands for `env_ids` (and put those envs in the command's initial state)."""

    @abstractmethod
    def update(self) -> None:
        """Advance the command by one control step."""

    @abstractmethod
    def update_metrics(self) -> None:
        """Add this step's errors to `self.metrics` (per-env sums over the episode)."""

    def reset(self, env_ids: Tensor, episode_length: Tensor) -> dict[str, float]:
        """Per-step mean of each metric over the finished episodes of `env_ids`, then resample them."""
        steps = episode_length[env_ids].clamp(min=1)
        log = {}
        for name, value in self.metrics.items():
            log[f"metrics/{name}"] = torch.mean(value[env_ids] / steps).item()
            value[env_ids] = 0.0
        self.resample(env_ids)
        return log

    def compute(self) -> None:
        self.update_metrics()
        self.update()

    def state_dict(self) -> dict[str, Any]:
        return {"metrics": {k: v.clone() for k, v in self.metrics.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, value in self.metrics.items():
            value.copy_(state["metrics"][name])
