"""Device selection and the process-wide determinism setting."""

from __future__ import annotations

import os

import torch

from syncfree.errors import UserError


def resolve_device(name: str, local_rank: int | None = None) -> torch.device:
    """The device to train on: `auto` is CUDA when available; with several processes (`local_rank` given) `cuda`
    means `cuda:LOCAL_RANK`."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device={name!r}: CUDA is not available on this machine (use device=cpu)")
    if local_rank is None or device.type != "cuda":
        return device
    if device.index is not None and device.index != local_rank:
        raise UserError(f"device={name!r}: with several processes each rank trains on cuda:LOCAL_RANK "
                        f"(here cuda:{local_rank}); use device=cuda")
    return torch.device("cuda", local_rank)


def set_deterministic(on: bool) -> None:
    """`torch.use_deterministic_algorithms(on)` with what CUDA needs for it (a process-wide setting)."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
