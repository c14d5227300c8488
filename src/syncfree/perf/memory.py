"""Memory in use: the CUDA caching allocator on a GPU; tensor storages reachable from Python on a CPU."""

from __future__ import annotations

import gc
import resource

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor

_NO_DATA = (FakeTensor, FunctionalTensor)
"""Tensors compiled graphs keep for tracing: they have no data."""


def live_tensor_storages() -> tuple[int, int]:
    """(count, bytes) of distinct tensor storages reachable from Python objects (for CPU runs). The fake tensors
    that compiled graphs keep (no data) are skipped."""
    gc.collect()
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and not isinstance(obj, _NO_DATA) and obj.device.type != "meta":
            storage = obj.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return len(seen), sum(seen.values())


def live_bytes(device: torch.device) -> int:
    """Bytes held by live tensors on `device`."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.memory_allocated(device)
    return live_tensor_storages()[1]


def peak_resident_bytes() -> int:
    """Peak resident set of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
