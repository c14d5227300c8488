"""Memory in use: the CUDA caching allocator on a GPU; tensor storages reachable from Python on a CPU."""

from __future__ import annotations

import ctypes
import gc
import os
import platform
import resource

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor

_NO_DATA = (FakeTensor, FunctionalTensor)
"""Tensors compiled graphs keep for tracing: they have no data."""


def _has_own_storage(tensor: torch.Tensor) -> bool:
    """False for tracing tensors and for `torch.func`'s wrappers (their data is the wrapped tensor's)."""
    return (not isinstance(tensor, _NO_DATA) and tensor.device.type != "meta"
            and not torch._C._functorch.is_functorch_wrapped_tensor(tensor))


def live_tensor_storages() -> tuple[int, int]:
    """(count, bytes) of distinct tensor storages reachable from Python objects (for CPU runs). The fake tensors
    that compiled graphs keep (no data) and `torch.func`'s wrappers are skipped."""
    gc.collect()
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and _has_own_storage(obj):
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


RETAIN_BYTES = 1 << 30
"""`retain_freed_memory`: blocks up to this size come from (and go back to) the heap, and up to this much free
memory at the heap's top is kept."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_retaining = False


def retain_freed_memory() -> bool:
    """Keep freed host memory in this process instead of returning it to the operating system; returns whether it
    is in effect (glibc on Linux only).

    PyTorch's CPU tensors come from `malloc`. glibc serves blocks above its mmap threshold (at most 32 MiB by
    default) with a fresh `mmap` and unmaps them on free, so every minibatch's large activations and gradients
    cost page faults again (measured: 2.9 million minor faults and 4.6 s of system time in two g1-track iterations
    at 4096 envs). Raising the mmap and trim thresholds to `RETAIN_BYTES` keeps those blocks in the heap for reuse;
    the resident set then stays near its peak. Process-wide, and not undone."""
    global _retaining
    if _retaining:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL("libc.so.6")
    _retaining = bool(libc.mallopt(_M_MMAP_THRESHOLD, RETAIN_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, RETAIN_BYTES))
    return _retaining


def available_memory() -> int | None:
    """Bytes of physical memory a new allocation can have now without swapping: the kernel's `MemAvailable` (free
    memory and the cache it can drop), else the free pages; None where the system says neither."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
