"""Running normalization of observations and of rewards, updated on the device without host reads."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RunningNorm(nn.Module):
    """Normalizes by the running mean and variance of every sample seen so far (parallel Welford merge):
    `(x - mean) / sqrt(var + eps)`, or with `std_offset` > 0 `(x - mean) / (sqrt(var) + std_offset)` (rsl_rl's
    `EmpiricalNormalization`, whose offset is 0.01). With `until` > 0 the statistics stop changing once `until`
    samples were counted (rsl_rl's `until`; decided on the device, with no host read)."""

    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(self, dim: int, eps: float = 1e-8, std_offset: float = 0.0, until: int = 0) -> None:
        super().__init__()
        self.eps, self.std_offset, self.until = eps, std_offset, until
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x: Tensor) -> Tensor:
        if self.std_offset:
            return (x - self.mean) / (torch.sqrt(self.var) + self.std_offset)
        return (x - self.mean) / torch.sqrt(self.var + self.eps)

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        n: int | Tensor = x.shape[0]
        batch_var, batch_mean = torch.var_mean(x, dim=0, correction=0)
        if self.until:  # a batch that arrives once `until` were counted changes nothing (rate 0)
            n = torch.where(self.count < self.until, n, 0)
        self.count.add_(n)
        rate = n / self.count
        delta = batch_mean - self.mean
        self.mean.add_(rate * delta)
        self.var.add_(rate * (batch_var - self.var + delta * (batch_mean - self.mean)))


class RewardScale(nn.Module):
    """Divides rewards by the running standard deviation of each env's discounted return, then clips them to
    ±`clip` (Gym's `NormalizeReward` and `TransformReward` clip as CleanRL's MuJoCo PPO wraps its envs).

    Per step: `returns = returns * gamma + reward`; the running variance of `returns` over every env and step so
    far is updated; the reward is divided by its square root; `returns` restarts at 0 where the episode ended
    (terminated or truncated). The mean is not subtracted: the reward's sign is kept."""

    returns: Tensor

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.stats = RunningNorm(1, eps)
        self.register_buffer("returns", torch.zeros(num_envs, 1))

    def forward(self, reward: Tensor, done: Tensor) -> Tensor:
        """The scaled rewards of one step (`reward`, `done`: `[num_envs]`); updates the statistics."""
        returns = self.returns
        returns.mul_(self.gamma).add_(reward.unsqueeze(1))
        self.stats.update(returns)
        scaled = (reward / torch.sqrt(self.stats.var + self.eps)).clamp(-self.clip, self.clip)
        returns.masked_fill_(done.unsqueeze(1), 0.0)
        return scaled


def running_norms(module: nn.Module) -> list[RunningNorm]:
    """The running normalizers inside `module` (with several processes, each is merged over the ranks)."""
    return [m for m in module.modules() if isinstance(m, RunningNorm)]
