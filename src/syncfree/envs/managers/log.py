"""Statistics an env gathers at resets, averaged over the reset steps of an iteration.

Values reach it either as host floats (conventional: read with `.item()` where they are produced) or as device
tensors with a validity flag (no host read; accumulated on the device). `pop` returns the means as device tensors,
which the trainer moves to the host with the rest of the iteration's statistics, in one transfer.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import torch
from torch import Tensor


class EnvLog:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._host_sum: dict[str, float] = defaultdict(float)
        self._host_steps: dict[str, int] = defaultdict(int)
        self._device: dict[tuple[str, ...], tuple[Tensor, Tensor]] = {}

    def add_host(self, values: dict[str, float]) -> None:
        for key, value in values.items():
            self._host_sum[key] += value
            self._host_steps[key] += 1

    def add_device(self, names: tuple[str, ...], values: Tensor, valid: Tensor | Literal[True] = True) -> None:
        """Accumulate one step's `values` ([len(names)]) if `valid` (a device bool, or True)."""
        if names not in self._device:
            self._device[names] = (torch.zeros(len(names), device=self.device),
                                   torch.zeros((), device=self.device))
        total, steps = self._device[names]
        if valid is True:
            total.add_(values)
            steps.add_(1.0)
        else:
            total.add_(torch.where(valid, values, torch.zeros((), device=self.device)))
            steps.add_(valid)

    def pop(self) -> dict[str, Tensor]:
        """Means since the last call, as 0-dim float64 device tensors (host and device values of a key pooled; NaN
        for a key with no sample): no host read here, the caller moves them with the iteration's transfer."""
        sums: dict[str, Tensor] = {}
        counts: dict[str, Tensor] = {}
        for names, (total, count) in self._device.items():
            for name, value in zip(names, total.double().unbind(), strict=True):
                sums[name] = sums[name] + value if name in sums else value
                counts[name] = counts[name] + count.double() if name in counts else count.double()
        for name, host_sum in self._host_sum.items():
            host = torch.tensor([host_sum, float(self._host_steps[name])], dtype=torch.float64, device=self.device)
            sums[name] = sums[name] + host[0] if name in sums else host[0]
            counts[name] = counts[name] + host[1] if name in counts else host[1]
        means = {name: sums[name] / counts[name] for name in sums}
        self._host_sum.clear()
        self._host_steps.clear()
        for total, count in self._device.values():
            total.zero_()
            count.zero_()
        return means
