"""The off-policy learners' replay buffer: a ring of `[slots, envs]` transitions, written once per rollout step and
sampled in batches with n-step returns.

`DeviceReplay` (`perf.replay_on_device`, the default) keeps the ring on the training device, allocated once: a
rollout step writes into its rows and a batch is gathered into preallocated tensors with indices drawn on the device,
so neither reads the host. `HostReplay` is the conventional buffer (Stable-Baselines3's `ReplayBuffer`): NumPy
arrays on the host, every rollout step copied to them (`.cpu().numpy()`, a host read per tensor), and each batch
indexed there (its indices drawn on the host, from torch's CPU generator) and moved to the device. On the CPU both
draw from that generator, so they give the same batches bit for bit.

N-step returns (`n_step > 1`): a sampled transition at slot `s` sums `gamma^k r_(s+k)` until its episode ends or `n`
steps are summed, and bootstraps from the next observation of the last step summed, discounted by `gamma^(m+1)` and
zero where that step terminated. `vectorized=True` (`perf.vectorized_n_step`) gathers the `n` steps of a batch at
once and sums them with one masked product; off, a Python loop over the `n` steps gathers and accumulates one step
at a time (the conventional form). The newest `n - 1` slots are not sampled (their later steps are not written yet).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from syncfree.errors import allocating

BUFFER_MEMORY = "lower the algorithm's buffer_size (the replay buffer holds that many transitions of every group it "\
                "stores)"


@dataclass
class Batch:
    """A sampled batch: observations by group, actions, n-step returns, the bootstrap's discount (`gamma^(m+1)`,
    0 where the last step summed terminated) and the next observations it bootstraps from."""

    obs: dict[str, Tensor]
    actions: Tensor
    returns: Tensor
    discounts: Tensor
    next_obs: dict[str, Tensor]


def n_step_sums(rewards: Tensor, done: Tensor, terminated: Tensor, gamma: float) -> tuple[Tensor, Tensor, Tensor]:
    """From `[batch, n]` rewards and flags of `n` consecutive steps: the discounted sums up to each row's first
    done step (included), the bootstrap's discounts `gamma^(m+1) (1 - terminated_m)` and `m`, the offset of the last
    step summed. One gather's worth of work, whatever `n`."""
    n = rewards.shape[1]
    alive = torch.ones_like(done)
    if n > 1:  # a step counts while no earlier one of the row ended its episode
        torch.cumprod(1.0 - done[:, :-1], dim=1, out=alive[:, 1:])
    powers = discount_powers(gamma, n, rewards.device)
    returns = (rewards * alive * powers[:n]).sum(dim=1)
    last = alive.sum(dim=1).long() - 1
    ended = terminated.gather(1, last.unsqueeze(1)).squeeze(1)
    discounts = powers[last + 1] * (1.0 - ended)
    return returns, discounts, last


@functools.cache
def discount_powers(gamma: float, n: int, device: torch.device) -> Tensor:
    """`gamma^k` for k = 0..n on `device`, made once (not copied to the device at every batch)."""
    with torch.inference_mode(False), torch.no_grad():
        return torch.tensor([gamma ** k for k in range(n + 1)], device=device)


def n_step_sums_loop(rewards: Tensor, done: Tensor, terminated: Tensor,
                     gamma: float) -> tuple[Tensor, Tensor, Tensor]:
    """`n_step_sums` as a Python loop over the steps (the conventional form): one step's reward, flags and
    discount at a time."""
    batch, n = rewards.shape
    returns = torch.zeros(batch, device=rewards.device)
    alive = torch.ones(batch, device=rewards.device)
    last = torch.zeros(batch, dtype=torch.long, device=rewards.device)
    discounts = torch.zeros(batch, device=rewards.device)
    for k in range(n):
        returns += (gamma ** k) * alive * rewards[:, k]
        counted = alive > 0
        last = torch.where(counted, k, last)
        discounts = torch.where(counted, (gamma ** (k + 1)) * (1.0 - terminated[:, k]), discounts)
        alive = alive * (1.0 - done[:, k])
    return returns, discounts, last


