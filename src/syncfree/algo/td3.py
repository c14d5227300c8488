"""TD3 (`--algorithm td3`, Fujimoto et al. 2018): twin critics, a deterministic actor, target policy smoothing and
delayed actor updates, from a replay buffer on the device.

Each gradient step: the twin critics regress onto `R + discount min Q_target(s', a')`, where `a'` is the target
actor's action plus Gaussian noise (`policy_noise`, clipped to `noise_clip`), kept in [-1, 1]; every
`policy_delay`-th step the actor maximizes `Q1(s, actor(s))` and the targets (critics and actor) follow by `tau`. The
rollout explores with Gaussian noise on the actor's action: of `exploration_noise` in every env, or FastTD3's mixed
noise (`exploration_noise_max`), each env's own standard deviation, drawn again when its episode ends. The rollout,
the buffer and the checkpoints are the off-policy learners' (`syncfree.algo.offpolicy`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from syncfree.algo.base import first_episode_returns
from syncfree.algo.offpolicy import OffPolicy, OffPolicyConfig, OffPolicyTrainConfig
from syncfree.algo.offpolicy_step import PolicyCall, Trained, gradients, step
from syncfree.algo.optim import Collective
from syncfree.algo.replay import Batch
from syncfree.envs.api import StepResult, VecEnv
from syncfree.errors import check
from syncfree.policy.build import EnvShape
from syncfree.policy.sac import DeterministicActorCritic

log = logging.getLogger("syncfree")

TD3_STATS = ("critic_loss", "actor_loss", "q_mean")
"""Means over the iteration's gradient steps (0 while none was taken, `gradient_steps`): the twin critics' mean
squared error, the actor's loss (summed over the steps that update it, averaged over all), the critics' mean Q."""


@dataclass
class TD3Config(OffPolicyConfig):
    """TD3's settings: the off-policy learners', the exploration and smoothing noise, the actor's delay."""

    n_step: int = 3
    """Steps summed into each sampled transition's return before it bootstraps (FastTD3's 3: on pendulum's preset, 150
    iterations reached -251 against -1,069 with 1, seed 0)."""
    exploration_noise: float = 0.1
    """Standard deviation of the Gaussian noise added to the actor's action in the rollout (actions in [-1, 1]); with
    `exploration_noise_max`, the lowest an env's may be."""
    exploration_noise_max: float = 0.0
    """0: every env explores with `exploration_noise` (CleanRL's). Above it: FastTD3's mixed noise, each env's
    standard deviation drawn uniformly from [exploration_noise, exploration_noise_max] at the start and again when
    its episode ends (FastTD3's humanoids: 0.001 to 0.4), so that some envs stay near the actor's action while others
    explore widely."""
    policy_noise: float = 0.2
    """Standard deviation of the target policy smoothing noise."""
    noise_clip: float = 0.5
    """The smoothing noise is clipped to [-noise_clip, noise_clip]."""
    policy_delay: int = 2
    """The actor and the targets step once every this many gradient steps of the critics."""

    def validate(self, section: str = "td3") -> None:
        super().validate(section)
        for key in ("exploration_noise", "policy_noise", "noise_clip"):
            value = getattr(self, key)
            check(math.isfinite(value) and value >= 0, f"{section}.{key}", "a finite number >= 0", value)
        check(self.exploration_noise_max == 0 or (math.isfinite(self.exploration_noise_max)
                                                  and self.exploration_noise_max > self.exploration_noise),
              f"{section}.exploration_noise_max", f"0 (one noise for every env) or a finite number > "
              f"{section}.exploration_noise={self.exploration_noise:g}", self.exploration_noise_max)
        check(self.policy_delay >= 1, f"{section}.policy_delay", "an integer >= 1", self.policy_delay)


@dataclass
class TD3TrainConfig(OffPolicyTrainConfig):
    """TD3 (`--algorithm td3`): the MLP sizes of `policy` (actor; each of the twin critics) and the settings of
    `td3`."""

    ALGORITHM: ClassVar[str] = "td3"
    SECTION: ClassVar[str] = "td3"

    algorithm: str = "td3"
    td3: TD3Config = field(default_factory=TD3Config)


