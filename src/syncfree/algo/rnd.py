"""Random network distillation (`rnd` settings) with rsl_rl 5.5's semantics (`rsl_rl.extensions.RandomNetworkDistillation`):

- a target network, random and fixed, and a predictor of the same input and output widths; both read one observation
  group (`rnd.state`), normalized by its running statistics when `rnd.state_normalization` is on;
- at each rollout step, the intrinsic reward is the distance between the two networks' embeddings of the step's next
  observation, divided by the running deviation of its discounted sum when `rnd.reward_normalization` is on, times
  the weight (`rnd.weight`, following `rnd.weight_schedule` over the env steps counted); it is added to the env's
  reward before anything else reads the reward to learn from;
- at each minibatch, the predictor takes one Adam step on the mean squared error to the target's embedding of the
  minibatch's observations (its own optimizer, no clipping);
- the input statistics are updated once per iteration, after the update, from the rollout's observations.

All of it is tensor work on the device: the weight is computed from a step counter kept in a device tensor (no host
read, and no recompile as it changes), the intrinsic reward inside the compiled record step, and the predictor's step
as one function (`syncfree.algo.minibatch_step`'s AdamW with no decay, which is Adam), compiled with the minibatch
update's other graphs when `perf.compile` is on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from syncfree.algo.configs import PPOTrainConfig
from syncfree.algo.minibatch_step import MinibatchStep, StepState
from syncfree.algo.optim import Collective, GradientAllReduce, load_moments
from syncfree.algo.settings import RNDConfig
from syncfree.core.compile import hot
from syncfree.core.switches import PerfConfig
from syncfree.envs.api import VecEnv
from syncfree.errors import RND_MEMORY, UserError, allocating
from syncfree.policy.actor_critic import mlp
from syncfree.policy.normalizer import RunningNorm

UNTIL = 10**8
"""Samples after which rsl_rl's RND normalizers stop learning (`until`)."""

STD_OFFSET = 0.01
"""rsl_rl's `EmpiricalNormalization`: `(x - mean) / (std + 0.01)`."""

REWARD_DISCOUNT = 0.99
"""The discount of the sum whose deviation scales the intrinsic reward (rsl_rl's default, not PPO's gamma)."""


class DiscountedDeviation(nn.Module):
    """Divides each step's rewards by the running standard deviation of their discounted sums per env (rsl_rl's
    `EmpiricalDiscountedVariationNormalization`): the sums run across episodes, as rsl_rl's do, and a deviation of 0
    leaves the rewards as they are."""

    discounted: Tensor

    def __init__(self, num_envs: int, gamma: float = REWARD_DISCOUNT) -> None:
        super().__init__()
        self.gamma = gamma
        self.stats = RunningNorm(1, until=UNTIL)  # its variance only: the sums are not normalized themselves
        self.register_buffer("discounted", torch.zeros(num_envs))

    def forward(self, reward: Tensor) -> Tensor:
        self.discounted.mul_(self.gamma).add_(reward)
        self.stats.update(self.discounted.unsqueeze(1))
        std = self.stats.var.sqrt()
        return torch.where(std > 0, reward / std, reward)


