"""The iteration's one host transfer: named device tensors packed into one buffer, copied once, read back by name.

Whatever the host needs from an iteration (the algorithm's statistics, the monitors' buffers, the env's log) is
registered here as a named source; `read()` asks every source for its tensors, packs them into one float64
buffer on the device, moves it to the host in a single copy and hands the values back by name. float64 holds
every float32 value and every integer below 2**53 exactly, so nothing read through it is rounded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import Tensor

Part = Mapping[str, Tensor] | Tensor | None
"""What a source gives: named tensors (read as `<source>/<name>`), one tensor (read as `<source>`), or nothing."""


class HostTransfer:
    def __init__(self) -> None:
        self._sources: dict[str, Callable[[], Part]] = {}
        self._buffer: Tensor | None = None
        """The packed parts, float64, on the device; reallocated only when their total size or device changes."""

    def register(self, name: str, source: Callable[[], Part]) -> None:
        """Read `source()` at every `read()`, under `name` (a second registration of a name replaces the first)."""
        if "/" in name:
            raise ValueError(f"host transfer: source name {name!r} must not contain '/'")
        self._sources[name] = source

    def read(self) -> dict[str, np.ndarray]:
        """Every registered source's tensors on the host, by name: one device-to-host copy in all."""
        names: list[str] = []
        parts: list[Tensor] = []
        for prefix, source in self._sources.items():
            value = source()
            items = value.items() if isinstance(value, Mapping) else [] if value is None else [("", value)]
            for key, tensor in items:
                names.append(f"{prefix}/{key}" if key else prefix)
                parts.append(tensor.detach())
        if not parts:
            return {}
        sizes = [part.numel() for part in parts]
        buffer = self._buffer
        if buffer is None or buffer.numel() != sum(sizes) or buffer.device != parts[0].device:
            buffer = self._buffer = torch.empty(sum(sizes), dtype=torch.float64, device=parts[0].device)
        # torch leaves `Tensor.split` unannotated
        for view, part in zip(buffer.split(sizes), parts, strict=True):  # type: ignore[no-untyped-call]
            view.view(part.shape).copy_(part)
        flat = buffer.cpu().numpy()
        if buffer.device.type == "cpu":
            flat = flat.copy()  # the buffer is overwritten at the next read; what is handed out stays
        out, offset = {}, 0
        for name, part, size in zip(names, parts, sizes, strict=True):
            out[name] = flat[offset : offset + size].reshape(part.shape)
            offset += size
        return out
