"""Soft Actor-Critic (`--algorithm sac`): off-policy learning from a replay buffer on the device.

Each gradient step: the twin critics regress onto `R + discount (min Q_target(s', a') - alpha log pi(a'|s'))` with
`a'` drawn from the actor (`R` and `discount` the buffer's n-step return and bootstrap discount), the actor maximizes
`min Q(s, a) - alpha log pi(a|s)` through its reparameterized sample, the temperature's log moves the policy's
entropy toward `-action_dim`, and the target critics follow the critics by `tau`. Continuous actions only: the
actor's tanh-squashed Gaussian acts in [-1, 1]. The rollout, the buffer and the checkpoints are the off-policy
learners' (`syncfree.algo.offpolicy`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
import torch
from torch import Tensor

from syncfree.algo.base import first_episode_returns
from syncfree.algo.offpolicy import OffPolicy, OffPolicyConfig, OffPolicyTrainConfig
from syncfree.algo.offpolicy_step import PolicyCall, Trained, gradients, step
from syncfree.algo.optim import Collective
from syncfree.algo.replay import Batch
from syncfree.envs.api import VecEnv
from syncfree.errors import check
from syncfree.policy.build import EnvShape
from syncfree.policy.sac import LOG_STD_MIN, SquashedGaussianActorCritic

SAC_STATS = ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean")
"""Means over the iteration's gradient steps (0 while none was taken, `gradient_steps`): the twin critics' mean
squared error, the actor's loss, the temperature, the entropy estimate `-log pi` of the actor's samples, and the
critics' mean Q on the batch."""


@dataclass
class SACConfig(OffPolicyConfig):
    """Soft Actor-Critic's settings: the off-policy learners' and the temperature's."""

    alpha_learning_rate: float = 1e-3
    """The temperature's Adam step size (its log is learned; the target entropy is -action_dim)."""
    init_alpha: float = 1.0
    """The temperature at the start."""
    log_std_max: float = 2.0
    """The top of the range a tanh squashes the actor's log standard deviation into, from -5: CleanRL's and
    SpinningUp's 2; FastSAC's 0 keeps the exploration narrower (an untrained actor's is the range's middle)."""
    actor_init: Literal["default", "zero"] = "default"
    """The actor's output layer at the start: `default`, PyTorch's initialization (CleanRL's); `zero`, its weights
    and biases 0 (FastSAC's), so that the untrained actor's mean action is 0 in every state (the env's default pose
    under `action_bounds` `unit` or `symmetric`) and its log standard deviation the middle of its range."""

    def validate(self, section: str = "sac") -> None:
        super().validate(section)
        for key in ("alpha_learning_rate", "init_alpha"):
            check(getattr(self, key) > 0, f"{section}.{key}", "a number > 0", getattr(self, key))
        check(self.log_std_max > LOG_STD_MIN, f"{section}.log_std_max", f"a number > {LOG_STD_MIN:g}",
              self.log_std_max)
        check(self.actor_init in ("default", "zero"), f"{section}.actor_init", "default, zero", self.actor_init)


@dataclass
class SACTrainConfig(OffPolicyTrainConfig):
    """Soft Actor-Critic (`--algorithm sac`): the MLP sizes of `policy` (actor; each of the twin critics) and the
    settings of `sac`."""

    ALGORITHM: ClassVar[str] = "sac"
    SECTION: ClassVar[str] = "sac"

    algorithm: str = "sac"
    sac: SACConfig = field(default_factory=SACConfig)


