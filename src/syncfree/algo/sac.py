"""Soft Actor-Critic (`--algorithm sac`): off-policy learning from a replay buffer on the device.

An iteration collects `sac.steps_per_env` steps of every env into the buffer, then takes
`sac.updates_per_iteration` gradient steps, each on a batch drawn uniformly from it: the twin critics regress onto
`r + gamma (1 - terminated) (min Q_target(s', a') - alpha log pi(a'|s'))` with `a'` drawn from the actor, the actor
maximizes `min Q(s, a) - alpha log pi(a|s)` through its reparameterized sample, the temperature's log moves the
policy's entropy toward `-action_dim`, and the target critics follow the critics by `tau` (one `_foreach_lerp_`).
Continuous actions only: the actor's tanh-squashed Gaussian acts in [-1, 1].

The buffer is a ring of `[slots, envs]` rows preallocated at the start; its write position and fill are host
integers that the rollout advances, so neither a step nor a gradient step reads the device: batches are drawn with
`torch.randint` on the device and gathered with `index_select`. A time-out bootstraps from the episode's last
observation where the env gives it (`final_obs`), else from the step's own observation, as PPO's time-outs do. Until
`sac.learning_starts` env steps the actions are uniform and no gradient step is taken (counted on the host from the
steps collected, which a checkpoint keeps). The buffer is not saved: a resumed run starts it empty and logs so.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from syncfree.algo.base import Algorithm, CheckpointReader, first_episode_returns
from syncfree.config import TrainConfig
from syncfree.core.phases import Phases
from syncfree.core.switches import Scope
from syncfree.envs.api import StepResult, VecEnv
from syncfree.errors import POLICY_MEMORY, UserError, allocating, check
from syncfree.policy.actor_critic import auto_lowers_mlps, set_autocast
from syncfree.policy.build import EnvShape, obs_dim
from syncfree.policy.sac import SquashedGaussianActorCritic
from syncfree.policy.settings import PolicyConfig

log = logging.getLogger("syncfree")

BUFFER_MEMORY = "lower sac.buffer_size (the replay buffer holds that many transitions of every group it stores)"

SAC_STATS = ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean")
"""Means over the iteration's gradient steps (0 while none was taken, `gradient_steps`): the twin critics' mean
squared error, the actor's loss, the temperature, the entropy estimate `-log pi` of the actor's samples, and the
critics' mean Q on the batch."""


@dataclass
class SACConfig:
    """Soft Actor-Critic's settings: the rollout and updates of an iteration, the replay buffer, the losses."""

    steps_per_env: int = 4
    """Env steps collected per env and iteration."""
    updates_per_iteration: int = 32
    """Gradient steps per iteration (each steps the critics, the actor and the temperature once)."""
    buffer_size: int = 1_000_000
    """Transitions the replay buffer holds (rounded up to a multiple of the env count); the oldest are overwritten."""
    batch_size: int = 256
    """Transitions per gradient step, drawn uniformly (with replacement) from the buffer."""
    learning_starts: int = 5000
    """Env steps (all envs together) of uniform random actions before the first gradient step."""
    gamma: float = 0.99
    """Discount."""
    tau: float = 0.005
    """Soft target update: each target critic parameter moves this fraction of the way to the critic's, every
    gradient step."""
    actor_learning_rate: float = 3e-4
    """The actor's Adam step size."""
    critic_learning_rate: float = 1e-3
    """The critics' Adam step size."""
    alpha_learning_rate: float = 1e-3
    """The temperature's Adam step size (its log is learned; the target entropy is -action_dim)."""
    init_alpha: float = 1.0
    """The temperature at the start."""

    def validate(self) -> None:
        for key in ("steps_per_env", "updates_per_iteration", "buffer_size", "batch_size"):
            check(getattr(self, key) >= 1, f"sac.{key}", "an integer >= 1", getattr(self, key))
        check(self.batch_size <= self.buffer_size, "sac.batch_size",
              f"an integer <= sac.buffer_size={self.buffer_size}", self.batch_size)
        check(self.learning_starts >= 0, "sac.learning_starts", "an integer >= 0", self.learning_starts)
        check(0 <= self.gamma <= 1, "sac.gamma", "a number in [0, 1]", self.gamma)
        check(0 < self.tau <= 1, "sac.tau", "a number in (0, 1]", self.tau)
        for key in ("actor_learning_rate", "critic_learning_rate", "alpha_learning_rate", "init_alpha"):
            check(getattr(self, key) > 0, f"sac.{key}", "a number > 0", getattr(self, key))


