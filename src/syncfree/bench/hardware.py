"""Efficiency against the hardware: the policy's FLOPs per env step over the device's matrix-product peak.

FLOPs come from the shapes of the matrix products the policy runs (`torch.utils.flop_counter`, which counts
`mm`, `addmm`, `bmm` and convolutions from their operands' shapes): one rollout forward of all envs, and one
minibatch's forward and backward, scaled to an iteration. The peak is the GFLOP/s of a large square matrix product
in the same dtype, measured on the same device in the same run. The fraction says how much of what the device can
multiply the training loop uses; the rest goes to the env, elementwise kernels, launches and the host.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from syncfree.algo.distillation import Distillation
from syncfree.algo.feedforward import FeedForwardPPO
from syncfree.algo.recurrent import RecurrentPPO, StepFn
from syncfree.algo.storage import Batch
from syncfree.bench.timing import sync
from syncfree.train.runner import Runner

if TYPE_CHECKING:
    from syncfree.policy.actor_critic import PolicyBase

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


def flops_per_env_step(runner: Runner) -> dict[str, float]:
    """Matrix-product FLOPs per env (or agent) step of `runner`'s iteration: `rollout` (the policy's forward of
    each step) and `update` (forward and backward of every minibatch of every epoch), counted eagerly on the data
    of its last iteration."""
    algorithm, cfg = runner.algorithm, runner.cfg.ppo
    rows = algorithm.num_envs
    if isinstance(algorithm, Distillation):
        return distillation_flops(algorithm, runner.obs)
    with FlopCounterMode(display=False) as rollout, torch.inference_mode():
        if isinstance(algorithm, RecurrentPPO):
            last = algorithm.buffer.previous_actions(slice(0, rows)) if "last_actions" in algorithm.buffer.data else None
            step: StepFn = algorithm.policy.step
            step(algorithm.policy.rollout_input(runner.obs), algorithm.state, algorithm.done, last)
        else:
            policy = cast("PolicyBase", runner.policy)  # the feed-forward algorithm's policy
            policy.act(policy.actor_input(runner.obs), runner.obs["critic"])
    minibatches = cfg.num_epochs * cfg.num_minibatches
    with FlopCounterMode(display=False) as update:
        if isinstance(algorithm, RecurrentPPO):
            loss = algorithm.minibatch_loss(algorithm.minibatch(0, algorithm.buffer.segments // cfg.num_minibatches,
                                                                1.0))[0]
        else:
            assert isinstance(algorithm, FeedForwardPPO)
            data = algorithm.storage.flat()
            size = data[0].shape[0] // cfg.num_minibatches
            loss = algorithm.minibatch_losses(Batch(*(x[:size] for x in data)))[0]
        loss.backward()
    for p in runner.policy.parameters():
        p.grad = None
    steps = rows * algorithm.steps_per_env
    return {"rollout": rollout.get_total_flops() / rows,
            "update": update.get_total_flops() * minibatches / steps}


def distillation_flops(algorithm: Distillation, obs: dict[str, torch.Tensor]) -> dict[str, float]:
    """`flops_per_env_step` of distillation: the student's and the teacher's forwards per step; the student's
    forward and backward over each optimizer step's chunk (the remainder's forward left out)."""
    rows = algorithm.num_envs
    with FlopCounterMode(display=False) as rollout, torch.inference_mode():
        algorithm.act_both(obs)
    first = algorithm.chunks[0]
    with FlopCounterMode(display=False) as update:
        algorithm.begin_replay()
        algorithm.chunk_loss(first).backward()
    for p in algorithm.policy.parameters():
        p.grad = None
    return {"rollout": rollout.get_total_flops() / rows,
            "update": update.get_total_flops() * len(algorithm.chunks) / (rows * algorithm.steps_per_env)}


def compute_dtype(runner: Runner) -> str:
    """The dtype of the policy's matrix products: `bfloat16` where autocast runs a module's hidden layers in it on
    the update's minibatches (most of an iteration's FLOPs; with `autocast=auto`, calls smaller than the module's
    `autocast_min_work` stay float32), else `float32`."""
    algorithm = runner.algorithm
    rows = algorithm.num_envs * algorithm.steps_per_env // runner.cfg.ppo.num_minibatches
    in_bf16 = (getattr(m, "autocast_dtype", None) is torch.bfloat16
               and rows * getattr(m, "width", 0) >= cast(int, m.autocast_min_work) for m in runner.policy.modules())
    return "bfloat16" if any(in_bf16) else "float32"


def hardware_fraction(steps_per_s: float, flops_per_step: float, peaks: dict[str, float], dtype: str
                      ) -> dict[str, Any]:
    """The fraction of the `dtype` matrix-product peak that `steps_per_s` x `flops_per_step` reaches."""
    return {"dtype": dtype, "fraction": steps_per_s * flops_per_step / (peaks[dtype] * 1e9)}


def measure_peaks(device: torch.device, seconds: float = 1.0) -> dict[str, Any]:
    """The matrix-product peak of the device in float32 and bfloat16 (GFLOP/s)."""
    return {"float32": matmul_peak(device, torch.float32, seconds),
            "bfloat16": matmul_peak(device, torch.bfloat16, seconds)}
