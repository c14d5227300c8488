"""BPTT experience: a `[segments, bptt_horizon]` buffer of agent rows, and its minibatch samplers.

Each agent writes to its own row slot at its own time index. When an agent's row is full (`bptt_horizon` steps)
it is retired and the agent gets the next free slot; the rollout ends when all `segments` rows are full. Agents
that retire a row when no slot is left write to a scratch row of their own (one per agent, after the
`segments` rows, never sampled) until the rollout ends: slices that fill rows at different rates never overwrite
a full row (the gridworld seed's `Experience` wraps slots modulo `segments` instead, which does). The recurrent
state an agent carried into the first step of a row is snapshotted with the row, so training replays each row
from where the rollout was.

Agents are stored in slices (`env: slice`, e.g. one vectorized-env worker's agents, or all of them) that step
together and so share one time index. Field names are free; `rewards`, `dones`, `values` and `advantages` are the
usual ones (see `syncfree.algo.vtrace` for the row convention of rewards and dones). A field named `actions`
also updates `last_actions`, each agent's previous action.

Switches (all bitwise-equivalent; the optimized value is the default):

- `cpu_time_index`: the store reads the slice's time index from a host mirror; off, from the device tensor
  (`.item()`, a host sync per store).
- `preallocated_last_actions`: `last_actions` sized to `total_agents` once; off, grown on demand as slices reach
  past its end (a new tensor and a copy each time it grows, in the first rollout); `seed_before`, as off, and the
  size needed read from the device at every store, as the gridworld code did before its change.
- `cached_minibatch_indices`: sequential minibatch indices computed once per (minibatch, size) and one all-ones
  priority-weight tensor reused; off, both rebuilt for every minibatch.

The gridworld seed's cached `batch`/`bptt` metadata tensors have no counterpart: its policies receive minibatches
flattened in a TensorDict and recover `[rows, bptt]` from those tensors, while these minibatches keep their shape.
Its int64 row tracking is how this buffer is built (`row_slot_ids`, `t_in_row`, indices), not a switch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from syncfree.core.fields import Field
from syncfree.core.switches import SEED_BEFORE
from syncfree.errors import UserError


class Minibatch(NamedTuple):
    indices: Tensor
    """[count] int64 segment (row) ids."""
    data: dict[str, Tensor]
    """Every field gathered at `indices`: [count, bptt_horizon, ...]."""
    initial_state: tuple[Tensor, ...]
    """Recurrent state snapshot of each row, [count, ...] per state tensor."""
    advantages: Tensor
    """[count, bptt_horizon]."""
    prio_weights: Tensor
    """[count, bptt_horizon] importance weights of prioritized sampling (all ones otherwise; with
    `cached_minibatch_indices` a shared tensor: do not modify it in place)."""


def prioritized_beta(beta0: float, progress: float) -> float:
    """Importance-sampling exponent annealed linearly from `beta0` (progress 0) to 1 (progress >= 1)."""
    return beta0 + (1.0 - beta0) * min(max(progress, 0.0), 1.0)


class SegmentBuffer:
    """Preallocated `[segments, bptt_horizon]` rollout storage for recurrent policies.

    Args:
        fields: name -> `Field(per-step shape, dtype)`.
        segments, bptt_horizon: rows and steps per row; `segments >= total_agents`.
        total_agents: agents writing into the buffer (rows `0 .. total_agents - 1` at a rollout's start).
        state_shapes: per-agent shape of each recurrent state tensor (e.g. `[(hidden,), (hidden,)]` for an LSTM).
        cpu_time_index, preallocated_last_actions, cached_minibatch_indices: switches, see the module docstring.
    """

    def __init__(self, fields: dict[str, Field], segments: int, bptt_horizon: int, total_agents: int,
                 state_shapes: Sequence[tuple[int, ...]] = (), device: torch.device | str = "cpu", *,
                 cpu_time_index: bool = True, preallocated_last_actions: bool | str = True,
                 cached_minibatch_indices: bool = True) -> None:
        if total_agents < 1 or bptt_horizon < 1:
            raise UserError(f"segment buffer: total_agents={total_agents} and bptt_horizon={bptt_horizon} "
                            f"must be >= 1")
        if segments < total_agents:
            raise UserError(f"segment buffer: segments={segments} is fewer than total_agents={total_agents}; "
                            f"every agent needs a row (raise the batch size to at least "
                            f"{total_agents * bptt_horizon} steps)")
        self.segments, self.bptt_horizon, self.total_agents = segments, bptt_horizon, total_agents
        self.device = torch.device(device)
        self.cpu_time_index = cpu_time_index
        self.preallocated_last_actions = preallocated_last_actions
        self.cached_minibatch_indices = cached_minibatch_indices

        rows = segments + total_agents  # the rows, then one scratch row per agent
        self._data = {name: torch.zeros(rows, bptt_horizon, *f.shape, dtype=f.dtype, device=self.device)
                      for name, f in fields.items()}
        self._states = tuple(torch.zeros(rows, *shape, device=self.device) for shape in state_shapes)
        self.data = {name: value[:segments] for name, value in self._data.items()}
        """name -> [segments, bptt_horizon, ...] views of the rows."""
        self.states = tuple(value[:segments] for value in self._states)
        """Recurrent state snapshots at row starts, [segments, ...] each."""
        self.advantages = torch.zeros(segments, bptt_horizon, device=self.device)

        self._range = torch.arange(total_agents, dtype=torch.int64, device=self.device)
        self._scratch_rows = self._range + segments
        self.row_slot_ids = self._range.clone()
        """[total_agents] int64: the row each agent writes to."""
        self.t_in_row = torch.zeros(total_agents, dtype=torch.int64, device=self.device)
        """[total_agents] int64: each agent's time index within its row."""
        self.t_in_row_cpu = np.zeros(total_agents, dtype=np.int64) if cpu_time_index else None
        self.free_idx = total_agents
        """The next free row (`segments` when none is left)."""
        self.full_rows = 0
        self._in_real_row = np.ones(total_agents, dtype=bool)
        """Host bookkeeping: whether each agent writes to a row (else to its scratch row)."""

        action = fields.get("actions", Field((), torch.int64))
        if preallocated_last_actions is True:
            self.last_actions = torch.zeros(total_agents, *action.shape, dtype=action.dtype, device=self.device)
        else:
            self.last_actions = torch.zeros(0, *action.shape, dtype=action.dtype, device=self.device)

        self._all_segments = torch.arange(segments, dtype=torch.int64, device=self.device)
        self._sequential_cache: dict[tuple[int, int], Tensor] = {}
        self._ones_cache: dict[int, Tensor] = {}

    # ----------------------------------------------------------------------------------------------- rollout
    @property
    def ready(self) -> bool:
        """All rows are full: the rollout is complete."""
        return self.full_rows >= self.segments

    def reset_for_rollout(self) -> None:
        """Hand rows `0 .. total_agents - 1` out again and restart every time index at 0."""
        self.full_rows = 0
        self.free_idx = self.total_agents
        self._in_real_row.fill(True)
        self.row_slot_ids.copy_(self._range)
        self.t_in_row.zero_()
        if self.t_in_row_cpu is not None:
            self.t_in_row_cpu.fill(0)

    def time_index(self, env: slice) -> int:
        """The time index shared by the agents of `env` (a host mirror read, or a device read when the
        `cpu_time_index` switch is off)."""
        if self.t_in_row_cpu is not None:
            return int(self.t_in_row_cpu[env.start])
        return int(self.t_in_row[env.start].item())

    def rollout_position(self, env: slice) -> tuple[Tensor, Tensor]:
        """Views of the row slots and time indices of the agents of `env`."""
        return self.row_slot_ids[env], self.t_in_row[env]

    def store(self, env: slice, data: dict[str, Tensor], state: Sequence[Tensor] = ()) -> None:
        """Write one step of the agents of `env` (`data[name]`: [agents, ...]) at their rows and time index;
        `state`: the recurrent state they carried into this step, snapshotted when the step starts a row."""
        t = self.time_index(env)
        rows = self.row_slot_ids[env]
        for name, value in data.items():
            self._data[name][:, t].index_copy_(0, rows, value)
        if t == 0:
            for snapshot, value in zip(self._states, state, strict=True):
                snapshot.index_copy_(0, rows, value)
        if "actions" in data:
            if self.preallocated_last_actions == SEED_BEFORE:  # the size needed, read from the device each store
                self._grow_last_actions(int(self._range[env].max().item()) + 1)
            self._last_actions_for(env).copy_(data["actions"])
        self.t_in_row[env].add_(1)
        if self.t_in_row_cpu is not None:
            self.t_in_row_cpu[env] += 1
        if t + 1 >= self.bptt_horizon:
            self._retire_rows(env)

    def _retire_rows(self, env: slice) -> None:
        """The rows of `env` are done: count the real ones as full and give the agents the next free rows, or
        their scratch rows when none is left."""
        count = env.stop - env.start
        self.full_rows += int(self._in_real_row[env].sum())
        real = min(count, self.segments - self.free_idx)
        self._in_real_row[env] = np.arange(count) < real
        rows = self.row_slot_ids[env]
        torch.add(self._range[:real], self.free_idx, out=rows[:real])
        rows[real:].copy_(self._scratch_rows[env][real:])
        self.t_in_row[env].zero_()
        if self.t_in_row_cpu is not None:
            self.t_in_row_cpu[env] = 0
        self.free_idx += real

    def _grow_last_actions(self, size: int) -> None:
        if self.last_actions.shape[0] < size:
            grown = torch.zeros(size, *self.last_actions.shape[1:], dtype=self.last_actions.dtype, device=self.device)
            grown[: self.last_actions.shape[0]] = self.last_actions
            self.last_actions = grown

    def _last_actions_for(self, env: slice) -> Tensor:
        self._grow_last_actions(env.stop)
        return self.last_actions[env]

    def previous_actions(self, env: slice) -> Tensor:
        """The last action each agent of `env` stored (zeros before its first)."""
        return self._last_actions_for(env)

    # --------------------------------------------------------------------------------------------- minibatches
    def sequential_indices(self, mb_idx: int, count: int) -> Tensor:
        """Rows of minibatch `mb_idx`: `count` consecutive segments from `mb_idx * count`, wrapping."""
        if self.cached_minibatch_indices:
            key = (mb_idx, count)
            found = self._sequential_cache.get(key)
            if found is None:
                found = self._sequential_cache[key] = _sequential(self._all_segments, mb_idx, count)
            return found
        return _sequential(self._all_segments, mb_idx, count)

    def _unit_weights(self, count: int) -> Tensor:
        if not self.cached_minibatch_indices:
            return torch.ones(count, self.bptt_horizon, device=self.device)
        found = self._ones_cache.get(count)
        if found is None:
            found = self._ones_cache[count] = torch.ones(count, self.bptt_horizon, device=self.device)
        return found

    def sequential_minibatch(self, mb_idx: int, count: int) -> Minibatch:
        """Minibatch `mb_idx` of `count` consecutive rows, with unit priority weights."""
        indices = self.sequential_indices(mb_idx, count)
        return self._gather(indices, self._unit_weights(count))

    def prioritized_minibatch(self, mb_idx: int, count: int, alpha: float, beta: float,
                              generator: torch.Generator | None = None) -> Minibatch:
        """`count` rows drawn with probability proportional to mean |advantage| ** `alpha` over the row (with
        replacement only when `count > segments`), weighted by `(segments * p) ** -beta`; `alpha <= 0`: the
        sequential minibatch `mb_idx`."""
        if alpha <= 0.0:
            return self.sequential_minibatch(mb_idx, count)
        priority = torch.nan_to_num(self.advantages.abs().mean(1) ** alpha, 0.0, 0.0, 0.0)
        probs = (priority + 1e-6) / (priority.sum() + 1e-6)
        picked = torch.multinomial(probs, count, replacement=count > self.segments, generator=generator)
        weights = (self.segments * probs[picked]) ** -beta
        return self._gather(picked, weights.unsqueeze(1).expand(-1, self.bptt_horizon))

    def _gather(self, indices: Tensor, prio_weights: Tensor) -> Minibatch:
        data = {name: value.index_select(0, indices) for name, value in self.data.items()}
        state = tuple(s.index_select(0, indices) for s in self.states)
        return Minibatch(indices, data, state, self.advantages.index_select(0, indices), prio_weights)


def _sequential(order: Tensor, mb_idx: int, count: int) -> Tensor:
    """`count` consecutive rows from `mb_idx * count`, wrapping past the last: `order` holds the rows in order
    (`arange(segments)`). One `arange` where the minibatch does not wrap, as the gridworld seed's sequential sampler
    built it; a wrapping one takes the rows modulo their count."""
    total = order.shape[0]
    start = (mb_idx * count) % total
    if start + count <= total:
        return torch.arange(start, start + count, dtype=torch.int64, device=order.device)
    pick = (start + torch.arange(count, dtype=torch.int64, device=order.device)) % total
    return order[pick]