class DeviceReplay:
    """The ring on `device`, preallocated: observations of each group in `dims`, actions, rewards, terminated and
    done flags (a time-out is done, not terminated), next observations."""

    on_host = False

    def __init__(self, dims: dict[str, int], action_dim: int, num_envs: int, capacity: int, batch_size: int,
                 n_step: int, gamma: float, device: torch.device, vectorized: bool = True) -> None:
        self.num_envs, self.batch_size, self.n_step, self.gamma = num_envs, batch_size, n_step, gamma
        self.device, self.vectorized = device, vectorized
        self.slots = ring_slots(capacity, num_envs, n_step)
        """Rows of `num_envs` transitions the ring holds."""
        self.position = 0
        """The slot the next rollout step writes (host integer)."""
        self.filled = 0
        """Slots holding transitions (host integer)."""
        with allocating(BUFFER_MEMORY):
            self.obs = {g: self.zeros(num_envs, d) for g, d in dims.items()}
            self.next_obs = {g: self.zeros(num_envs, d) for g, d in dims.items()}
            self.actions = self.zeros(num_envs, action_dim)
            self.rewards = self.zeros(num_envs)
            self.terminated = self.zeros(num_envs)
            self.done = self.zeros(num_envs)
            self.batch = Batch({g: torch.zeros(batch_size, d, device=device) for g, d in dims.items()},
                               torch.zeros(batch_size, action_dim, device=device), torch.zeros(batch_size, device=device),
                               torch.zeros(batch_size, device=device),
                               {g: torch.zeros(batch_size, d, device=device) for g, d in dims.items()})
        self.rows = torch.zeros(batch_size, dtype=torch.long, device="cpu" if self.on_host else device)
        """The batch's flat `slot * envs + env` indices (drawn in place; on the host for `HostReplay`)."""
        self.offsets = torch.arange(n_step, device=device) * num_envs
        """Flat index offsets of a row's `n` consecutive steps."""

    def zeros(self, *shape: int) -> Tensor:
        return torch.zeros(self.slots, *shape, device=self.device)

    def tensors(self) -> list[Tensor]:
        return [*self.obs.values(), *self.next_obs.values(), self.actions, self.rewards, self.terminated, self.done]

    @property
    def transitions(self) -> int:
        return self.filled * self.num_envs

    def sampleable(self) -> int:
        """Rows a batch may draw: the filled slots but the newest `n - 1`, times the envs."""
        return max(self.filled - self.n_step + 1, 0) * self.num_envs

    # -- writing --------------------------------------------------------------------------------------------

    def write_obs(self, obs: dict[str, Tensor], actions: Tensor) -> None:
        """The policy's side of a rollout step, into the slot it fills."""
        slot = self.position
        for g, stored in self.obs.items():
            stored[slot].copy_(obs[g])
        self.actions[slot].copy_(actions)

    def write_step(self, reward: Tensor, terminated: Tensor, truncated: Tensor, next_obs: dict[str, Tensor]) -> None:
        """The env's side of the step, then the slot is done: the ring moves on."""
        slot = self.position
        self.rewards[slot].copy_(reward)
        self.terminated[slot].copy_(terminated)
        torch.logical_or(terminated.bool(), truncated.bool(), out=self.done[slot])
        for g, stored in self.next_obs.items():
            stored[slot].copy_(next_obs[g])
        self.position = (slot + 1) % self.slots
        self.filled = min(self.filled + 1, self.slots)

    # -- sampling -------------------------------------------------------------------------------------------

    def draw(self) -> Tensor:
        """Flat indices of a batch, uniform over the sampleable rows (oldest first), drawn on the device."""
        torch.randint(0, max(self.sampleable(), 1), (self.batch_size,), device=self.rows.device, out=self.rows)
        oldest = (self.position - self.filled) % self.slots
        if oldest:  # the ring wrapped: count from the oldest slot
            self.rows.add_(oldest * self.num_envs).remainder_(self.slots * self.num_envs)
        return self.rows

    def sample(self) -> Batch:
        rows, batch = self.draw(), self.batch

        def gather(stored: Tensor, into: Tensor, at: Tensor = rows) -> None:
            torch.index_select(stored.view(-1, *stored.shape[2:]), 0, at, out=into)

        for g, stored in self.obs.items():
            gather(stored, batch.obs[g])
        gather(self.actions, batch.actions)
        if self.n_step == 1:
            gather(self.rewards, batch.returns)
            gather(self.terminated, batch.discounts)
            batch.discounts.neg_().add_(1.0).mul_(self.gamma)
            last_rows = rows
        else:
            last_rows = self.n_step_targets(rows)
        for g, stored in self.next_obs.items():
            gather(stored, batch.next_obs[g], last_rows)
        return batch

    def n_step_targets(self, rows: Tensor) -> Tensor:
        """The batch's n-step returns and discounts (into `batch`), and the flat rows they bootstrap from."""
        size = self.slots * self.num_envs
        steps = (rows.unsqueeze(1) + self.offsets).remainder_(size)  # [batch, n]
        flat = (self.rewards.view(-1), self.done.view(-1), self.terminated.view(-1))
        if self.vectorized:
            rewards, done, terminated = (x[steps] for x in flat)
            returns, discounts, last = n_step_sums(rewards, done, terminated, self.gamma)
        else:
            columns = [[x.index_select(0, steps[:, k]) for k in range(self.n_step)] for x in flat]
            rewards, done, terminated = (torch.stack(c, dim=1) for c in columns)
            returns, discounts, last = n_step_sums_loop(rewards, done, terminated, self.gamma)
        self.batch.returns.copy_(returns)
        self.batch.discounts.copy_(discounts)
        return steps.gather(1, last.unsqueeze(1)).squeeze(1)

    # -- checkpoints (`save_buffer`) -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, object]:
        return {"position": self.position, "filled": self.filled, "tensors": [t.cpu() for t in self.tensors()]}

    def load_state_dict(self, state: dict[str, object]) -> None:
        tensors, position, filled = state["tensors"], state["position"], state["filled"]
        if not isinstance(tensors, list):
            raise ValueError("its tensors are not a list")
        if not (isinstance(position, int) and isinstance(filled, int) and 0 <= position < self.slots
                and 0 <= filled <= self.slots):
            raise ValueError(f"position={position!r}, filled={filled!r} for a ring of {self.slots} slots")
        if len(tensors) != len(self.tensors()):
            raise ValueError(f"{len(tensors)} stored tensors for {len(self.tensors())}")
        for stored, saved in zip(self.tensors(), tensors, strict=True):
            if not isinstance(saved, Tensor) or saved.shape != stored.shape or saved.dtype != stored.dtype:
                raise ValueError(f"a stored tensor of shape {getattr(saved, 'shape', None)} for one of "
                                 f"{tuple(stored.shape)} (buffer_size, env.num_envs and the observation sizes must "
                                 "be the run's)")
        *_, actions, _, terminated, done = tensors
        check_stored_ranges(actions, terminated, done)
        for stored, saved in zip(self.tensors(), tensors, strict=True):
            stored.copy_(saved)
        self.position, self.filled = position, filled


