"""Generalized advantage estimation over a stored rollout."""

from __future__ import annotations

import torch
from torch import Tensor


def compute_gae(rewards: Tensor, values: Tensor, dones: Tensor, last_values: Tensor, gamma: float, lam: float,
                advantages_out: Tensor, returns_out: Tensor) -> None:
    """Write GAE(gamma, lambda) advantages and value targets for [T, N] tensors; advantages are then normalized."""
    advantage = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(rewards.shape[0])):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + not_done * gamma * next_values - values[t]
        advantage = delta + not_done * (gamma * lam) * advantage
        advantages_out[t].copy_(advantage)
        next_values = values[t]
    torch.add(advantages_out, values, out=returns_out)
    std, mean = torch.std_mean(advantages_out)
    advantages_out.sub_(mean).div_(std + 1e-8)
