"""Per-step bookkeeping that the runner reads once per iteration: finished episodes and non-finite env output.

Each monitor has a deferred path (device buffers, moved to the host inside the iteration's single transfer)
and the conventional path (host reads at every step). Both produce the same values in the same order.
"""

from __future__ import annotations

from collections import deque
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from syncfree.core.switches import PerfConfig
from syncfree.envs.api import StepResult


class StepMonitors:
    """The episode statistics and the non-finite check of every rollout step (a `syncfree.algo.base.StepObserver`:
    the algorithm runs them from its record step). With both deferred they are a pure function of device tensors
    that a compiled record step takes into its graph."""

    def __init__(self, steps: int, num_envs: int, device: torch.device, perf: PerfConfig) -> None:
        self.episodes = EpisodeStats(steps, num_envs, device, deferred=perf.deferred_episode_stats)
        self.nonfinite = NonFiniteMonitor(num_envs, device, deferred=perf.deferred_nonfinite_check, steps=steps)
        self.fused = self.episodes.deferred and self.nonfinite.deferred
        self._done = torch.zeros(num_envs, dtype=torch.bool, device=device)

    def rows(self, t: int) -> tuple[Tensor, Tensor]:
        return self.episodes.rows[t], self.nonfinite.step_values[t]

    def record_rows(self, step: StepResult, rows: tuple[Tensor, ...]) -> None:
        episode_row, step_value = rows
        done = torch.logical_or(step.terminated, step.truncated, out=self._done)
        record_row(episode_row, done, step.info["episode_return"], step.info["episode_length"])
        self.nonfinite.check_row(step_value, step.obs, step.reward)

    def record(self, t: int, step: StepResult) -> None:
        if self.fused:
            self.record_rows(step, self.rows(t))
            return
        done = torch.logical_or(step.terminated, step.truncated, out=self._done)
        self.episodes.record(t, done, step.info["episode_return"], step.info["episode_length"])
        self.nonfinite.check(t, step.obs, step.reward, done)


