"""Copies between host buffers and the training device, for adapters of simulators that step on the host."""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch import Tensor

ALIGN = 64
"""Each field of a `HostPack` starts at a multiple of this many bytes (any dtype's alignment, a cache line)."""


class HostPack:
    """Named host arrays a simulator fills, laid out in one host buffer, and their device tensors: views of one
    device buffer, so a step's results reach the device in one copy (`upload`) however many fields there are.

    `staged`: host and device buffers are separate (pinned host memory, non-blocking copies). The default stages on
    CUDA only; on the CPU the device tensors are the host arrays and `upload` copies nothing. `staged=True` on the
    CPU runs the CUDA path's copies with CPU tensors (what the tests count)."""

    def __init__(self, fields: dict[str, tuple[tuple[int, ...], torch.dtype]], device: torch.device,
                 staged: bool | None = None) -> None:
        self.device = device
        self.staged = device.type == "cuda" if staged is None else staged
        offsets, end = {}, 0
        for name, (shape, dtype) in fields.items():
            offsets[name] = end
            nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            end += -(-nbytes // ALIGN) * ALIGN
        pin = self.staged and device.type == "cuda"
        self.host_buffer = torch.zeros(max(end, 1), dtype=torch.uint8, pin_memory=pin)
        self.device_buffer = (torch.zeros_like(self.host_buffer, device=device) if self.staged
                              else self.host_buffer)
        self.uploads = 0
        """Copies to the device so far."""

        def carve(buffer: Tensor, name: str) -> Tensor:
            shape, dtype = fields[name]
            nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            return buffer[offsets[name]:offsets[name] + nbytes].view(dtype).view(shape)

        self.host = {name: carve(self.host_buffer, name) for name in fields}
        """Host tensors by name (numpy views: `array(name)`)."""
        self.dev = {name: carve(self.device_buffer, name) for name in fields}
        """Device tensors by name (the host tensors themselves when not staged)."""

    def array(self, name: str) -> np.ndarray:
        """The numpy view of a host field, for the simulator to write."""
        return self.host[name].numpy()

    def upload(self) -> None:
        """Every field to the device, in one copy (none when not staged)."""
        if self.staged:
            self.device_buffer.copy_(self.host_buffer, non_blocking=True)
            self.uploads += 1


class ActionStaging:
    """The device tensor actions are written into and its host copy the simulator reads: one copy per step to the
    host (none when not staged, where both are one tensor). `host`: the simulator's own action array (pinned on
    CUDA), else one is made."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, staged: bool,
                 host: Tensor | None = None) -> None:
        if host is None:
            host = torch.zeros(shape, dtype=dtype, pin_memory=staged and device.type == "cuda")
            if not staged:
                host = host.to(device)
        self.host = host
        self.dev = torch.zeros(shape, dtype=dtype, device=device) if staged else host
        self.downloads = 0
        """Copies to the host so far."""

    def download(self) -> None:
        if self.host is not self.dev:
            self.host.copy_(self.dev, non_blocking=True)
            self.downloads += 1


class HostStaging:
    """An adapter's results in a `HostPack` (one copy up per step) and its actions in an `ActionStaging` (one copy
    down), with a `HostProfile` of its step. On CUDA the host buffers are pinned and copied with
    `non_blocking=True`; `_event` (a `torch.cuda.Event`, or None on the CPU) orders host reuse after those
    copies."""

    device: torch.device
    _event: torch.cuda.Event | None
    _pack: HostPack
    _act: ActionStaging
    host_profile: HostProfile

    def transfers(self) -> dict[str, int]:
        """Copies between host and device so far: `uploads` (results) and `downloads` (actions)."""
        return {"uploads": self._pack.uploads, "downloads": self._act.downloads}

    def _wait_for_copies(self) -> None:
        """Before the simulator reads or rewrites the host buffers: wait for the copies queued on the stream."""
        if self._event is not None:
            self._event.record(torch.cuda.current_stream(self.device))
            self._event.synchronize()


class HostProfile:
    """Where an adapter's `step` spends host time: seconds per named part, laps of `time.perf_counter` (a few
    tenths of a microsecond each, against a host simulator's step of hundreds). `syncfree doctor` reports it."""

    def __init__(self, parts: tuple[str, ...]) -> None:
        self.seconds = dict.fromkeys(parts, 0.0)
        self.steps = 0
        self._last = 0.0

    def start(self) -> None:
        self._last = time.perf_counter()

    def lap(self, part: str) -> None:
        """The time since `start` or the previous lap goes to `part`."""
        now = time.perf_counter()
        self.seconds[part] += now - self._last
        self._last = now

    def reset(self) -> None:
        self.seconds = dict.fromkeys(self.seconds, 0.0)
        self.steps = 0
