"""Per-term observation history: a circular buffer of the last `length` values with per-env reset."""

from __future__ import annotations

import torch
from torch import Tensor


class HistoryBuffer:
    """Circular history of a batched term, read back oldest to newest.

    This is the conventional implementation used by Isaac Lab 2.x observation managers: the maximum length is
    kept in a device tensor and read back when needed, envs that were just reset are back-filled with their
    first value behind an `any()` branch on the host, and the chronological view is a clone rolled so that
    the newest entry comes last.
    """

    def __init__(self, length: int, num_envs: int, device: torch.device) -> None:
        if length < 1:
            raise ValueError(f"history length must be at least 1, got {length}")
        self.num_envs = num_envs
        self.device = device
        self._max_len = torch.full((num_envs,), length, dtype=torch.int, device=device)
        self._num_pushes = torch.zeros(num_envs, dtype=torch.long, device=device)
        self._pointer = -1
        self._buffer: Tensor | None = None

    @property
    def max_length(self) -> int:
        return int(self._max_len[0].item())

    def reset(self, env_ids: Tensor | slice | None = None) -> None:
        """Forget the history of `env_ids` (all envs when None); their next value fills the whole window."""
        ids = slice(None) if env_ids is None else env_ids
        self._num_pushes[ids] = 0
        if self._buffer is not None:
            self._buffer[:, ids] = 0.0

    def append(self, data: Tensor) -> None:
        if data.shape[0] != self.num_envs:
            raise ValueError(f"history: got a batch of {data.shape[0]}, expected {self.num_envs}")
        if self._buffer is None:
            self._buffer = torch.empty((self.max_length, *data.shape), dtype=data.dtype, device=self.device)
        self._pointer = (self._pointer + 1) % self.max_length
        self._buffer[self._pointer] = data
        first_push = self._num_pushes == 0
        if torch.any(first_push):
            self._buffer[:, first_push] = data[first_push]
        self._num_pushes += 1

    @property
    def buffer(self) -> Tensor:
        """[num_envs, length, ...], oldest first."""
        if self._buffer is None:
            raise RuntimeError("history: read before the first append")
        chronological = torch.roll(self._buffer.clone(), shifts=self.max_length - self._pointer - 1, dims=0)
        return chronological.transpose(0, 1)

    def state_dict(self) -> dict[str, Tensor | int | None]:
        return {"num_pushes": self._num_pushes.clone(), "pointer": self._pointer,
                "buffer": None if self._buffer is None else self._buffer.clone()}

    def load_state_dict(self, state: dict) -> None:
        self._num_pushes.copy_(state["num_pushes"])
        self._pointer = int(state["pointer"])
        self._buffer = None if state["buffer"] is None else state["buffer"].to(self.device).clone()
