"""Statistics an env gathers at resets, averaged over the reset steps of an iteration.

Values reach it either as host floats (conventional: read with `.item()` where they are produced) or as device
tensors with a validity flag (no host read; accumulated on the device and read in one transfer by `pop`).
"""

from __future__ import annotations

from collections import defaultdict

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

    def add_device(self, names: tuple[str, ...], values: Tensor, valid: Tensor | bool = True) -> None:
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

    def pop(self) -> dict[str, float]:
        """Means since the last call (host and device values of a key pooled): one host transfer in all."""
        sums, steps = dict(self._host_sum), {k: float(n) for k, n in self._host_steps.items()}
        if self._device:
            groups = list(self._device.items())
            packed = torch.cat([torch.cat((total, count.view(1))) for _, (total, count) in groups]).cpu().tolist()
            offset = 0
            for names, _ in groups:
                count = packed[offset + len(names)]
                for i, name in enumerate(names):
                    sums[name] = sums.get(name, 0.0) + packed[offset + i]
                    steps[name] = steps.get(name, 0.0) + count
                offset += len(names) + 1
        self._host_sum.clear()
        self._host_steps.clear()
        for total, count in self._device.values():
            total.zero_()
            count.zero_()
        return {name: sums[name] / steps[name] for name in sums if steps[name] > 0}
