"""Generalized advantage estimation over a stored rollout."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


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