class RandomNetworkDistillation(nn.Module):
    """The target and predictor networks, their input normalizer, the reward's normalizer and the env-step counter
    of the weight schedule (all saved with the algorithm's state)."""

    env_steps: Tensor
    reward_sum: Tensor

    def __init__(self, cfg: RNDConfig, state_dim: int, num_envs: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.group = cfg.state

        def widths(sizes: list[int]) -> list[int]:
            return [state_dim if size == -1 else size for size in sizes]

        self.predictor = mlp(state_dim, widths(cfg.predictor_hidden), cfg.num_outputs, cfg.activation)
        self.target = mlp(state_dim, widths(cfg.target_hidden), cfg.num_outputs, cfg.activation).requires_grad_(False)
        self.state_norm: nn.Module = RunningNorm(state_dim, std_offset=STD_OFFSET, until=UNTIL) \
            if cfg.state_normalization else nn.Identity()
        self.reward_norm = DiscountedDeviation(num_envs) if cfg.reward_normalization else None
        self.register_buffer("env_steps", torch.zeros((), dtype=torch.int64))
        """Steps of the vectorized env taken (rsl_rl's `update_counter`), which the weight schedule reads."""
        self.register_buffer("reward_sum", torch.zeros(()), persistent=False)
        """The weighted intrinsic rewards of the rollout so far, summed (for the iteration's record)."""

    def weight(self) -> Tensor | float:
        """The intrinsic reward's weight at the current env step (`rnd.weight_schedule`), as rsl_rl computes it in
        float64, here from the device counter."""
        cfg = self.cfg
        if cfg.weight_schedule == "constant":
            return cfg.weight
        step = self.env_steps.double()
        if cfg.weight_schedule == "step":
            weight = torch.where(step < cfg.final_step, cfg.weight, cfg.final_value)
        else:
            ramp = cfg.weight + (cfg.final_value - cfg.weight) * (step - cfg.initial_step) / (
                cfg.final_step - cfg.initial_step)
            weight = torch.where(step < cfg.initial_step, cfg.weight,
                                 torch.where(step > cfg.final_step, cfg.final_value, ramp))
        return weight.float()

    @torch.no_grad()
    def intrinsic_reward(self, next_obs: Tensor) -> Tensor:
        """The weighted intrinsic reward of one step ([envs]) from the step's next observation of the group; counts
        the step and adds the rewards to `reward_sum`."""
        self.env_steps.add_(1)
        state = self.state_norm(next_obs)
        error = torch.linalg.vector_norm(self.target(state) - self.predictor(state), dim=1)
        if self.reward_norm is not None:
            error = self.reward_norm(error)
        reward: Tensor = error * self.weight()
        self.reward_sum.add_(reward.sum())
        return reward

    def loss(self, obs: Tensor) -> Tensor:
        """The predictor's loss on a minibatch of the group's observations (the normalizer is not updated)."""
        with torch.no_grad():
            state = self.state_norm(obs)
            target = self.target(state)
        loss: Tensor = nn.functional.mse_loss(self.predictor(state), target)
        return loss

    @torch.no_grad()
    def update_normalizer(self, obs: Tensor) -> None:
        """After an update: the input statistics learn the rollout's observations ([rows, width])."""
        if isinstance(self.state_norm, RunningNorm):
            self.state_norm.update(obs)


class RND:
    """The RND of a run: the module, the predictor's optimizer and its compiled minibatch step, and the statistics
    the iteration's record gets (`rnd_loss`: the predictor's mean loss over the update's minibatches; `rnd_reward`:
    the mean weighted intrinsic reward per env step of the rollout)."""

    def __init__(self, cfg: RNDConfig, state_dim: int, num_envs: int, perf: PerfConfig,
                 device: torch.device, dist: Collective | None = None) -> None:
        self.module = RandomNetworkDistillation(cfg, state_dim, num_envs).to(device)
        self.group = cfg.state
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.learning_rate, weight_decay=0.0,
                                           fused=(perf.fused_adamw and dist is not None) or None)
        """Adam (AdamW without decay takes the same steps); stepped by `step`, holding its moments for checkpoints.
        With several processes it steps itself, fused (`perf.fused_adamw`: no host read of its step counts)."""
        self.step = MinibatchStep(self.module, self._losses, self.optimizer, max_grad_norm=float("inf"), adapt=None,
                                  skip_nonfinite=False)
        perf = dataclasses.replace(perf, cuda_graphs="off")  # graphs of their own, not replayed as CUDA graphs
        self.grad_all_reduce = GradientAllReduce(self.params, dist) if dist is not None else None
        """With several processes: the predictor's gradients (and its loss) averaged over ranks between the
        backward and Adam's step, as rsl_rl reduces them; the step then runs eagerly, as the policy's does."""
        self._update = hot(self.update_rows, perf, device) if dist is None else self.update_rows
        self._train = hot(self.step.update, perf, device) if dist is None else self.averaged_step
        self.lr = torch.tensor(cfg.learning_rate, dtype=torch.float64, device=device)
        self.stats = torch.zeros(2, device=device)
        """(the predictor's loss, its gradient norm), summed over the update's minibatches."""
        self._skipped = torch.zeros((), dtype=torch.int64, device=device)
        self.state: StepState | None = None

    def _losses(self, obs: Tensor) -> tuple[Tensor, tuple[Tensor, ...], Tensor]:
        loss = self.module.loss(obs)
        return loss, (loss.detach(),), loss.detach()

    def begin_rollout(self) -> None:
        self.module.reward_sum.zero_()

    def begin_update(self) -> None:
        self.stats.zero_()
        self.state = self.step.state(self.lr, self.stats, self._skipped)

    def update_rows(self, rollout_obs: Tensor, idx: Tensor, state: StepState) -> None:
        """One Adam step of the predictor on the rows `idx` of the rollout's observations of the group."""
        if self.grad_all_reduce is not None:
            self.averaged_step(rollout_obs[idx], state)
        else:
            self.step.update(rollout_obs[idx], state)

    def averaged_step(self, obs: Tensor, state: StepState) -> None:
        """One Adam step of the predictor with its gradients averaged over ranks (several processes): backward,
        one all-reduce of the gradients and the loss, `torch.optim.AdamW`'s step; (the rank-mean loss, the
        gradient norm) added to the statistics."""
        assert self.grad_all_reduce is not None  # with several processes only
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.module.loss(obs)
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        mean_loss = self.grad_all_reduce(loss.detach())
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        self.optimizer.step()
        state.stats.add_(torch.stack((mean_loss.reshape(()), norm)))

    def update(self, rollout_obs: Tensor, idx: Tensor) -> None:
        """One step on the rows `idx` of the rollout's observations (gathered inside the compiled step)."""
        assert self.state is not None, "begin_update() first"
        self._update(rollout_obs, idx, self.state)

    def train(self, obs: Tensor) -> None:
        """One step on a minibatch of observations already gathered ([rows, width])."""
        assert self.state is not None, "begin_update() first"
        self._train(obs, self.state)

    def statistics(self, minibatches: int, env_steps: int) -> dict[str, Tensor]:
        return {"rnd_loss": self.stats[0] / minibatches, "rnd_reward": self.module.reward_sum / env_steps}

    def state_dict(self) -> dict[str, Any]:
        return {"module": self.module.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The networks, statistics and the predictor's moments; the optimizer's options (learning rate, betas) stay
        this run's, as the policy's do: a checkpoint's are data that nothing checks."""
        self.module.load_state_dict(state["module"])
        load_moments(self.optimizer, state["optimizer"])


def build_rnd(cfg: PPOTrainConfig, env: VecEnv, device: torch.device, dist: Collective | None) -> RND | None:
    """The run's `RND`, or None with `rnd.enabled` off; one line naming what stands in the way when it cannot apply."""
    rnd = cfg.rnd
    if not rnd.enabled:
        return None
    if cfg.policy.kind not in ("mlp", "recurrent"):
        raise UserError(f"rnd: policy.kind={cfg.policy.kind} is not covered (MLP policies, feed-forward or recurrent)")
    shape = env.obs_shapes[rnd.state]
    if len(shape) != 1:
        raise UserError(f"rnd.state={rnd.state}: the networks read flat observations; {cfg.task}'s {rnd.state} group "
                        f"has shape {tuple(shape)}")
    with allocating(RND_MEMORY):
        return RND(rnd, shape[0], env.num_envs, cfg.perf, device, dist)