class TD3(OffPolicy):
    """TD3 for `DeterministicActorCritic` on `num_envs` envs, with a replay buffer on `device`."""

    name = "td3"
    description = "TD3: twin critics, a deterministic actor with delayed updates, a replay buffer on the device"
    label = "TD3"
    family = "td3"
    config_type = TD3TrainConfig
    learning_rate_key = "td3.critic_learning_rate"
    stat_names = TD3_STATS
    policy: DeterministicActorCritic
    cfg: TD3Config

    def __init__(self, policy: DeterministicActorCritic, cfg: TD3TrainConfig, device: torch.device,
                 num_envs: int, dist: Collective | None = None) -> None:
        super().__init__(policy, cfg.td3, cfg.perf, num_envs, "critic", device, dist)
        self.actor_params, self.critic_params = policy.actor_params(), policy.critic_params()
        self.actor_optimizer = self.network_optimizer(self.actor_params, cfg.td3.actor_learning_rate, "actor")
        self.critic_optimizer = self.network_optimizer(self.critic_params, cfg.td3.critic_learning_rate, "critics")
        self._critic_loss, self._actor_loss = self.compiled(self.critic_loss), self.compiled(self.actor_loss)
        self.critic_gradients = self.gradient_average(self.critic_params)
        self.actor_gradients = self.gradient_average(self.actor_params)
        self.critic_steps = 0
        """Gradient steps of the critics so far (host integer): the actor steps on every `policy_delay`-th."""
        self._critic_call = PolicyCall(policy, self.critic_loss)
        self._actor_call = PolicyCall(policy, lambda batch: (self.actor_loss(batch),))
        self._whole_step = self.whole_step(self.whole_gradient_step)
        self._whole_critic_step: Callable[..., None] | None = (
            None if self._whole_step is None else self.compiled(self.whole_critic_step))
        """`compile=step`: the gradient steps between the actor's, the critics' alone (a graph of their own)."""
        own = cfg.td3
        self.noise_range = (own.exploration_noise, own.exploration_noise_max) if own.exploration_noise_max else None
        """Mixed noise: the range each env's standard deviation is drawn from; None: `exploration_noise` for all."""
        self.noise_scales = torch.full((num_envs, 1), own.exploration_noise, device=device)
        """Each env's exploration standard deviation, [num_envs, 1]."""
        self._drawn_scales = torch.empty_like(self.noise_scales)
        """Mixed noise: the standard deviations drawn at a step, of which the envs whose episode ended take theirs."""
        self._ended = torch.empty(num_envs, 1, dtype=torch.bool, device=device)
        """Mixed noise: which envs' episodes ended at the step."""
        if self.noise_range is not None:
            self.noise_scales.uniform_(*self.noise_range)

    @classmethod
    def search_space(cls, cfg: OffPolicyTrainConfig) -> dict[str, dict[str, Any]]:
        """The off-policy learners' space, and TD3's noises: the target smoothing's (at most `noise_clip`) and the
        exploration's (not with mixed noise, whose range the user set)."""
        own = cfg.td3 if isinstance(cfg, TD3TrainConfig) else TD3Config()
        space = {**super().search_space(cfg),
                 "td3.policy_noise": {"type": "float", "low": 0.05, "high": min(0.4, own.noise_clip)}}
        if not own.exploration_noise_max:  # mixed noise: its range is the user's, the floor not drawn apart from it
            space["td3.exploration_noise"] = {"type": "float", "low": 0.05, "high": 0.3}
        return space

    @classmethod
    def build_policy(cls, cfg: TD3TrainConfig, env: EnvShape) -> DeterministicActorCritic:
        cls.check_actions(cfg, env)
        return DeterministicActorCritic(*cls.policy_dims(cfg, env), env.action_spec, cfg.policy, cfg.td3.support(),
                                        cls.action_bounds(cfg, env))

    samples_actions = False

    @staticmethod
    @torch.inference_mode()
    def evaluate(policy: DeterministicActorCritic, env: VecEnv, greedy: bool = True) -> np.ndarray:
        """The return of each env's first episode under the actor's actions (the same whether `greedy` or not: the
        actor is deterministic; its exploration noise is the rollout's)."""
        return first_episode_returns(env, lambda obs: policy.act_deterministic(policy.actor_input(obs)))

    def explore(self, actor_obs: Tensor) -> Tensor:
        actions = self.policy.unit_action(actor_obs)
        scale = self.cfg.exploration_noise if self.noise_range is None else self.noise_scales
        noise = torch.randn_like(actions).mul_(scale)
        return actions.add_(noise).clamp_(-1.0, 1.0)

    def record(self, t: int, step: StepResult) -> None:
        """The transition (`OffPolicy.record`); with mixed noise, every env whose episode ended draws its next
        standard deviation (on the device: a draw for every env, kept where the episode ended)."""
        super().record(t, step)
        if self.noise_range is not None:
            with self.phases("act"):
                ended = torch.logical_or(step.terminated.unsqueeze(-1), step.truncated.unsqueeze(-1), out=self._ended)
                torch.where(ended, self._drawn_scales.uniform_(*self.noise_range), self.noise_scales,
                            out=self.noise_scales)

    # -- update -----------------------------------------------------------------------------------------------

    def critic_loss(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """The twin critics' mean squared error against the clipped double-Q target of the smoothed target action
        (no gradient through it), and their mean Q; distributional critics' cross-entropy (`target_distribution`)."""
        a, c = self.policy.actor_group, self.critic_group
        with torch.no_grad():
            next_actions = self.policy.target_action(batch.next_obs[a])
            noise = torch.randn_like(next_actions).mul_(self.cfg.policy_noise)
            noise.clamp_(-self.cfg.noise_clip, self.cfg.noise_clip)
            next_actions = next_actions.add_(noise).clamp_(-1.0, 1.0)
            if self.policy.support is not None:
                target = self.target_distribution(batch, next_actions)
            else:
                next_q = torch.min(*self.policy.target_q_values(batch.next_obs[c], next_actions))
                target = batch.returns + batch.discounts * next_q
        if self.policy.support is not None:
            return self.distributional_loss(batch, target)
        q1, q2 = self.policy.q_values(batch.obs[c], batch.actions)
        loss = 0.5 * ((q1 - target).square().mean() + (q2 - target).square().mean())
        return loss, 0.5 * (q1 + q2).detach().mean()

    def actor_loss(self, batch: Batch) -> Tensor:
        """`-Q1(s, actor(s))`, averaged over the batch (and `pre_tanh_penalty`'s term)."""
        pre_tanh = self.policy.pre_tanh(batch.obs[self.policy.actor_group])
        loss = -self.policy.q_values(batch.obs[self.critic_group], torch.tanh(pre_tanh))[0].mean()
        return self.penalized(loss, pre_tanh)

    def first_minibatch_loss(self) -> Tensor:
        batch = self.sample_batch()
        return self.critic_loss(batch)[0] + self.actor_loss(batch)

    def gradient_step(self) -> None:
        """The critics' step on the batch; every `policy_delay`-th step also the actor's (against the stepped
        critics) and the targets' soft update (under `compile=step` one graph each, `whole_critic_step` and
        `whole_gradient_step`)."""
        if self._whole_step is not None and self._whole_critic_step is not None:
            self.critic_steps += 1
            whole = self._whole_step if self.critic_steps % self.cfg.policy_delay == 0 else self._whole_critic_step
            with self.phases("update.step"):
                whole(self.sample_batch(), *self.parts, self.stats)
            return
        with self.phases("update.forward"):
            batch = self.sample_batch()
            critic_loss, q_mean = self._critic_loss(batch)
        with self.phases("update.backward"):
            self.critic_optimizer.zero_grad(set_to_none=True)
            critic_loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        with self.phases("update.optimizer"):
            self.average(self.critic_gradients)
            self.critic_optimizer.step()
        self.critic_steps += 1
        actor_loss = torch.zeros((), device=self.device)
        if self.critic_steps % self.cfg.policy_delay == 0:
            with self.phases("update.forward"):
                actor_loss = self._actor_loss(batch)
            with self.phases("update.backward"):
                self.actor_optimizer.zero_grad(set_to_none=True)
                actor_loss.backward(inputs=self.actor_params)  # type: ignore[no-untyped-call]  # unannotated
            with self.phases("update.optimizer"):
                self.average(self.actor_gradients)
                self.actor_optimizer.step()
                self.soft_update()
        self.add_step_statistics((critic_loss, actor_loss, q_mean))

    def whole_critic_step(self, batch: Batch, actor: Trained, critics: Trained, stats: Tensor) -> None:
        """The critics' gradients and step as one function of device tensors (`perf.compile=step`), and their
        statistics (the actor's loss 0)."""
        (grads,), (critic_loss, q_mean) = gradients(self._critic_call, [critics], batch)
        step(critics, grads)
        with torch.no_grad():
            stats.add_(torch.stack((critic_loss, torch.zeros_like(critic_loss), q_mean)))

    def whole_gradient_step(self, batch: Batch, actor: Trained, critics: Trained, stats: Tensor) -> None:
        """`gradient_step` on an actor's step as one function of device tensors (`perf.compile=step`): the
        critics' step, then the actor's against the stepped critics, the targets' soft update and the statistics."""
        self.whole_critic_step(batch, actor, critics, stats)
        (grads,), (actor_loss,) = gradients(self._actor_call, [actor], batch)
        step(actor, grads)
        self.soft_update()
        with torch.no_grad():
            stats[1].add_(actor_loss)

    # -- checkpoints ------------------------------------------------------------------------------------------

    def named_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_optimizer": self.actor_optimizer, "critic_optimizer": self.critic_optimizer}

    def state_dict(self) -> dict[str, Any]:
        state = {**super().state_dict(), "critic_steps": self.critic_steps}
        if self.noise_range is not None:
            state["noise_scales"] = self.noise_scales.detach().clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.critic_steps = int(state["critic_steps"])
        if self.noise_range is None:
            return
        low, high = self.noise_range
        saved = state.get("noise_scales")
        saved = saved.to(self.noise_scales.device) if isinstance(saved, Tensor) and saved.is_floating_point() else None
        if saved is not None and saved.shape == self.noise_scales.shape and bool(
                ((saved >= low) & (saved <= high)).all()):
            self.noise_scales.copy_(saved)
        else:  # another env count, another range, or a checkpoint of one noise for all: fresh draws
            log.info("td3: the run resumes with each env's exploration noise drawn afresh from [%g, %g]", low, high)


ALGORITHMS = (TD3,)
"""Registered by `syncfree.algo` (`--algorithm td3`)."""
