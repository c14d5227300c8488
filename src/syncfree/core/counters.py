"""Deterministic counters of host syncs and dispatched ops (eager code only: dynamo does not compile under a mode)."""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:
    from types import FrameType, TracebackType

HOST_READ_METHODS = frozenset({"item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__"})
"""Tensor methods that read device memory on the host (seen by a TorchFunctionMode)."""

SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero"})
"""Aten ops that make the host wait for the device. `_is_all_true` (argument checks in C++) only reduces on the
device: the wait comes with the `_local_scalar_dense` that follows it, and is counted there, once."""

COPY_OPS = frozenset({"aten::_to_copy", "aten::copy_"})
"""A sync when they copy from an accelerator to the host (never on a CPU-only run)."""

INDEX_OPS = frozenset({"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"})
"""Tagged data-dependent, but a sync only with boolean-mask indices."""

OnOp = Callable[[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any], list[torch.Tensor]], None]
"""`on_op(op, args, kwargs, tensors)`: called before each dispatched op (see `count_syncs`)."""


def _name(func: object) -> str:
    return getattr(func, "__name__", str(func))


_SYNC_KIND: dict[object, str] = {}
"""Op overload -> how it may sync (`always`, `copy`, `index`, `never`), worked out once per op."""


def _sync_kind(op: torch._ops.OpOverload) -> str:
    kind = _SYNC_KIND.get(op)
    if kind is None:
        name, tags = op._schema.name, getattr(op, "tags", ())
        if name in SYNC_OPS:
            kind = "always"
        elif name in COPY_OPS:
            kind = "copy"
        elif name in INDEX_OPS:
            kind = "index"
        elif torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags:
            kind = "always"
        else:
            kind = "never"
        _SYNC_KIND[op] = kind
    return kind


def _is_sync_op(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    kind = _sync_kind(op)
    if kind == "never":
        return False
    if kind == "copy":
        return _is_device_to_host(op._schema.name, args, kwargs)
    if kind == "index":
        indices = args[1] if len(args) > 1 else ()
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices)
    return True


@dataclass
class Site:
    """What one source line caused: host syncs by kind, dispatched ops, new storages."""

    syncs: Counter[str] = field(default_factory=Counter)
    """`item`, `__bool__`, `cpu`, ... and sync ops (`aten::nonzero`, boolean-mask indexing, ...)."""
    ops: Counter[str] = field(default_factory=Counter)
    allocations: int = 0
    allocated_bytes: int = 0

    def add(self, other: Site) -> None:
        self.syncs.update(other.syncs)
        self.ops.update(other.ops)
        self.allocations += other.allocations
        self.allocated_bytes += other.allocated_bytes


_SKIPPED_FILES = (os.path.dirname(torch.__file__) + os.sep, __file__, contextlib.__file__)
"""Frames that are not the code being examined: torch itself, these counters, context managers."""


def caller_site(skip: tuple[str, ...] = ()) -> str:
    """`file:line` of the innermost Python frame outside torch, this module and `skip` (path prefixes)."""
    frame: FrameType | None = sys._getframe(1)
    skipped = (*_SKIPPED_FILES, *skip)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(skipped):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


