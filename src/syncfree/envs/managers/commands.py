"""Command terms: what the agent is asked to do, resampled at reset, with per-episode metrics."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.managers.log import EnvLog
from syncfree.envs.managers.select import fill_, is_mask, selected_mean


class CommandTerm(ABC):
    """A command with per-env error metrics accumulated over the episode.

    Conventional reset (Isaac Lab's `CommandTerm.reset`): each metric's mean over the reset envs is read on
    the host with its own `.item()`; the batched path keeps them on the device.
    """

    metric_names: tuple[str, ...] = ()

    def __init__(self, env: Any) -> None:
        self.env = env
        self.metrics = {name: torch.zeros(env.num_envs, device=env.device) for name in self.metric_names}
        self.log_names = tuple(f"metrics/{name}" for name in self.metric_names)

    @property
    @abstractmethod
    def command(self) -> Tensor:
        """[num_envs, dim]."""

    @abstractmethod
    def draw(self) -> None:
        """Draw this step's fresh commands for every env (every step, so that all reset paths consume the same
        random stream); `resample` applies them to the envs being reset."""

    @abstractmethod
    def resample(self, selection: Tensor) -> None:
        """Draw new commands for the selected envs (ids or mask) and put them in the command's initial state."""

    @abstractmethod
    def update(self) -> None:
        """Advance the command by one control step."""

    @abstractmethod
    def update_metrics(self) -> None:
        """Add this step's errors to `self.metrics` (per-env sums over the episode)."""

    def reset(self, selection: Tensor, episode_length: Tensor, log: EnvLog, batched: bool) -> None:
        """Log each metric's per-step mean over the finished episodes, clear the metrics, resample.

        `batched`: the metric means stay stacked on the device until the iteration's transfer. Otherwise each is
        read with its own `.item()` (with a mask, one more read tells whether any env was reset).
        """
        steps = episode_length.clamp(min=1).unsqueeze(-1)
        means, count = selected_mean(torch.stack(list(self.metrics.values()), dim=-1) / steps, selection)
        if batched:
            log.add_device(self.log_names, means, count > 0 if is_mask(selection) else True)
        elif not is_mask(selection) or count.item() > 0:
            log.add_host({name: means[i].item() for i, name in enumerate(self.log_names)})
        for value in self.metrics.values():
            fill_(value, selection, 0.0)
        self.resample(selection)

    def compute(self) -> None:
        self.update_metrics()
        self.update()

    def state_dict(self) -> dict[str, Any]:
        return {"metrics": {k: v.clone() for k, v in self.metrics.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, value in self.metrics.items():
            value.copy_(state["metrics"][name])
