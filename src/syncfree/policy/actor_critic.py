"""MLP actor-critic with running observation normalization."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from syncfree.config import PolicyConfig
from syncfree.envs.api import ActionSpec
from syncfree.policy.heads import CategoricalHead, GaussianHead
from syncfree.policy.normalizer import RunningNorm

_ACTIVATIONS = {"elu": nn.ELU, "tanh": nn.Tanh, "relu": nn.ReLU}


class Act(NamedTuple):
    actions: Tensor
    log_prob: Tensor
    value: Tensor
    dist_params: Tensor


class Evaluation(NamedTuple):
    log_prob: Tensor
    entropy: Tensor
    value: Tensor
    dist_params: Tensor


def mlp(in_dim: int, hidden: list[int], out_dim: int, activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(in_dim, size), _ACTIVATIONS[activation]()]
        in_dim = size
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def chunked_value(critic: nn.Module, norm: nn.Module, critic_obs: Tensor, chunk_size: int) -> Tensor:
    """Critic values, evaluated `chunk_size` rows at a time when the batch is larger (0: all at once)."""
    if chunk_size <= 0 or critic_obs.shape[0] <= chunk_size:
        return critic(norm(critic_obs)).squeeze(-1)
    return torch.cat([critic(norm(part)).squeeze(-1) for part in critic_obs.split(chunk_size)])


class PolicyBase(nn.Module):
    """What PPO and the trainer use; subclasses provide `head`, `dist_params`, `value` and `actor_input`."""

    head: GaussianHead | CategoricalHead

    def act(self, actor_obs: Tensor, critic_obs: Tensor) -> Act:
        params = self.dist_params(actor_obs)
        actions, log_prob = self.head.sample(params)
        return Act(actions, log_prob, self.value(critic_obs), params)

    def evaluate(self, actor_obs: Tensor, critic_obs: Tensor, actions: Tensor) -> Evaluation:
        params = self.dist_params(actor_obs)
        log_prob, entropy = self.head.log_prob_entropy(params, actions)
        return Evaluation(log_prob, entropy, self.value(critic_obs), params)


class ActorCritic(PolicyBase):
    def __init__(self, actor_obs_dim: int, critic_obs_dim: int, action_spec: ActionSpec, cfg: PolicyConfig,
                 validate_distributions: bool = False, critic_chunk_size: int = 0) -> None:
        super().__init__()
        self.actor_obs_dim, self.critic_obs_dim = actor_obs_dim, critic_obs_dim
        self.critic_chunk_size = critic_chunk_size
        """Rows per critic forward (0: all at once); see `PerfConfig.critic_chunk_size`."""
        self.action_spec = action_spec
        if action_spec.kind == "continuous":
            self.head: GaussianHead | CategoricalHead = GaussianHead(action_spec.size, cfg.init_std,
                                                                     validate_distributions)
        else:
            self.head = CategoricalHead(action_spec.size, validate_distributions)
        self.actor = mlp(actor_obs_dim, cfg.actor_hidden, action_spec.size, cfg.activation)
        self.critic = mlp(critic_obs_dim, cfg.critic_hidden, 1, cfg.activation)
        norm = (lambda d: RunningNorm(d)) if cfg.normalize_obs else (lambda d: nn.Identity())
        self.actor_norm = norm(actor_obs_dim)
        self.critic_norm = norm(critic_obs_dim)
        self.normalize_obs = cfg.normalize_obs

    def dist_params(self, actor_obs: Tensor) -> Tensor:
        return self.head.params(self.actor(self.actor_norm(actor_obs)))

    def value(self, critic_obs: Tensor) -> Tensor:
        return chunked_value(self.critic, self.critic_norm, critic_obs, self.critic_chunk_size)

    def actor_input(self, obs: dict[str, Tensor], out: Tensor | None = None) -> Tensor:
        """The actor's observation from the env's groups (`out`: a buffer policies that assemble it may fill)."""
        return obs["policy"]

    def act_deterministic(self, actor_obs: Tensor) -> Tensor:
        return self.head.deterministic(self.dist_params(actor_obs))

    @torch.no_grad()
    def update_normalizers(self, actor_obs: Tensor, critic_obs: Tensor) -> None:
        if self.normalize_obs:
            self.actor_norm.update(actor_obs)
            self.critic_norm.update(critic_obs)