def check_stored_ranges(actions: Tensor, terminated: Tensor, done: Tensor) -> None:
    """A saved ring holds what a rollout writes: actions in [-1, 1], terminated and done flags of 0 or 1, every
    terminated step done; `ValueError` naming the first that does not (the n-step sums index by the flags)."""
    for name, flags in (("terminated", terminated), ("done", done)):
        if bool(((flags != 0) & (flags != 1)).any()):
            raise ValueError(f"its {name} flags hold values other than 0 and 1")
    if bool((terminated > done).any()):
        raise ValueError("it holds terminated steps not marked done")
    if bool((actions.abs() > 1).any()):
        raise ValueError("it holds actions outside [-1, 1]")


class HostReplay(DeviceReplay):
    """The conventional buffer: the same ring as NumPy arrays on the host, written with `.cpu().numpy()` at every
    rollout step and sampled there with indices drawn on the host, each batch moved to the training device
    (Stable-Baselines3's `ReplayBuffer`)."""

    on_host = True

    def zeros(self, *shape: int) -> Tensor:
        return torch.zeros(self.slots, *shape)  # host memory, read and written through NumPy views

    def write_obs(self, obs: dict[str, Tensor], actions: Tensor) -> None:
        slot = self.position
        for g, stored in self.obs.items():
            stored.numpy()[slot] = obs[g].cpu().numpy()
        self.actions.numpy()[slot] = actions.cpu().numpy()

    def write_step(self, reward: Tensor, terminated: Tensor, truncated: Tensor, next_obs: dict[str, Tensor]) -> None:
        slot = self.position
        self.rewards.numpy()[slot] = reward.cpu().numpy()
        self.terminated.numpy()[slot] = terminated.cpu().numpy()
        self.done.numpy()[slot] = np.logical_or(terminated.cpu().numpy(), truncated.cpu().numpy())
        for g, stored in self.next_obs.items():
            stored.numpy()[slot] = next_obs[g].cpu().numpy()
        self.position = (slot + 1) % self.slots
        self.filled = min(self.filled + 1, self.slots)

    def sample(self) -> Batch:
        rows = self.draw().numpy()

        def moved(stored: Tensor, at: np.ndarray = rows) -> Tensor:
            return torch.as_tensor(stored.numpy().reshape(-1, *stored.shape[2:])[at]).to(self.device)

        obs = {g: moved(stored) for g, stored in self.obs.items()}
        actions = moved(self.actions)
        if self.n_step == 1:
            returns = moved(self.rewards)
            discounts = self.gamma * (1.0 - moved(self.terminated))
            last_rows = rows
        else:
            size = self.slots * self.num_envs
            steps = (rows[:, None] + np.arange(self.n_step) * self.num_envs) % size
            sums = n_step_sums if self.vectorized else n_step_sums_loop
            returns, discounts, last = sums(moved(self.rewards, steps), moved(self.done, steps),
                                            moved(self.terminated, steps), self.gamma)
            last_rows = steps[np.arange(len(rows)), last.cpu().numpy()]
        return Batch(obs, actions, returns, discounts, {g: moved(stored, last_rows)
                                                        for g, stored in self.next_obs.items()})


