"""Per-term observation history: a circular buffer of the last `length` values with per-env reset."""

from __future__ import annotations

import torch
from torch import Tensor

from syncfree.envs.managers.select import fill_


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

    def reset(self, selection: Tensor | None = None) -> None:
        """Forget the history of the selected envs (ids or mask; all when None): their next value fills the window."""
        ids = slice(None) if selection is None else selection
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

    def state_dict(self) -> dict[str, Tensor | None]:
        """Layout-independent: the chronological view, so either buffer class can load it."""
        return {"num_pushes": self._num_pushes.clone(), "history": None if self._buffer is None else self.buffer.clone()}

    def load_state_dict(self, state: dict) -> None:
        self._num_pushes.copy_(state["num_pushes"])
        history = state["history"]
        self._buffer = None if history is None else history.to(self.device).transpose(0, 1).contiguous()
        self._pointer = self.max_length - 1


class FastHistoryBuffer:
    """The same history without host reads or redundant copies.

    The length is a Python int; storage is [num_envs, length, ...], so the chronological view is one
    `index_select` with a cached index per write position, already in the flattened layout observation groups
    use; a new episode's first value fills its window with a branchless `torch.where`; a reset only clears the
    push count (the next append back-fills the window before anyone reads it).
    """

    def __init__(self, length: int, num_envs: int, device: torch.device) -> None:
        if length < 1:
            raise ValueError(f"history length must be at least 1, got {length}")
        self.num_envs, self.device, self.max_length = num_envs, device, length
        self._num_pushes = torch.zeros(num_envs, dtype=torch.long, device=device)
        self._pointer = -1
        self._buffer: Tensor | None = None
        steps = torch.arange(length, device=device)
        self._order = [torch.remainder(steps + p + 1, length) for p in range(length)]
        """`_order[p]`: storage slots oldest to newest when the newest value sits in slot p."""

    def reset(self, selection: Tensor | None = None) -> None:
        if selection is None:
            self._num_pushes.zero_()
        else:
            fill_(self._num_pushes, selection, 0)

    def append(self, data: Tensor) -> None:
        if data.shape[0] != self.num_envs:
            raise ValueError(f"history: got a batch of {data.shape[0]}, expected {self.num_envs}")
        if self._buffer is None:
            self._buffer = torch.empty((self.num_envs, self.max_length, *data.shape[1:]), dtype=data.dtype,
                                       device=self.device)
        self._pointer = (self._pointer + 1) % self.max_length
        self._buffer[:, self._pointer].copy_(data)
        first_push = (self._num_pushes == 0).view(-1, 1, *([1] * (data.dim() - 1)))
        torch.where(first_push, data.unsqueeze(1), self._buffer, out=self._buffer)
        self._num_pushes += 1

    @property
    def buffer(self) -> Tensor:
        """[num_envs, length, ...], oldest first."""
        if self._buffer is None:
            raise RuntimeError("history: read before the first append")
        return torch.index_select(self._buffer, 1, self._order[self._pointer])

    def state_dict(self) -> dict[str, Tensor | None]:
        return {"num_pushes": self._num_pushes.clone(), "history": None if self._buffer is None else self.buffer.clone()}

    def load_state_dict(self, state: dict) -> None:
        self._num_pushes.copy_(state["num_pushes"])
        history = state["history"]
        self._buffer = None if history is None else history.to(self.device).clone()
        self._pointer = self.max_length - 1
