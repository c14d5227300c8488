"""Copies between host buffers and the training device, for adapters of simulators that step on the host."""

from __future__ import annotations

import torch
from torch import Tensor


class HostStaging:
    """On CUDA the host buffers are pinned and copied with `non_blocking=True`; `_event` (a `torch.cuda.Event`,
    or None on the CPU, where the host buffers are the device tensors) orders host reuse after those copies."""

    device: torch.device
    _event: torch.cuda.Event | None

    def _upload(self, host: Tensor, dev: Tensor) -> None:
        if host is not dev:
            dev.copy_(host, non_blocking=True)

    def _wait_for_copies(self) -> None:
        """Before the simulator reads or rewrites the host buffers: wait for the copies queued on the stream."""
        if self._event is not None:
            self._event.record(torch.cuda.current_stream(self.device))
            self._event.synchronize()
