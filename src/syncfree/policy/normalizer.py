"""Running observation normalization, updated on the device without host reads."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RunningNorm(nn.Module):
    """Normalizes by the running mean and variance of every sample seen so far (parallel Welford merge)."""

    def __init__(self, dim: int, eps: float = 1e-8) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.mean) / torch.sqrt(self.var + self.eps)

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        n = x.shape[0]
        batch_var, batch_mean = torch.var_mean(x, dim=0, correction=0)
        self.count.add_(n)
        rate = n / self.count
        delta = batch_mean - self.mean
        self.mean.add_(rate * delta)
        self.var.add_(rate * (batch_var - self.var + delta * (batch_mean - self.mean)))
