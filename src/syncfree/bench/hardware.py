"""Efficiency against the hardware: the policy's FLOPs per env step over the device's matrix-product peak.

FLOPs come from the shapes of the matrix products the policy runs (`Algorithm.flops_per_env_step`, through
`torch.utils.flop_counter`, which counts `mm`, `addmm`, `bmm` and convolutions from their operands' shapes): one
rollout forward of all envs, and one minibatch's forward and backward, scaled to an iteration. The peak is the GFLOP/s of a large square matrix product
in the same dtype, measured on the same device in the same process. The fraction says how much of what the device can
multiply the training loop uses; the rest goes to the env, elementwise kernels, launches and the host.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F

from syncfree.bench.timing import sync
from syncfree.train.runner import Runner

if TYPE_CHECKING:
    pass

PEAK_SIZE = 2048
"""Side of the square matrices of the peak measurement (large enough to reach the kernel's best rate)."""


def matmul_peak(device: torch.device, dtype: torch.dtype, seconds: float = 1.0, size: int = PEAK_SIZE) -> float:
    """GFLOP/s of `size` x `size` matrix products in `dtype` on `device`, through `F.linear` as the policy's layers
    run them (on CPUs without bfloat16 instructions `torch.mm` in bfloat16 takes a path 25x slower than the one
    `linear` takes): the best of 3 timed runs of at least `seconds` / 3 each, after a warm-up."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    F.linear(a, b)
    sync(device)
    best = 0.0
    for _ in range(3):
        count, start = 0, time.perf_counter()
        while True:
            F.linear(a, b)
            count += 1
            sync(device)
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / 3:
                break
        best = max(best, 2 * size**3 * count / elapsed / 1e9)
    return best


def compute_dtype(runner: Runner) -> str:
    """The dtype of the policy's matrix products: `bfloat16` where autocast runs a module's hidden layers in it on
    the update's minibatches (most of an iteration's FLOPs; with `autocast=auto`, calls smaller than the module's
    `autocast_min_work` stay float32), else `float32`."""
    rows = runner.algorithm.rows_per_minibatch()
    in_bf16 = (getattr(m, "autocast_dtype", None) is torch.bfloat16
               and rows * getattr(m, "width", 0) >= cast(int, m.autocast_min_work) for m in runner.policy.modules())
    return "bfloat16" if any(in_bf16) else "float32"


def hardware_fraction(steps_per_s: float, flops_per_step: float, peaks: dict[str, float], dtype: str
                      ) -> dict[str, Any]:
    """The fraction of the `dtype` matrix-product peak that `steps_per_s` x `flops_per_step` reaches."""
    return {"dtype": dtype, "fraction": steps_per_s * flops_per_step / (peaks[dtype] * 1e9)}


def measure_peaks(device: torch.device, seconds: float = 1.0) -> dict[str, Any]:
    """The matrix-product peak of the device in float32 and bfloat16 (GFLOP/s), measured once per process and
    device (a few seconds where bfloat16 has no matrix instructions): a second bench in one process reuses it."""
    return dict(_peaks(device, seconds))


@functools.cache
def _peaks(device: torch.device, seconds: float) -> dict[str, float]:
    return {"float32": matmul_peak(device, torch.float32, seconds),
            "bfloat16": matmul_peak(device, torch.bfloat16, seconds)}
