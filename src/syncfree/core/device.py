"""Device selection, torch's intra-op threads and the process-wide determinism setting."""

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
    """`torch.use_deterministic_algorithms(on)` with what CUDA needs for it (a process-wide setting). Left alone
    where it already holds: torch's setter imports its compiler (1.5 s here), which an eager run never needs."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if torch.are_deterministic_algorithms_enabled() != on or torch.is_deterministic_algorithms_warn_only_enabled():
        torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on


SMALL_CPU_BATCH = 1024
"""Below this many envs on the CPU, one intra-op thread: tensors of a few hundred rows gain nothing from more, and
each extra thread waits for a core on a busy machine (`benchmarks/results/threads-under-load-cpu/`)."""

TORCH_DEFAULT_THREADS = torch.get_num_threads()
"""torch's intra-op threads when syncfree was imported (the core count unless `OMP_NUM_THREADS` says otherwise)."""

_chosen: list[int] = []
"""The count `apply_threads` set last: a later choice may change it, while a count the program set stays."""


FROM_ENVIRONMENT, FROM_PROGRAM = "OMP_NUM_THREADS", "set by the program"
"""`choose_threads`' reasons for a count that is not syncfree's own: `apply_threads` does not record it, so later
runs keep it too."""


def choose_threads(requested: int, device: torch.device, processes: int, host_threads: bool,
                   num_envs: int) -> tuple[int, str]:
    """torch intra-op threads for this process, and why (see `TrainConfig.threads`)."""
    current = torch.get_num_threads()
    if requested > 0:
        return requested, "threads"
    if os.environ.get("OMP_NUM_THREADS"):
        return current, FROM_ENVIRONMENT
    if current != TORCH_DEFAULT_THREADS and current not in _chosen[-1:]:
        return current, FROM_PROGRAM
    if processes > 1:
        return 1, f"{processes} processes share the cores"
    if host_threads:
        return 1, "the simulator steps on threads of its own"
    if device.type == "cpu" and num_envs < SMALL_CPU_BATCH:
        return 1, f"fewer than {SMALL_CPU_BATCH} envs on the CPU"
    return TORCH_DEFAULT_THREADS, "torch's default"


def apply_threads(threads: int, reason: str = "") -> None:
    """`torch.set_num_threads`, remembered as syncfree's own choice unless `reason` (`choose_threads`') says the
    count was the program's or `OMP_NUM_THREADS`'."""
    torch.set_num_threads(threads)
    if reason not in (FROM_ENVIRONMENT, FROM_PROGRAM):
        _chosen[:] = [threads]
