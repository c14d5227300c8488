"""Generalized advantage estimation over a stored rollout."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from syncfree.algo.optim import Collective


def compute_gae(rewards: Tensor, values: Tensor, dones: Tensor, last_values: Tensor, gamma: float, lam: float,
                advantages_out: Tensor, returns_out: Tensor,
                mean_std: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None) -> None:
    """Write GAE(gamma, lambda) advantages and value targets for [T, N] tensors; advantages are then normalized
    by their mean and std, or by those `mean_std(advantages)` returns (with several processes: over all ranks)."""
    advantage = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(rewards.shape[0])):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + not_done * gamma * next_values - values[t]
        advantage = delta + not_done * (gamma * lam) * advantage
        advantages_out[t].copy_(advantage)
        next_values = values[t]
    torch.add(advantages_out, values, out=returns_out)
    if mean_std is None:
        std, mean = torch.std_mean(advantages_out)
    else:
        mean, std = mean_std(advantages_out)
    advantages_out.sub_(mean).div_(std + 1e-8)


def global_mean_std(x: Tensor, ctx: Collective) -> tuple[Tensor, Tensor]:
    """Mean and (Bessel-corrected) std of `x` over all ranks: one `all_reduce` of (sum, sum of squares, count),
    accumulated in float64 from each rank's own mean and variance."""
    var, mean = torch.var_mean(x, correction=0)
    m = mean.double()
    n = torch.full_like(m, float(x.numel()))
    moments = ctx.all_reduce(torch.stack((m * n, (var.double() + m * m) * n, n)), "advantage statistics")
    total = moments[2]
    global_mean = moments[0] / total
    population_var = (moments[1] / total - global_mean * global_mean).clamp(min=0.0)
    std = torch.sqrt(population_var * total / (total - 1.0).clamp(min=1.0))
    return global_mean.to(x.dtype), std.to(x.dtype)