def ring_slots(capacity: int, num_envs: int, n_step: int) -> int:
    """Rows of `num_envs` transitions a ring of `capacity` holds: the capacity rounded up, at least `n_step`."""
    return max(n_step, -(-capacity // num_envs))


def drawable_transitions(capacity: int, num_envs: int, n_step: int) -> int:
    """Transitions a batch can draw from a full ring of `capacity`: all but the newest `n_step - 1` steps of every
    env, which wait for their n-step returns."""
    return (ring_slots(capacity, num_envs, n_step) - n_step + 1) * num_envs


def ring_bytes(dims: dict[str, int], action_dim: int, num_envs: int, capacity: int, n_step: int) -> int:
    """Bytes of a ring of `capacity` transitions (float32: every group's observation and next observation, the
    action, the reward, and the terminated and done flags), as `DeviceReplay` and `HostReplay` allocate it."""
    slots = ring_slots(capacity, num_envs, n_step)
    return slots * num_envs * (2 * sum(dims.values()) + action_dim + 3) * 4


def replay_buffer(on_device: bool, dims: dict[str, int], action_dim: int, num_envs: int, capacity: int,
                  batch_size: int, n_step: int, gamma: float, device: torch.device,
                  vectorized: bool = True) -> DeviceReplay:
    """`DeviceReplay` (`perf.replay_on_device`) or the conventional `HostReplay`."""
    kind = DeviceReplay if on_device else HostReplay
    return kind(dims, action_dim, num_envs, capacity, batch_size, n_step, gamma, device, vectorized)
