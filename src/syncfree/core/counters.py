"""Deterministic counters of host syncs and dispatched ops (eager code only: dynamo does not compile under a mode)."""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

HOST_READ_METHODS = frozenset({"item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__"})
"""Tensor methods that read device memory on the host (seen by a TorchFunctionMode)."""

SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero"})
"""Aten ops that make the host wait for the device. `_is_all_true` (argument checks in C++) only reduces on the
device: the wait comes with the `_local_scalar_dense` that follows it, and is counted there, once."""

COPY_OPS = frozenset({"aten::_to_copy", "aten::copy_"})
"""A sync when they copy from an accelerator to the host (never on a CPU-only run)."""

INDEX_OPS = frozenset({"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"})
"""Tagged data-dependent, but a sync only with boolean-mask indices."""


def _name(func: object) -> str:
    return getattr(func, "__name__", str(func))


def _is_sync_op(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    name = op._schema.name
    if name in SYNC_OPS:
        return True
    if name in COPY_OPS:
        return _is_device_to_host(name, args, kwargs)
    if name in INDEX_OPS:
        indices = args[1] if len(args) > 1 else ()
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices)
    tags = getattr(op, "tags", ())
    return torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags


@dataclass
class Counts:
    host_reads: Counter = field(default_factory=Counter)
    """Python-visible reads (`item`, `tolist`, `bool(t)`, ...)."""
    sync_ops: Counter = field(default_factory=Counter)
    """Dispatched ops that wait for the device (`_local_scalar_dense`, `nonzero`, data-dependent shapes),
    not counting those dispatched by a Python read already in `host_reads`."""
    ops: Counter = field(default_factory=Counter)
    """Every dispatched aten op (a proxy for kernel launches)."""
    allocations: int = 0
    """New tensor storages created by dispatched ops (views, in-place and `out=` writes create none)."""
    allocated_bytes: int = 0
    in_read: int = 0

    @property
    def syncs(self) -> int:
        """Host syncs: Python reads plus sync ops dispatched outside them (a read is one sync, not two)."""
        return sum(self.host_reads.values()) + sum(self.sync_ops.values())

    @property
    def num_ops(self) -> int:
        return sum(self.ops.values())


class _FunctionCounter(TorchFunctionMode):
    def __init__(self, counts: Counts) -> None:
        super().__init__()
        self.counts = counts
        self.host_copies: dict[int, weakref.ref] = {}
        """Results of `.cpu()`/`.numpy()`: reading them again (`.tolist()`) costs no further sync."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = _name(func)
        if name not in HOST_READ_METHODS:
            return func(*args, **(kwargs or {}))
        if args and self._is_host_copy(args[0]):
            return func(*args, **(kwargs or {}))
        self.counts.host_reads[name] += 1
        self.counts.in_read += 1
        try:
            result = func(*args, **(kwargs or {}))
        finally:
            self.counts.in_read -= 1
        if name == "cpu" and isinstance(result, torch.Tensor):
            self.host_copies[id(result)] = weakref.ref(result)
        return result

    def _is_host_copy(self, x: object) -> bool:
        ref = self.host_copies.get(id(x))
        return ref is not None and ref() is x


class _DispatchCounter(TorchDispatchMode):
    def __init__(self, counts: Counts) -> None:
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        kwargs = kwargs or {}
        self.counts.ops[name] += 1
        if not self.counts.in_read and _is_sync_op(func, args, kwargs):
            self.counts.sync_ops[name] += 1
        inputs = {_storage_ptr(t) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and _storage_ptr(t) not in inputs and t.untyped_storage().nbytes() > 0:
                inputs.add(_storage_ptr(t))
                self.counts.allocations += 1
                self.counts.allocated_bytes += t.untyped_storage().nbytes()
        return out


def _is_device_to_host(name: str, args: tuple, kwargs: dict) -> bool:
    if name == "aten::copy_":
        dst, src = args[0], args[1]
        return src.device.type != "cpu" and dst.device.type == "cpu"
    target = kwargs.get("device")
    return args[0].device.type != "cpu" and target is not None and torch.device(target).type == "cpu"


def _storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class count_syncs:
    """Context manager counting host reads, sync ops and dispatched ops of the code it wraps.

    >>> with count_syncs() as c:
    ...     step()
    >>> c.syncs, c.num_ops
    """

    def __init__(self) -> None:
        self.counts = Counts()
        self._modes = (_FunctionCounter(self.counts), _DispatchCounter(self.counts))

    def __enter__(self) -> Counts:
        for mode in self._modes:
            mode.__enter__()
        return self.counts

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


@contextlib.contextmanager
def cuda_sync_errors(device: torch.device):
    """On CUDA, make every synchronizing call raise (`torch.cuda.set_sync_debug_mode("error")`), which also
    covers compiled code the counters cannot see. A no-op on other devices, where that mode is unavailable."""
    if device.type != "cuda":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)
