"""Preallocated rollout storage: every step writes into it with `copy_`, nothing is allocated."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from syncfree.envs.api import ActionSpec
from syncfree.policy.actor_critic import Act


class Batch(NamedTuple):
    actor_obs: Tensor
    critic_obs: Tensor
    actions: Tensor
    old_log_prob: Tensor
    old_values: Tensor
    old_dist_params: Tensor
    advantages: Tensor
    returns: Tensor


class StepRow(NamedTuple):
    """Views of one rollout step in every buffer of the storage (made once: writing through them allocates nothing,
    and a compiled step function takes them as inputs instead of a step index it would specialize on)."""

    actor_obs: Tensor
    critic_obs: Tensor
    actions: Tensor
    log_probs: Tensor
    values: Tensor
    dist_params: Tensor
    rewards: Tensor
    dones: Tensor
    time_outs: Tensor


class RolloutStorage:
    def __init__(self, steps: int, num_envs: int, actor_obs_dim: int, critic_obs_dim: int,
                 action_spec: ActionSpec, num_dist_params: int, device: torch.device) -> None:
        self.steps, self.num_envs = steps, num_envs

        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros(steps, num_envs, *shape, dtype=dtype, device=device)

        self.actor_obs = zeros(actor_obs_dim)
        self.critic_obs = zeros(critic_obs_dim)
        if action_spec.kind == "continuous":
            self.actions = zeros(action_spec.size)
        else:
            self.actions = zeros(dtype=torch.int64)
        self.log_probs = zeros()
        self.values = zeros()
        self.dist_params = zeros(num_dist_params)
        self.rewards = zeros()
        self.dones = zeros()
        self.time_outs = zeros()
        self.advantages = zeros()
        self.returns = zeros()
        self.rows = [StepRow(*(buffer[t] for buffer in (self.actor_obs, self.critic_obs, self.actions, self.log_probs,
                                                         self.values, self.dist_params, self.rewards, self.dones,
                                                         self.time_outs)))
                     for t in range(steps)]
        """`rows[t]`: the views of step t."""

    def store_policy_step(self, t: int, actor_obs: Tensor, critic_obs: Tensor, act: Act) -> None:
        store_policy(self.rows[t], actor_obs, critic_obs, act)

    def store_env_step(self, t: int, reward: Tensor, done: Tensor, time_out: Tensor, gamma: float,
                       bootstrap_values: Tensor | None = None) -> None:
        store_env(self.rows[t], reward, done, time_out, gamma, bootstrap_values)

    def flat(self) -> Batch:
        """Views of the whole rollout with time and envs merged into one batch dimension."""
        b = self.steps * self.num_envs
        return Batch(self.actor_obs.view(b, -1), self.critic_obs.view(b, -1), self.actions.view(b, *self.actions.shape[2:]),
                     self.log_probs.view(b), self.values.view(b), self.dist_params.view(b, -1),
                     self.advantages.view(b), self.returns.view(b))

    def state_tensors(self) -> dict[str, Tensor]:
        return {k: v for k, v in vars(self).items() if isinstance(v, Tensor)}


def store_policy(row: StepRow, actor_obs: Tensor, critic_obs: Tensor, act: Act) -> None:
    row.actor_obs.copy_(actor_obs)
    row.critic_obs.copy_(critic_obs)
    row.actions.copy_(act.actions)
    row.log_probs.copy_(act.log_prob)
    row.values.copy_(act.value)
    row.dist_params.copy_(act.dist_params)


def store_env(row: StepRow, reward: Tensor, done: Tensor, time_out: Tensor, gamma: float,
              bootstrap_values: Tensor | None = None) -> None:
    """Rewards of time-outs are bootstrapped with the value estimate: of the episode's final observation when the
    env provides it (`bootstrap_values`), else of the step's observation, as rsl_rl does."""
    row.time_outs.copy_(time_out)
    values = row.values if bootstrap_values is None else bootstrap_values
    torch.addcmul(reward, values, row.time_outs, value=gamma, out=row.rewards)
    row.dones.copy_(done)
