"""Measurement: host-sync and op counters."""

from syncfree.perf.counters import Counts, count_syncs

__all__ = ["Counts", "count_syncs"]
