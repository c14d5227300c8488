"""Event terms: randomization at reset and at random intervals (e.g. pushes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor


@dataclass(frozen=True)
class EventTerm:
    func: Callable[[Any, Tensor], None]
    """`func(env, env_ids)`: draws its random numbers for all envs, then applies them to `env_ids`."""
    mode: Literal["reset", "interval"]
    interval_s: tuple[float, float] = (0.0, 0.0)
    """For `interval` events: seconds between two events of one env, drawn uniformly in this range."""


class EventManager:
    def __init__(self, env: Any, terms: dict[str, EventTerm], generator: torch.Generator) -> None:
        self.env, self.terms, self.generator = env, terms, generator
        self.time_left = {name: self._draw_interval(term) for name, term in terms.items() if term.mode == "interval"}

    def _draw_interval(self, term: EventTerm) -> Tensor:
        lo, hi = term.interval_s
        u = torch.rand(self.env.num_envs, generator=self.generator, device=self.env.device)
        return lo + (hi - lo) * u

    def apply_reset(self, env_ids: Tensor) -> None:
        for term in self.terms.values():
            if term.mode == "reset":
                term.func(self.env, env_ids)

    def apply_interval(self, dt: float) -> None:
        for name, time_left in self.time_left.items():
            term = self.terms[name]
            time_left -= dt
            fresh = self._draw_interval(term)
            env_ids = (time_left < 1e-6).nonzero().flatten()
            if len(env_ids) > 0:
                time_left[env_ids] = fresh[env_ids]
                term.func(self.env, env_ids)

    def state_dict(self) -> dict[str, Tensor]:
        return {name: t.clone() for name, t in self.time_left.items()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        for name, t in self.time_left.items():
            t.copy_(state[name])
