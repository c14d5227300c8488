"""A per-step field of rollout storage: its shape and dtype (policies declare theirs; `syncfree.algo.segments`
allocates them)."""

from __future__ import annotations

from typing import NamedTuple

import torch


class Field(NamedTuple):
    shape: tuple[int, ...]
    """Per-step shape (after `[segments, bptt_horizon]`)."""
    dtype: torch.dtype