@dataclass
class Counts:
    host_reads: Counter[str] = field(default_factory=Counter)
    """Python-visible reads (`item`, `tolist`, `bool(t)`, ...)."""
    sync_ops: Counter[str] = field(default_factory=Counter)
    """Dispatched ops that wait for the device (`_local_scalar_dense`, `nonzero`, data-dependent shapes),
    not counting those dispatched by a Python read already in `host_reads`."""
    ops: Counter[str] = field(default_factory=Counter)
    """Every dispatched aten op (a proxy for kernel launches)."""
    allocations: int = 0
    """New tensor storages created by dispatched ops (views, in-place and `out=` writes create none)."""
    allocated_bytes: int = 0
    in_read: int = 0
    sites: dict[str, Site] | None = None
    """`file:line` -> what it caused, when the counter attributes events to source lines (`count_syncs(sites=...)`)."""
    skip: tuple[str, ...] = ()
    """Path prefixes of frames that are not attributed (the instrument's own code)."""

    def site(self) -> Site | None:
        """The `Site` of the calling source line, or None when not attributing."""
        if self.sites is None:
            return None
        key = caller_site(self.skip)
        found = self.sites.get(key)
        if found is None:
            found = self.sites[key] = Site()
        return found

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
        self.host_copies: dict[int, weakref.ref[torch.Tensor]] = {}
        """Results of `.cpu()`/`.numpy()`: reading them again (`.tolist()`) costs no further sync."""

    def __torch_function__(self, func: Callable[..., Any], types: Collection[type], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        name = _name(func)
        if name not in HOST_READ_METHODS:
            return func(*args, **(kwargs or {}))
        if args and self._is_host_copy(args[0]):
            return func(*args, **(kwargs or {}))
        self.counts.host_reads[name] += 1
        site = self.counts.site()
        if site is not None:
            site.syncs[name] += 1
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


# The ignores: torch leaves `TorchDispatchMode.__init_subclass__` and `__init__` unannotated.
class _DispatchCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, counts: Counts, on_op: OnOp | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counts = counts
        self.on_op = on_op

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: Collection[type], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        name = func._schema.name
        kwargs = kwargs or {}
        tensors = tensors_in((args, kwargs))
        if self.on_op is not None:
            self.on_op(func, args, kwargs, tensors)
        counts = self.counts
        site = counts.site()
        counts.ops[name] += 1
        if site is not None:
            site.ops[name] += 1
        if not counts.in_read and _is_sync_op(func, args, kwargs):
            counts.sync_ops[name] += 1
            if site is not None:
                site.syncs[name] += 1
        inputs = {_storage_ptr(t) for t in tensors}
        out = func(*args, **kwargs)
        for t in tensors_in(out):
            if _storage_ptr(t) not in inputs and t.untyped_storage().nbytes() > 0:
                inputs.add(_storage_ptr(t))
                nbytes = t.untyped_storage().nbytes()
                counts.allocations += 1
                counts.allocated_bytes += nbytes
                if site is not None:
                    site.allocations += 1
                    site.allocated_bytes += nbytes
        return out


def tensors_in(value: object) -> list[torch.Tensor]:
    """The tensors in an aten op's arguments or results: tensors, nested in tuples, lists and dicts (a plain walk,
    several times faster per op than a general pytree flatten)."""
    found: list[torch.Tensor] = []
    _collect(value, found)
    return found


def _collect(value: object, found: list[torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, (tuple, list)):
        for item in value:
            if isinstance(item, torch.Tensor):
                found.append(item)
            elif isinstance(item, (tuple, list, dict)):
                _collect(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, found)


def _is_device_to_host(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if name == "aten::copy_":
        dst: torch.Tensor = args[0]
        src: torch.Tensor = args[1]
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

    def __init__(self, sites: bool = False, skip: tuple[str, ...] = (),
                 on_op: OnOp | None = None) -> None:
        """`sites`: also attribute every event to the source line that caused it (`Counts.sites`), skipping
        frames under the path prefixes `skip`. `on_op(op, args, kwargs, tensors)`: called before each dispatched
        op runs, with the tensors among its arguments (another instrument in the same dispatch mode, e.g. the
        doctor's repeat finder)."""
        self.counts = Counts(sites={} if sites else None, skip=skip)
        self._modes: tuple[contextlib.AbstractContextManager[object], ...] = (
            _FunctionCounter(self.counts), _DispatchCounter(self.counts, on_op))

    def __enter__(self) -> Counts:
        for mode in self._modes:
            mode.__enter__()
        return self.counts

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(exc_type, exc, traceback)


@contextlib.contextmanager
def cuda_sync_errors(device: torch.device) -> Iterator[None]:
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