class SAC(OffPolicy):
    """Soft Actor-Critic for `SquashedGaussianActorCritic` on `num_envs` envs, with a replay buffer on `device`."""

    name = "sac"
    description = "Soft Actor-Critic: twin critics, a tanh-squashed Gaussian actor, a replay buffer on the device"
    label = "SAC"
    family = "sac"
    config_type = SACTrainConfig
    learning_rate_key = "sac.critic_learning_rate"
    stat_names = SAC_STATS
    policy: SquashedGaussianActorCritic
    cfg: SACConfig

    def __init__(self, policy: SquashedGaussianActorCritic, cfg: SACTrainConfig, device: torch.device,
                 num_envs: int, dist: Collective | None = None) -> None:
        super().__init__(policy, cfg.sac, cfg.perf, num_envs, "critic", device, dist)
        self.target_entropy = -float(policy.action_dim)
        self.actor_params, self.critic_params = policy.actor_params(), policy.critic_params()
        own = cfg.sac
        self.actor_optimizer = self.network_optimizer(self.actor_params, own.actor_learning_rate, "actor")
        self.critic_optimizer = self.network_optimizer(self.critic_params, own.critic_learning_rate, "critics")
        # fused: the step count stays on the device (torch's default Adam reads it on the host)
        self.alpha_optimizer = torch.optim.Adam([policy.log_alpha], lr=own.alpha_learning_rate, fused=True)
        self._critic_loss, self._actor_losses = self.compiled(self.critic_loss), self.compiled(self.actor_losses)
        self.critic_gradients = self.gradient_average(self.critic_params)
        self.actor_gradients = self.gradient_average([*self.actor_params, policy.log_alpha])
        self._critic_call, self._actor_call = PolicyCall(policy, self.critic_loss), PolicyCall(policy, self.actor_objective)
        self._whole_step = self.whole_step(self.whole_gradient_step)

    @classmethod
    def build_policy(cls, cfg: SACTrainConfig, env: EnvShape) -> SquashedGaussianActorCritic:
        cls.check_actions(cfg, env)
        own = cfg.sac
        return SquashedGaussianActorCritic(*cls.policy_dims(cfg, env), env.action_spec, cfg.policy, own.init_alpha,
                                           own.support(), cls.action_bounds(cfg, env), own.log_std_max,
                                           own.actor_init == "zero")

    @staticmethod
    @torch.inference_mode()
    def evaluate(policy: SquashedGaussianActorCritic, env: VecEnv, greedy: bool = True) -> np.ndarray:
        """The return of each env's first episode under the squashed mean (`greedy`) or the actor's samples."""
        def sampled(actor_obs: Tensor) -> Tensor:
            return policy.to_env(policy.sample(actor_obs)[0])

        act = policy.act_deterministic if greedy else sampled
        return first_episode_returns(env, lambda obs: act(policy.actor_input(obs)))

    def explore(self, actor_obs: Tensor) -> Tensor:
        return self.policy.sample(actor_obs)[0]

    # -- update -----------------------------------------------------------------------------------------------

    def critic_loss(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """The twin critics' mean squared error against the soft Bellman target (no gradient through it), and
        their mean Q; distributional critics' cross-entropy (`target_distribution`)."""
        a, c = self.policy.actor_group, self.critic_group
        with torch.no_grad():
            alpha = self.policy.log_alpha.exp()
            next_actions, next_log_prob = self.policy.sample(batch.next_obs[a])
            if self.policy.support is not None:
                target = self.target_distribution(batch, next_actions, alpha * next_log_prob)
            else:
                next_q = torch.min(*self.policy.target_q_values(batch.next_obs[c], next_actions)) - alpha * next_log_prob
                target = batch.returns + batch.discounts * next_q
        if self.policy.support is not None:
            return self.distributional_loss(batch, target)
        q1, q2 = self.policy.q_values(batch.obs[c], batch.actions)
        loss = 0.5 * ((q1 - target).square().mean() + (q2 - target).square().mean())
        return loss, 0.5 * (q1 + q2).detach().mean()

    def actor_losses(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """The actor's loss (`alpha log pi - min Q` of its reparameterized samples, and `pre_tanh_penalty`'s term on
        the Gaussian's mean), the temperature's, and the log-probabilities' mean."""
        mean, log_std = self.policy.mean_log_std(batch.obs[self.policy.actor_group])
        actions, log_prob = self.policy.sample_from(mean, log_std)
        alpha = self.policy.log_alpha.exp().detach()
        actor_loss = (alpha * log_prob - torch.min(*self.policy.q_values(batch.obs[self.critic_group], actions))).mean()
        actor_loss = self.penalized(actor_loss, mean)
        alpha_loss = -(self.policy.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        return actor_loss, alpha_loss, log_prob.detach().mean()

    def actor_objective(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """The actor's and the temperature's losses summed (what their one backward differentiates), the actor's,
        and the log-probabilities' mean."""
        actor_loss, alpha_loss, log_prob = self.actor_losses(batch)
        return actor_loss + alpha_loss, actor_loss, log_prob

    def first_minibatch_loss(self) -> Tensor:
        batch = self.sample_batch()
        actor_loss, alpha_loss, _ = self.actor_losses(batch)
        return self.critic_loss(batch)[0] + actor_loss + alpha_loss

    def gradient_step(self) -> None:
        """The critics' step on the batch, then the actor's and the temperature's (against the stepped critics),
        then the targets' soft update (under `compile=step` one graph, `whole_gradient_step`)."""
        if self._whole_step is not None:
            with self.phases("update.step"):
                self._whole_step(self.sample_batch(), *self.parts, self.stats)
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
        with self.phases("update.forward"):
            actor_loss, alpha_loss, log_prob = self._actor_losses(batch)
        with self.phases("update.backward"):
            self.actor_optimizer.zero_grad(set_to_none=True)
            self.alpha_optimizer.zero_grad(set_to_none=True)
            # the critics take no gradient from the actor's loss: only the actor's and the temperature's are computed
            trained = [*self.actor_params, self.policy.log_alpha]
            (actor_loss + alpha_loss).backward(inputs=trained)  # type: ignore[no-untyped-call]  # unannotated
        with self.phases("update.optimizer"):
            self.average(self.actor_gradients)
            self.actor_optimizer.step()
            self.alpha_optimizer.step()
            self.soft_update()
            with torch.no_grad():
                alpha = self.policy.log_alpha.exp()
            self.add_step_statistics((critic_loss, actor_loss, alpha, -log_prob, q_mean))

    def whole_gradient_step(self, batch: Batch, actor: Trained, critics: Trained, alpha: Trained,
                            stats: Tensor) -> None:
        """`gradient_step` as one function of device tensors (`perf.compile=step`): the critics' gradients and step,
        then the actor's and the temperature's (one differentiation of their summed losses, against the stepped
        critics), the targets' soft update and the statistics."""
        (critic_grads,), (critic_loss, q_mean) = gradients(self._critic_call, [critics], batch)
        step(critics, critic_grads)
        (actor_grads, alpha_grads), (_, actor_loss, log_prob) = gradients(self._actor_call, [actor, alpha], batch)
        step(actor, actor_grads)
        step(alpha, alpha_grads)
        self.soft_update()
        with torch.no_grad():
            stats.add_(torch.stack((critic_loss, actor_loss, self.policy.log_alpha.exp(), -log_prob, q_mean)))

    # -- checkpoints ------------------------------------------------------------------------------------------

    def named_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_optimizer": self.actor_optimizer, "critic_optimizer": self.critic_optimizer,
                "alpha_optimizer": self.alpha_optimizer}


ALGORITHMS = (SAC,)
"""Registered by `syncfree.algo` (`--algorithm sac`)."""