UNREAD_POLICY = {"init_std": "the actor learns a state-dependent standard deviation",
                 "std_type": "the actor learns a state-dependent standard deviation"}
"""Fields of the `policy` section SAC's networks do not read, and why."""


@dataclass
class SACTrainConfig(TrainConfig):
    """Soft Actor-Critic (`--algorithm sac`): the MLP sizes of `policy` (actor; each of the twin critics) and the
    settings of `sac`."""

    ALGORITHM: ClassVar[str] = "sac"

    algorithm: str = "sac"
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    sac: SACConfig = field(default_factory=SACConfig)

    def rollout_steps(self) -> int:
        return self.sac.steps_per_env

    def describe_iteration(self) -> str:
        return (f"{super().describe_iteration()} into a replay buffer of {self.sac.buffer_size:,}, "
                f"{self.sac.updates_per_iteration} gradient steps of {self.sac.batch_size}")

    def validate(self) -> None:
        super().validate()
        self.policy.validate(self.algorithm)
        self.sac.validate()

    def unused_settings(self, defaults: TrainConfig | None = None) -> list[tuple[str, str]]:
        base = defaults if isinstance(defaults, SACTrainConfig) else type(self)()
        return [(f"policy.{name}={getattr(self.policy, name)!r}", why) for name, why in UNREAD_POLICY.items()
                if getattr(self.policy, name) != getattr(base.policy, name)]

    @classmethod
    def adopt(cls, cfg: SACTrainConfig, source: TrainConfig) -> None:
        """From a PPO preset: its discount; the policy fields SAC does not read keep their defaults."""
        ppo = getattr(source, "ppo", None)
        if ppo is not None:
            cfg.sac.gamma = ppo.gamma
        fresh = PolicyConfig()
        cfg.policy = dataclasses.replace(cfg.policy, **{name: getattr(fresh, name) for name in UNREAD_POLICY})


