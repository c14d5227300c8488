"""Measurement: host-sync and op counters."""

from syncfree.perf.counters import Counts, count_syncs, cuda_sync_errors

__all__ = ["Counts", "count_syncs", "cuda_sync_errors"]