class EpisodeStats:
    """Returns and lengths of finished episodes, in (step, env) order."""

    def __init__(self, steps: int, num_envs: int, device: torch.device, deferred: bool, window: int = 100) -> None:
        self.deferred = deferred
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.recent_lengths: deque[float] = deque(maxlen=window)
        self.iteration_episodes: list[tuple[float, float]] = []
        """(return, length) of every episode that ended in the last completed iteration."""
        self._steps, self._num_envs = steps, num_envs
        if deferred:
            self._buffer = torch.zeros(3, steps, num_envs, device=device)  # done, return, length
            self.rows = list(self._buffer.unbind(1))
            """`rows[t]`: the [3, num_envs] view of step t (done, return, length), for `record_row`."""
        else:
            self._pending: list[tuple[float, float]] = []

    def record(self, t: int, done: Tensor, episode_return: Tensor, episode_length: Tensor) -> None:
        if self.deferred:
            record_row(self.rows[t], done, episode_return, episode_length)
            return
        ids = done.nonzero().squeeze(-1)
        self._pending.extend(zip(episode_return[ids].cpu().tolist(), episode_length[ids].float().cpu().tolist(),
                                 strict=True))

    def device_payload(self) -> Tensor | None:
        return self._buffer.view(-1) if self.deferred else None

    def payload_size(self) -> int:
        return 3 * self._steps * self._num_envs if self.deferred else 0

    def end_iteration(self, payload: np.ndarray | None) -> None:
        if self.deferred:
            done, returns, lengths = cast(np.ndarray, payload).reshape(3, -1)  # the deferred path has a payload
            mask = done > 0.5
            episodes = list(zip(returns[mask].tolist(), lengths[mask].tolist(), strict=True))
        else:
            episodes, self._pending = self._pending, []
        self.iteration_episodes = episodes
        for ret, length in episodes:
            self.recent_returns.append(ret)
            self.recent_lengths.append(length)

    def summary(self) -> dict[str, float]:
        if not self.recent_returns:
            return {}
        return {"mean_return": float(np.mean(self.recent_returns)), "mean_length": float(np.mean(self.recent_lengths))}

    def state_dict(self) -> dict[str, Any]:
        return {"recent_returns": list(self.recent_returns), "recent_lengths": list(self.recent_lengths)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.recent_returns.extend(state["recent_returns"])
        self.recent_lengths.extend(state["recent_lengths"])


class NonFiniteMonitor:
    """The first step of the iteration at which an env produced NaN or Inf (observation group or reward), and
    which envs did so then: a NaN spreads to every env through the normalizer, so only the first ones matter."""

    def __init__(self, num_envs: int, device: torch.device, deferred: bool, steps: int = 1) -> None:
        self.deferred = deferred
        self.num_envs = num_envs
        if deferred:
            self._first_step = torch.full((num_envs,), float("inf"), device=device)
            self.step_values = list(torch.arange(steps, dtype=torch.float32, device=device).unbind())
            """`step_values[t]`: step t as a 0-dim device tensor, for `check_row`."""
        else:
            self._first: tuple[int, list[int]] | None = None

    def check(self, t: int, obs: dict[str, Tensor], reward: Tensor, done: Tensor) -> None:
        """Step `t`'s check. Conventional path: rsl_rl's `check_for_nan`, one host read per observation group, for
        the reward and for the done flags (here `isfinite`, which also catches Inf)."""
        if self.deferred:
            self.check_row(self.step_values[t], obs, reward)
            return
        if self._first is not None:
            return
        tensors = _distinct(obs, reward)
        for x in (*obs.values(), reward, done):
            if not torch.isfinite(x).all():
                bad = torch.zeros(self.num_envs, dtype=torch.bool, device=x.device)
                for y in tensors:
                    bad |= _row_not_finite(y)
                self._first = (t, bad.nonzero().squeeze(-1).tolist())
                return

    def check_row(self, step: Tensor, obs: dict[str, Tensor], reward: Tensor) -> None:
        """The deferred check of one step (`step`: its index as a 0-dim tensor, see `step_values`)."""
        bad = torch.zeros_like(self._first_step, dtype=torch.bool)
        for x in _distinct(obs, reward):
            bad.logical_or_(_row_not_finite(x))
        torch.minimum(self._first_step, torch.where(bad, step, float("inf")), out=self._first_step)

    def device_payload(self) -> Tensor | None:
        return self._first_step if self.deferred else None

    def any_bad(self, out: Tensor) -> None:
        """Write 1 into `out` (a 0-dim float tensor) if any env produced non-finite output this iteration, else 0;
        on the device for the deferred path."""
        if self.deferred:
            out.copy_(torch.lt(self._first_step, float("inf")).any())
        else:
            out.fill_(float(self._first is not None))

    def payload_size(self) -> int:
        return self.num_envs if self.deferred else 0

    def end_iteration(self, payload: np.ndarray | None) -> tuple[int, list[int]] | None:
        """(step, env ids) of the first non-finite output since the last call, or None."""
        if self.deferred:
            self._first_step.fill_(float("inf"))
            values = cast(np.ndarray, payload)  # the deferred path has a payload
            first = values.min()
            return None if np.isinf(first) else (int(first), np.flatnonzero(values == first).tolist())
        first, self._first = self._first, None
        return first


def record_row(row: Tensor, done: Tensor, episode_return: Tensor, episode_length: Tensor) -> None:
    """Write one step's done flags, returns and lengths into `row` ([3, num_envs], see `EpisodeStats.rows`)."""
    row[0].copy_(done)
    row[1].copy_(episode_return)
    row[2].copy_(episode_length)


def _distinct(obs: dict[str, Tensor], reward: Tensor) -> list[Tensor]:
    """The reward and each observation tensor once (a group shared by two names counts once). Compared with `is`,
    not `id()`: a compiled step would guard on the ids and compile again for every new env."""
    tensors = [reward]
    for x in obs.values():
        if not any(x is seen for seen in tensors):
            tensors.append(x)
    return tensors


def _row_not_finite(x: Tensor) -> Tensor:
    finite = torch.isfinite(x)
    return ~(finite if x.dim() == 1 else finite.flatten(1).all(-1))
