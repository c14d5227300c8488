"""Per-step bookkeeping that the runner reads once per iteration: finished episodes and non-finite env output.

Each monitor comes in two classes: the deferred one (device buffers, moved to the host inside the iteration's single
transfer) and the conventional one (host reads at every step). Both produce the same values in the same order; the
switch picks the class (`episode_stats`, `nonfinite_monitor`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from syncfree.core.compile import mark_static
from syncfree.core.switches import PerfConfig
from syncfree.envs.api import StepResult
from syncfree.errors import NonFiniteError


class StepMonitors:
    """The episode statistics and the non-finite check of every rollout step (a `syncfree.algo.base.StepObserver`:
    the algorithm runs them from its record step). With both deferred they are a pure function of device tensors
    that a compiled record step takes into its graph."""

    def __init__(self, steps: int, num_envs: int, device: torch.device, perf: PerfConfig) -> None:
        self.episodes = episode_stats(steps, num_envs, device, deferred=perf.deferred_episode_stats)
        self.nonfinite = nonfinite_monitor(steps, num_envs, device, deferred=perf.deferred_nonfinite_check)
        self._deferred = ((self.episodes, self.nonfinite) if isinstance(self.episodes, DeferredEpisodeStats)
                          and isinstance(self.nonfinite, DeferredNonFinite) else None)
        self.fused = self._deferred is not None
        self._done = torch.zeros(num_envs, dtype=torch.bool, device=device)
        if self._deferred is not None:  # what a compiled record step writes keeps its address (CUDA graphs)
            mark_static(perf, device, self._done, *self._deferred[0].rows, self._deferred[1].first_step)

    def rows(self, t: int) -> tuple[Tensor, Tensor]:
        episodes, nonfinite = cast(tuple[DeferredEpisodeStats, DeferredNonFinite], self._deferred)  # when `fused`
        return episodes.rows[t], nonfinite.step_values[t]

    def record_rows(self, step: StepResult, rows: tuple[Tensor, ...]) -> None:
        episode_row, step_value = rows
        done = torch.logical_or(step.terminated, step.truncated, out=self._done)
        record_row(episode_row, done, step.info["episode_return"], step.info["episode_length"])
        nonfinite = cast(DeferredNonFinite, self.nonfinite)  # record_rows runs when both are deferred (`fused`)
        nonfinite.check_row(step_value, step.obs, step.reward)

    def record(self, t: int, step: StepResult) -> None:
        if self.fused:
            self.record_rows(step, self.rows(t))
            return
        done = torch.logical_or(step.terminated, step.truncated, out=self._done)
        self.episodes.record(t, done, step.info["episode_return"], step.info["episode_length"])
        self.nonfinite.check(t, step.obs, step.reward, done)


SUMMARY = ("mean_return", "mean_length")
"""What a record says of the recent episodes, once one has ended."""


class EpisodeStats(ABC):
    """Returns and lengths of finished episodes, in (step, env) order: the last iteration's and a window of recent
    ones. `DeferredEpisodeStats` records them on the device, `HostEpisodeStats` on the host at every step."""

    def __init__(self, window: int = 100) -> None:
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.recent_lengths: deque[float] = deque(maxlen=window)
        self.iteration_episodes: list[tuple[float, float]] = []
        """(return, length) of every episode that ended in the last completed iteration."""

    @abstractmethod
    def record(self, t: int, done: Tensor, episode_return: Tensor, episode_length: Tensor) -> None:
        """Step `t`'s finished episodes."""

    def device_payload(self) -> Tensor | None:
        """What the iteration's host transfer carries for these statistics (None: nothing)."""
        return None

    @abstractmethod
    def finished(self, payload: np.ndarray | None) -> list[tuple[float, float]]:
        """The iteration's finished episodes, from the transfer's `payload` or what was read at each step."""

    def end_iteration(self, payload: np.ndarray | None) -> None:
        self.iteration_episodes = episodes = self.finished(payload)
        for ret, length in episodes:
            self.recent_returns.append(ret)
            self.recent_lengths.append(length)

    def summary(self) -> dict[str, float]:
        """`SUMMARY` over the recent episodes; nothing before the first episode ends."""
        if not self.recent_returns:
            return {}
        return dict(zip(SUMMARY, (float(np.mean(self.recent_returns)), float(np.mean(self.recent_lengths))),
                        strict=True))

    def state_dict(self) -> dict[str, Any]:
        return {"recent_returns": list(self.recent_returns), "recent_lengths": list(self.recent_lengths)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.recent_returns.extend(state["recent_returns"])
        self.recent_lengths.extend(state["recent_lengths"])


class DeferredEpisodeStats(EpisodeStats):
    """Done flags, returns and lengths written into a `[3, steps, envs]` device buffer, read in the iteration's
    transfer."""

    def __init__(self, steps: int, num_envs: int, device: torch.device, window: int = 100) -> None:
        super().__init__(window)
        self._buffer = torch.zeros(3, steps, num_envs, device=device)  # done, return, length
        self.rows = list(self._buffer.unbind(1))
        """`rows[t]`: the [3, num_envs] view of step t (done, return, length), for `record_row`."""

    def record(self, t: int, done: Tensor, episode_return: Tensor, episode_length: Tensor) -> None:
        record_row(self.rows[t], done, episode_return, episode_length)

    def device_payload(self) -> Tensor:
        return self._buffer.view(-1)

    def finished(self, payload: np.ndarray | None) -> list[tuple[float, float]]:
        done, returns, lengths = cast(np.ndarray, payload).reshape(3, -1)  # the transfer carries the buffer
        mask = done > 0.5
        return list(zip(returns[mask].tolist(), lengths[mask].tolist(), strict=True))


class HostEpisodeStats(EpisodeStats):
    """The conventional path (rsl_rl's logger): the finished episodes' ids, returns and lengths read at every step."""

    def __init__(self, window: int = 100) -> None:
        super().__init__(window)
        self._pending: list[tuple[float, float]] = []

    def record(self, t: int, done: Tensor, episode_return: Tensor, episode_length: Tensor) -> None:
        ids = done.nonzero().squeeze(-1)
        self._pending.extend(zip(episode_return[ids].cpu().tolist(), episode_length[ids].float().cpu().tolist(),
                                 strict=True))

    def finished(self, payload: np.ndarray | None) -> list[tuple[float, float]]:
        episodes, self._pending = self._pending, []
        return episodes


def episode_stats(steps: int, num_envs: int, device: torch.device, deferred: bool, window: int = 100) -> EpisodeStats:
    """The episode statistics of a run: deferred (`perf.deferred_episode_stats`) or read at every step."""
    return DeferredEpisodeStats(steps, num_envs, device, window) if deferred else HostEpisodeStats(window)


class NonFiniteMonitor(ABC):
    """The first step of the iteration at which an env produced NaN or Inf (observation group or reward), and
    which envs did so then: a NaN spreads to every env through the normalizer, so only the first ones matter.
    `DeferredNonFinite` keeps it on the device, `HostNonFinite` reads the host at every step."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    @abstractmethod
    def check(self, t: int, obs: dict[str, Tensor], reward: Tensor, done: Tensor) -> None:
        """Step `t`'s check."""

    def device_payload(self) -> Tensor | None:
        """What the iteration's host transfer carries for the check (None: nothing)."""
        return None

    @abstractmethod
    def any_bad(self, out: Tensor) -> None:
        """Write 1 into `out` (a 0-dim float tensor) if any env produced non-finite output this iteration, else 0."""

    @abstractmethod
    def end_iteration(self, payload: np.ndarray | None) -> tuple[int, list[int]] | None:
        """(step, env ids) of the first non-finite output since the last call, or None."""


class DeferredNonFinite(NonFiniteMonitor):
    """Each env's first non-finite step, kept on the device and read in the iteration's transfer."""

    def __init__(self, steps: int, num_envs: int, device: torch.device) -> None:
        super().__init__(num_envs)
        self.first_step = torch.full((num_envs,), float("inf"), device=device)
        """Each env's first non-finite step of the iteration (inf: none yet)."""
        self.step_values = list(torch.arange(steps, dtype=torch.float32, device=device).unbind())
        """`step_values[t]`: step t as a 0-dim device tensor, for `check_row`."""

    def check(self, t: int, obs: dict[str, Tensor], reward: Tensor, done: Tensor) -> None:
        self.check_row(self.step_values[t], obs, reward)

    def check_row(self, step: Tensor, obs: dict[str, Tensor], reward: Tensor) -> None:
        """The check of one step (`step`: its index as a 0-dim tensor, see `step_values`)."""
        bad = torch.zeros_like(self.first_step, dtype=torch.bool)
        for x in _distinct(obs, reward):
            bad.logical_or_(_row_not_finite(x))
        torch.minimum(self.first_step, torch.where(bad, step, float("inf")), out=self.first_step)

    def device_payload(self) -> Tensor:
        return self.first_step

    def any_bad(self, out: Tensor) -> None:
        out.copy_(torch.lt(self.first_step, float("inf")).any())

    def end_iteration(self, payload: np.ndarray | None) -> tuple[int, list[int]] | None:
        self.first_step.fill_(float("inf"))
        values = cast(np.ndarray, payload)  # the transfer carries the first steps
        first = values.min()
        return None if np.isinf(first) else (int(first), np.flatnonzero(values == first).tolist())


class HostNonFinite(NonFiniteMonitor):
    """The conventional path: rsl_rl's `check_for_nan`, one host read per observation group, for the reward and
    for the done flags at every step (here `isfinite`, which also catches Inf)."""

    def __init__(self, num_envs: int) -> None:
        super().__init__(num_envs)
        self._first: tuple[int, list[int]] | None = None

    def check(self, t: int, obs: dict[str, Tensor], reward: Tensor, done: Tensor) -> None:
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

    def any_bad(self, out: Tensor) -> None:
        out.fill_(float(self._first is not None))

    def end_iteration(self, payload: np.ndarray | None) -> tuple[int, list[int]] | None:
        first, self._first = self._first, None
        return first


def stop_on_nonfinite(first_bad: tuple[int, list[int]] | None, other_rank: bool, where: str) -> None:
    """Raise `NonFiniteError` naming the envs (and the step) that produced non-finite output this iteration
    (`first_bad`, from `NonFiniteMonitor.end_iteration`), or saying another rank's did (`other_rank`); `where`:
    the rank and iteration, as the line begins."""
    if first_bad is not None:
        step, envs = first_bad
        shown = ", ".join(map(str, envs[:8])) + (f", ... ({len(envs)} envs)" if len(envs) > 8 else "")
        raise NonFiniteError(f"{where}: non-finite observation or reward from env ids [{shown}] at rollout step "
                             f"{step}; stopped")
    if other_rank:
        raise NonFiniteError(f"{where}: another rank's envs produced a non-finite observation or reward (its error "
                             "names them); stopped")


def nonfinite_monitor(steps: int, num_envs: int, device: torch.device, deferred: bool) -> NonFiniteMonitor:
    """The non-finite check of a run: deferred (`perf.deferred_nonfinite_check`) or reading the host at every
    step."""
    return DeferredNonFinite(steps, num_envs, device) if deferred else HostNonFinite(num_envs)


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