class SAC(Algorithm):
    """Soft Actor-Critic for `SquashedGaussianActorCritic` on `num_envs` envs, with a replay buffer on `device`."""

    name = "sac"
    description = "Soft Actor-Critic: twin critics, a tanh-squashed Gaussian actor, a replay buffer on the device"
    label = "SAC"
    family = "sac"
    config_type = SACTrainConfig
    learning_rate_key = "sac.critic_learning_rate"
    compiled_update = False
    stat_names = SAC_STATS
    shared_statistics = ()
    optional_state = ()
    policy: SquashedGaussianActorCritic

    def __init__(self, policy: SquashedGaussianActorCritic, cfg: SACConfig, num_envs: int, critic_group: str,
                 device: torch.device) -> None:
        self.policy, self.cfg, self.device = policy, cfg, device
        self.phases = Phases()
        self.steps_per_env, self.num_envs = cfg.steps_per_env, num_envs
        self.minibatches_per_update = cfg.updates_per_iteration
        self.target_entropy = -float(policy.action_dim)
        self.actor_params, self.critic_params = policy.actor_params(), policy.critic_params()
        self.target_params = policy.target_params()
        # fused: the step counts stay on the device (torch's default Adam reads each on the host)
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=cfg.actor_learning_rate, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic_params, lr=cfg.critic_learning_rate, fused=True)
        self.alpha_optimizer = torch.optim.Adam([policy.log_alpha], lr=cfg.alpha_learning_rate, fused=True)

        self.slots = max(1, math.ceil(cfg.buffer_size / num_envs))
        """Rows of `num_envs` transitions the ring holds."""
        self.groups = list(dict.fromkeys((policy.actor_group, critic_group)))
        """The observation groups stored: the actor's and the critics'."""
        self.critic_group = critic_group
        with allocating(BUFFER_MEMORY):
            def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
                return torch.zeros(self.slots, num_envs, *shape, dtype=dtype, device=device)

            dims = {policy.actor_group: policy.actor_obs_dim, critic_group: policy.critic_obs_dim}
            self.obs = {g: zeros(dims[g]) for g in self.groups}
            self.next_obs = {g: zeros(dims[g]) for g in self.groups}
            self.actions = zeros(policy.action_dim)
            self.rewards = zeros()
            self.terminated = zeros()
        self.position = 0
        """The slot the next rollout step writes (host integer)."""
        self.filled = 0
        """Slots holding transitions (host integer)."""
        self.env_steps = 0
        """Env steps collected by this run, all envs together (kept by checkpoints): `learning_starts` counts them."""
        self.gradient_steps = 0
        """Gradient steps of the last update."""
        self.stats = torch.zeros(len(self.stat_names), device=device)

    # -- the class's side -----------------------------------------------------------------------------------------

    @classmethod
    def build(cls, cfg: SACTrainConfig, env: VecEnv, device: torch.device, dist: Any = None,
              read_checkpoint: CheckpointReader | None = None) -> SAC:
        if dist is not None:
            raise UserError("algorithm=sac: trains in one process (its gradients are not averaged over ranks)")
        with allocating(POLICY_MEMORY):
            policy = cls.build_policy(cfg, env).to(device)
        set_autocast(policy, cfg.perf.autocast, device)
        return cls(policy, cfg.sac, env.num_envs, "critic", device)

    @classmethod
    def build_policy(cls, cfg: SACTrainConfig, env: EnvShape) -> SquashedGaussianActorCritic:
        spec = env.action_spec
        if spec.kind != "continuous":
            raise UserError(f"algorithm=sac: task {cfg.task!r} has {spec.kind} actions ({spec.size} choices); SAC "
                            "trains continuous actions only (--algorithm ppo trains this task)")
        return SquashedGaussianActorCritic(obs_dim(env, cfg.policy.actor_obs), obs_dim(env, "critic"), spec,
                                           cfg.policy, cfg.sac.init_alpha)

    @staticmethod
    @torch.inference_mode()
    def evaluate(policy: SquashedGaussianActorCritic, env: VecEnv, greedy: bool = True) -> np.ndarray:
        """The return of each env's first episode under the squashed mean (`greedy`) or the actor's samples."""
        def sampled(actor_obs: Tensor) -> Tensor:
            return policy.sample(actor_obs)[0]

        act = policy.act_deterministic if greedy else sampled
        return first_episode_returns(env, lambda obs: act(policy.actor_input(obs)))

    @classmethod
    def scope(cls, cfg: SACTrainConfig, device_type: str, world_size: int, env_layer: bool) -> Scope:
        rows = max(cfg.env.rows(), cfg.sac.batch_size)  # a rollout step's actor, a gradient step's networks
        return Scope(flat_rollouts=False, whole_step_update=False, chunked_critic=False, cuda_graph_replay=False,
                     adaptive_lr=False, env_layer=env_layer, device=device_type, world_size=world_size,
                     critic_rows=cfg.sac.batch_size, policy_rows=rows, auto_precision_modules=auto_lowers_mlps(
                         [*cfg.policy.actor_hidden, *cfg.policy.critic_hidden], rows))

    def obs_dims(self, env: EnvShape) -> dict[str, int]:
        return {"policy": self.policy.actor_obs_dim, "critic": self.policy.critic_obs_dim}

    def forward_only(self, obs: dict[str, Tensor]) -> Callable[[], list[Tensor]]:
        actor_obs = self.policy.actor_input(obs).clone()
        return lambda: [self.policy.sample(actor_obs)[0] for _ in range(self.steps_per_env)]

    def rollout_forward(self, obs: dict[str, Tensor]) -> None:
        self.policy.sample(self.policy.actor_input(obs))

    def rows_per_minibatch(self) -> int:
        return self.cfg.batch_size

    # -- rollout ----------------------------------------------------------------------------------------------

    def acting_randomly(self) -> bool:
        """Before `learning_starts` env steps the actions are uniform in [-1, 1] (decided on the host)."""
        return self.env_steps < self.cfg.learning_starts

    def act(self, obs: dict[str, Tensor], t: int) -> Tensor:
        with self.phases("act"):
            actor_obs = self.policy.actor_input(obs)
            if self.acting_randomly():
                actions = torch.rand(self.num_envs, self.policy.action_dim, device=self.device).mul_(2.0).sub_(1.0)
            else:
                actions = self.policy.sample(actor_obs)[0]
        with self.phases("store"):
            slot = self.position
            for g in self.groups:
                self.obs[g][slot].copy_(obs[g])
            self.actions[slot].copy_(actions)
        return actions

    def record(self, t: int, step: StepResult) -> None:
        """The env's side of the transition; a time-out's next observation is the episode's last (`final_obs`) where
        the env gives it, else the step's own observation (the returned one already starts the next episode)."""
        slot = self.position
        with self.phases("store"):
            self.rewards[slot].copy_(step.reward)
            self.terminated[slot].copy_(step.terminated)
            final = step.info.get("final_obs", {})
            time_out = step.truncated.unsqueeze(-1)
            for g in self.groups:
                last = final[g] if g in final else self.obs[g][slot]
                torch.where(time_out, last, step.obs[g], out=self.next_obs[g][slot])
        with self.phases("normalizer"):
            self.policy.update_normalizers(self.policy.actor_input(step.obs), step.obs[self.critic_group])
        if self.observer is not None:
            with self.phases("stats"):
                self.observer.record(t, step)
        self.position = (slot + 1) % self.slots
        self.filled = min(self.filled + 1, self.slots)
        self.env_steps += self.num_envs

    def compute_returns(self, obs: dict[str, Tensor]) -> None:
        """Nothing: the targets are computed per gradient step, from the critics of that step."""

    # -- update -----------------------------------------------------------------------------------------------

    def sample_batch(self) -> tuple[Tensor, ...]:
        """A batch drawn uniformly from the filled rows: actor and critic observations, actions, rewards,
        terminated flags, next actor and critic observations."""
        idx = torch.randint(0, max(self.filled, 1) * self.num_envs, (self.cfg.batch_size,), device=self.device)

        def rows(buffer: Tensor) -> Tensor:
            return buffer.view(-1, *buffer.shape[2:]).index_select(0, idx)

        a, c = self.policy.actor_group, self.critic_group
        return (rows(self.obs[a]), rows(self.obs[c]), rows(self.actions), rows(self.rewards), rows(self.terminated),
                rows(self.next_obs[a]), rows(self.next_obs[c]))

    def critic_loss(self, batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        """The twin critics' mean squared error against the soft Bellman target (no gradient through it), and
        their mean Q."""
        _, critic_obs, actions, rewards, terminated, next_actor_obs, next_critic_obs = batch
        with torch.no_grad():
            alpha = self.policy.log_alpha.exp()
            next_actions, next_log_prob = self.policy.sample(next_actor_obs)
            next_q = torch.min(*self.policy.target_q_values(next_critic_obs, next_actions)) - alpha * next_log_prob
            target = rewards + self.cfg.gamma * (1.0 - terminated) * next_q
        q1, q2 = self.policy.q_values(critic_obs, actions)
        loss = 0.5 * ((q1 - target).square().mean() + (q2 - target).square().mean())
        return loss, 0.5 * (q1 + q2).detach().mean()

    def actor_losses(self, batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor]:
        """The actor's loss (`alpha log pi - min Q` of its reparameterized samples), the temperature's, and
        the log-probabilities' mean."""
        actor_obs, critic_obs = batch[0], batch[1]
        actions, log_prob = self.policy.sample(actor_obs)
        alpha = self.policy.log_alpha.exp().detach()
        actor_loss = (alpha * log_prob - torch.min(*self.policy.q_values(critic_obs, actions))).mean()
        alpha_loss = -(self.policy.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        return actor_loss, alpha_loss, log_prob.detach().mean()

    def first_minibatch_loss(self) -> Tensor:
        batch = self.sample_batch()
        actor_loss, alpha_loss, _ = self.actor_losses(batch)
        return self.critic_loss(batch)[0] + actor_loss + alpha_loss

    def update(self, progress: float = 0.0) -> None:
        """`updates_per_iteration` gradient steps, once `learning_starts` env steps were collected and the buffer
        holds a batch (a resumed run's refills first)."""
        self.stats.zero_()
        ready = not self.acting_randomly() and self.filled * self.num_envs >= self.cfg.batch_size
        self.gradient_steps = self.cfg.updates_per_iteration if ready else 0
        for _ in range(self.gradient_steps):
            self.gradient_step()

    def gradient_step(self) -> None:
        """The critics' step on the batch, then the actor's and the temperature's (against the stepped critics),
        then the targets' soft update."""
        with self.phases("update.forward"):
            batch = self.sample_batch()
            critic_loss, q_mean = self.critic_loss(batch)
        with self.phases("update.backward"):
            self.critic_optimizer.zero_grad(set_to_none=True)
            critic_loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        with self.phases("update.optimizer"):
            self.critic_optimizer.step()
        with self.phases("update.forward"):
            actor_loss, alpha_loss, log_prob = self.actor_losses(batch)
        with self.phases("update.backward"):
            self.actor_optimizer.zero_grad(set_to_none=True)
            self.alpha_optimizer.zero_grad(set_to_none=True)
            # the critics take no gradient from the actor's loss: only the actor's and the temperature's are computed
            trained = [*self.actor_params, self.policy.log_alpha]
            (actor_loss + alpha_loss).backward(inputs=trained)  # type: ignore[no-untyped-call]  # unannotated
        with self.phases("update.optimizer"):
            self.actor_optimizer.step()
            self.alpha_optimizer.step()
            with torch.no_grad():
                torch._foreach_lerp_(self.target_params, self.critic_params, self.cfg.tau)
                alpha = self.policy.log_alpha.exp()
                self.stats.add_(torch.stack((critic_loss.detach(), actor_loss.detach(), alpha, -log_prob, q_mean)))

    def statistics(self) -> dict[str, Tensor]:
        means = self.stats / max(self.gradient_steps, 1)
        return {**dict(zip(self.stat_names, means.unbind(), strict=True)),
                "gradient_steps": torch.full((), self.gradient_steps, device=self.device)}

    def record_statistics(self, stats: dict[str, float]) -> dict[str, Any]:
        record: dict[str, Any] = dict(stats)
        record["gradient_steps"] = int(stats["gradient_steps"])
        return record

    def divergence(self, stats: dict[str, float]) -> str | None:
        if not all(math.isfinite(stats[name]) for name in self.stat_names):
            return f"the update's losses are not finite (the run diverged: try a smaller {self.learning_rate_key})"
        return None

    def storage_tensors(self) -> list[Tensor]:
        return [*self.obs.values(), *self.next_obs.values(), self.actions, self.rewards, self.terminated]

    # -- checkpoints ------------------------------------------------------------------------------------------

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.actor_optimizer, self.critic_optimizer, self.alpha_optimizer]

    def optimizer_params(self) -> dict[str, list[Tensor]]:
        return {"actor_optimizer": list(self.actor_params), "critic_optimizer": list(self.critic_params),
                "alpha_optimizer": [self.policy.log_alpha]}

    def state_dict(self) -> dict[str, Any]:
        """The optimizers and the env steps collected (the networks, the targets and the temperature are the
        policy's; the replay buffer is not saved)."""
        return {"actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(),
                "alpha_optimizer": self.alpha_optimizer.state_dict(), "env_steps": self.env_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.env_steps = int(state["env_steps"])
        log.info("sac: the run resumes with an empty replay buffer (checkpoints do not hold it); it refills from the "
                 "trained policy's actions")


ALGORITHMS = (SAC,)
"""Registered by `syncfree.algo` (`--algorithm sac`)."""
