"""Action distributions. Pure tensor functions on the hot path; `torch.distributions` when validation is asked for.

Both paths use the same formulas and the same random stream, so their outputs are bitwise equal.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.distributions import Categorical, Normal

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


SCALAR_STD_RANGE = (1e-6, 1e6)
"""Clamp of a standard deviation learned as itself (`std_type="scalar"`): rsl_rl's `GaussianDistribution` range."""


class GaussianHead(nn.Module):
    """Diagonal Gaussian with a state-independent learned standard deviation: its log (`std_type="log"`, parameter
    `log_std`), or the standard deviation itself clamped to `SCALAR_STD_RANGE` (`"scalar"`, parameter `std_param`,
    rsl_rl's default).

    Distribution parameters are stored as `cat(mean, std)`.
    """

    def __init__(self, size: int, init_std: float, validate: bool = False, std_type: str = "log") -> None:
        super().__init__()
        self.size = size
        self.validate = validate
        self.std_type = std_type
        if std_type == "log":
            self.log_std = nn.Parameter(torch.full((size,), math.log(init_std)))
        elif std_type == "scalar":
            self.std_param = nn.Parameter(torch.full((size,), float(init_std)))
        else:
            raise ValueError(f"std_type must be log or scalar, got {std_type!r}")

    @property
    def num_params(self) -> int:
        return 2 * self.size

    def std(self) -> Tensor:
        if self.std_type == "scalar":
            return self.std_param.clamp(*SCALAR_STD_RANGE)
        return self.log_std.exp()

    def params(self, out: Tensor) -> Tensor:
        return torch.cat((out, self.std().expand_as(out)), dim=-1)

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        mean, std = params.split(self.size, dim=-1)
        if self.validate:
            dist = Normal(finite_rows(mean), std, validate_args=True)
            actions = dist.sample()
            return actions, dist.log_prob(actions).sum(-1)
        actions = mean + std * torch.randn_like(mean)
        return actions, normal_log_prob(mean, std, actions)

    def log_prob_entropy(self, params: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        mean, std = params.split(self.size, dim=-1)
        if self.validate:
            dist = Normal(finite_rows(mean), std, validate_args=True)
            return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)
        return normal_log_prob(mean, std, actions), normal_entropy(std)

    def deterministic(self, params: Tensor) -> Tensor:
        return params[..., : self.size]

    def kl(self, old: Tensor, new: Tensor) -> Tensor:
        """KL(old || new) per sample."""
        mu0, s0 = old.split(self.size, dim=-1)
        mu1, s1 = new.split(self.size, dim=-1)
        return torch.sum(torch.log(s1 / s0 + 1e-5) + (s0.square() + (mu0 - mu1).square()) / (2.0 * s1.square()) - 0.5, -1)


class CategoricalHead(nn.Module):
    """Categorical over `size` choices; parameters are the logits."""

    def __init__(self, size: int, validate: bool = False) -> None:
        super().__init__()
        self.size = size
        self.validate = validate

    @property
    def num_params(self) -> int:
        return self.size

    def params(self, out: Tensor) -> Tensor:
        return out

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        if self.validate:
            dist = Categorical(logits=finite_rows(params), validate_args=True)
            actions = dist.sample()
            return actions, dist.log_prob(actions)
        log_pmf = normalize_logits(params)
        # a row made non-finite by the env's output samples uniformly (`multinomial` would raise on it); the runner's
        # non-finite monitor stops the run at the iteration's end, naming the envs
        probs = torch.softmax(log_pmf, -1).nan_to_num_(nan=1.0)
        actions = torch.multinomial(probs, 1, True).squeeze(-1)
        return actions, log_pmf.gather(-1, actions.unsqueeze(-1)).squeeze(-1)

    def log_prob_entropy(self, params: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        if self.validate:
            dist = Categorical(logits=finite_rows(params), validate_args=True)
            return dist.log_prob(actions), dist.entropy()
        log_pmf = normalize_logits(params)
        log_prob = log_pmf.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return log_prob, categorical_entropy(log_pmf)

    def deterministic(self, params: Tensor) -> Tensor:
        return params.argmax(-1)

    def kl(self, old: Tensor, new: Tensor) -> Tensor:
        old_log, new_log = normalize_logits(old), normalize_logits(new)
        return torch.sum(old_log.exp() * (old_log - new_log), -1)


def finite_rows(params: Tensor) -> Tensor:
    """`params` with every row that holds a NaN or an infinity set to 0, for `torch.distributions`' argument checks
    (which would raise on it): a non-finite env output then reaches the runner's non-finite monitor, which stops
    the run at the iteration's end naming the envs, rather than a raw error from the sampler."""
    return torch.where(torch.isfinite(params).all(-1, keepdim=True), params, 0.0)


def normal_log_prob(mean: Tensor, std: Tensor, value: Tensor) -> Tensor:
    """Summed log-density of a diagonal Gaussian (torch.distributions.Normal's formula)."""
    return (-((value - mean) ** 2) / (2 * std**2) - std.log() - _LOG_SQRT_2PI).sum(-1)


def normal_entropy(std: Tensor) -> Tensor:
    return (0.5 + 0.5 * math.log(2 * math.pi) + torch.log(std)).sum(-1)


def normalize_logits(logits: Tensor) -> Tensor:
    return logits - logits.logsumexp(dim=-1, keepdim=True)


def categorical_entropy(log_pmf: Tensor) -> Tensor:
    clamped = log_pmf.clamp(min=torch.finfo(log_pmf.dtype).min)
    return -(clamped * torch.softmax(log_pmf, -1)).sum(-1)
