"""Observation groups built from terms: small functions of env state with noise, clip, scale and history."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.managers.history import FastHistoryBuffer, HistoryBuffer


@dataclass(frozen=True)
class ObsTerm:
    func: Callable[[Any], Tensor]
    """`func(env) -> [num_envs, dim]`: a pure function of the env's current state."""
    noise: float = 0.0
    """Half-width of additive uniform noise, applied when the group enables noise."""
    clip: tuple[float, float] | None = None
    scale: float = 1.0
    history: int = 0
    """Keep the last `history` values (0: no history); the group sees them flattened, oldest first."""
    deterministic: bool = True
    """The function's output depends only on env state (no random draws), so groups may share one evaluation."""


@dataclass(frozen=True)
class ObsGroup:
    terms: dict[str, ObsTerm]
    concatenate: bool = True
    """True: one [num_envs, total_dim] tensor, terms in order. False: one entry `group/term` per term."""
    noise: bool = False
    """Apply each term's noise (policy observations) or not (privileged critic observations)."""


@dataclass
class _TermState:
    spec: ObsTerm
    dim: int
    history: HistoryBuffer | FastHistoryBuffer | None = field(default=None)


class ObservationManager:
    """Computes every group from its terms. Conventionally each group computes its terms independently; with
    `shared_terms`, a deterministic term function used by several groups runs once per `compute()`."""

    def __init__(self, env: Any, groups: dict[str, ObsGroup], generator: torch.Generator,
                 shared_terms: bool = False, fast_history: bool = False) -> None:
        self.env, self.groups, self.generator = env, groups, generator
        self.shared_terms = shared_terms
        self._shared: dict[Callable, Tensor] = {}
        """Within one `compute()`: raw outputs of term functions used by more than one group."""
        history_cls = FastHistoryBuffer if fast_history else HistoryBuffer
        self._terms: dict[str, dict[str, _TermState]] = {}
        for group_name, group in groups.items():
            states = {}
            for name, term in group.terms.items():
                value = term.func(env)
                if value.dim() != 2 or value.shape[0] != env.num_envs:
                    raise ValueError(f"observation term {group_name}/{name}: expected [num_envs, dim], "
                                     f"got {tuple(value.shape)}")
                history = history_cls(term.history, env.num_envs, env.device) if term.history else None
                states[name] = _TermState(term, value.shape[1], history)
            self._terms[group_name] = states
        uses = Counter(s.spec.func for states in self._terms.values() for s in states.values())
        self._shareable = {func for func, n in uses.items() if n > 1}

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {}
        for group_name, group in self.groups.items():
            dims = {name: s.dim * max(s.spec.history, 1) for name, s in self._terms[group_name].items()}
            if group.concatenate:
                shapes[group_name] = (sum(dims.values()),)
            else:
                shapes.update({f"{group_name}/{name}": (d,) for name, d in dims.items()})
        return shapes

    def compute(self) -> dict[str, Tensor]:
        obs: dict[str, Tensor] = {}
        for group_name, group in self.groups.items():
            values = {name: self._compute_term(state, group.noise) for name, state in self._terms[group_name].items()}
            if group.concatenate:
                obs[group_name] = torch.cat(list(values.values()), dim=-1)
            else:
                obs.update({f"{group_name}/{name}": v for name, v in values.items()})
        self._shared.clear()
        return obs

    def _compute_term(self, state: _TermState, noise: bool) -> Tensor:
        spec = state.spec
        value = self._term_output(spec).clone()
        if noise and spec.noise:
            u = torch.rand(value.shape, generator=self.generator, device=value.device)
            value = value + (2.0 * u - 1.0) * spec.noise
        if spec.clip is not None:
            value = value.clip_(*spec.clip)
        if spec.scale != 1.0:
            value = value.mul_(spec.scale)
        if state.history is None:
            return value
        state.history.append(value)
        return state.history.buffer.reshape(value.shape[0], -1)

    def _term_output(self, spec: ObsTerm) -> Tensor:
        """The term function's output; with shared terms, computed once per `compute()` for all groups."""
        if not (self.shared_terms and spec.deterministic and spec.func in self._shareable):
            return spec.func(self.env)
        if spec.func not in self._shared:
            self._shared[spec.func] = spec.func(self.env)
        return self._shared[spec.func]

    def reset(self, selection: Tensor) -> None:
        for states in self._terms.values():
            for state in states.values():
                if state.history is not None:
                    state.history.reset(selection)

    def histories(self) -> dict[str, HistoryBuffer | FastHistoryBuffer]:
        return {f"{g}/{n}": s.history for g, states in self._terms.items() for n, s in states.items()
                if s.history is not None}

    def state_dict(self) -> dict[str, Any]:
        return {name: h.state_dict() for name, h in self.histories().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, history in self.histories().items():
            history.load_state_dict(state[name])
