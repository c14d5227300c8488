"""Named phases of the hot loop, with optional recorders: timers (CUDA events or perf_counter) and counters.

With no recorder attached a phase is a shared `nullcontext`: no op is dispatched and nothing is allocated.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Protocol, cast

import torch

from syncfree.core.counters import Counts, OnOp, Site, count_syncs

ROLLOUT_PHASES = ("act", "store", "env", "normalizer", "stats")
"""Once per rollout step."""
UPDATE_PHASES = ("update.forward", "update.backward", "update.optimizer", "update.step")
"""Once per minibatch; `update.step` is the whole minibatch in one function (`perf.compile=step`) and replaces
the other three."""
ITERATION_PHASES = ("advantages", "logging")
"""Once per iteration."""
ALL_PHASES = ROLLOUT_PHASES + ITERATION_PHASES[:1] + UPDATE_PHASES + ITERATION_PHASES[1:]

_NULL = contextlib.nullcontext()


class Recorder(Protocol):
    def phase(self, name: str) -> contextlib.AbstractContextManager[None]: ...


class Phases:
    """Callable that returns the context manager of a phase; free unless a recorder is attached."""

    __slots__ = ("recorder",)

    def __init__(self) -> None:
        self.recorder: Recorder | None = None

    def __call__(self, name: str) -> contextlib.AbstractContextManager[None]:
        return _NULL if self.recorder is None else self.recorder.phase(name)

    @contextlib.contextmanager
    def attached(self, recorder: Recorder) -> Iterator[Recorder]:
        previous, self.recorder = self.recorder, recorder
        try:
            yield recorder
        finally:
            self.recorder = previous


UNTIMED = Phases()
"""Phases no recorder is ever attached to: a hot function compiled as one graph takes them (its phases are the
shared `nullcontext`, which the graph traces as nothing), where the same function run eagerly takes the
algorithm's own."""


class PhaseTimer:
    """Wall time per phase: CUDA events on a GPU (read once, in `seconds()`), perf_counter on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._cpu: dict[str, float] = defaultdict(float)
        self._events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = defaultdict(list)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.cuda:
            event = cast("Callable[..., torch.cuda.Event]", torch.cuda.Event)  # torch: `__new__` is unannotated
            start, end = event(enable_timing=True), event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._events[name].append((start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._cpu[name] += time.perf_counter() - t0

    def seconds(self) -> dict[str, float]:
        if not self.cuda:
            return dict(self._cpu)
        torch.cuda.synchronize()
        return {name: sum(s.elapsed_time(e) for s, e in pairs) / 1000.0 for name, pairs in self._events.items()}


class PhaseCounter:
    """Host syncs, ops and allocations per phase (eager code only); with `sites`, per source line too (see
    `count_syncs`)."""

    def __init__(self, sites: bool = False, skip: tuple[str, ...] = ()) -> None:
        self.counts: dict[str, Counts] = {}
        self.sites, self.skip = sites, skip

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        counter = count_syncs(self.sites, (*self.skip, __file__), on_op=self.on_op(name))
        with counter:
            yield
        self.add(name, counter.counts)

    def on_op(self, name: str) -> OnOp | None:
        """What to call before each op of a run of phase `name` (see `count_syncs`); none here."""
        return None

    def add(self, name: str, counts: Counts) -> None:
        """Add one run's counts to phase `name`'s."""
        total = self.counts.setdefault(name, Counts(sites={} if self.sites else None))
        for key, site in (counts.sites or {}).items():  # only when attributing, and then `total.sites` is a dict
            cast("dict[str, Site]", total.sites).setdefault(key, Site()).add(site)
        total.host_reads.update(counts.host_reads)
        total.sync_ops.update(counts.sync_ops)
        total.ops.update(counts.ops)
        total.allocations += counts.allocations
        total.allocated_bytes += counts.allocated_bytes
