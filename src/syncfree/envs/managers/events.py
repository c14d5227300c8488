"""Event terms: randomization at reset and at random intervals (e.g. pushes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from syncfree.envs.managers.select import assign_


@dataclass(frozen=True)
class EventTerm:
    draw: Callable[[Any], Tensor]
    """`draw(env) -> [num_envs, ...]`: the event's random numbers for every env, drawn every control step
    whether or not the event fires, so that every reset path consumes the same random stream."""
    func: Callable[[Any, Tensor, Tensor], None]
    """`func(env, selection, drawn)`: apply the draws to the selected envs (int64 ids or a bool mask; see
    `managers.select`)."""
    mode: Literal["reset", "interval"]
    interval_s: tuple[float, float] = (0.0, 0.0)
    """For `interval` events: seconds between two events of one env, drawn uniformly in this range."""


class EventManager:
    def __init__(self, env: Any, terms: dict[str, EventTerm], generator: torch.Generator) -> None:
        self.env, self.terms, self.generator = env, terms, generator
        self.time_left = {name: self._draw_interval(term) for name, term in terms.items() if term.mode == "interval"}
        self._drawn: dict[str, Tensor] = {}
        self._fresh_intervals: dict[str, Tensor] = {}

    def _draw_interval(self, term: EventTerm) -> Tensor:
        lo, hi = term.interval_s
        u = torch.rand(self.env.num_envs, generator=self.generator, device=self.env.device)
        return lo + (hi - lo) * u

    def draw(self) -> None:
        """This step's random numbers of every event (all envs)."""
        for name, term in self.terms.items():
            self._drawn[name] = term.draw(self.env)
            if term.mode == "interval":
                self._fresh_intervals[name] = self._draw_interval(term)

    def apply_reset(self, selection: Tensor) -> None:
        for name, term in self.terms.items():
            if term.mode == "reset":
                term.func(self.env, selection, self._drawn[name])

    def apply_interval(self, dt: float, without_sync: bool) -> None:
        """Fire the interval events whose timer ran out: envs picked with `nonzero()` behind a host `if`
        (conventional) or by mask."""
        for name, time_left in self.time_left.items():
            term, fresh, drawn = self.terms[name], self._fresh_intervals[name], self._drawn[name]
            time_left -= dt
            due = time_left < 1e-6
            if without_sync:
                assign_(time_left, due, fresh)
                term.func(self.env, due, drawn)
                continue
            env_ids = due.nonzero().flatten()
            if len(env_ids) > 0:
                time_left[env_ids] = fresh[env_ids]
                term.func(self.env, env_ids, drawn)

    def state_dict(self) -> dict[str, Tensor]:
        return {name: t.clone() for name, t in self.time_left.items()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        for name, t in self.time_left.items():
            t.copy_(state[name])
