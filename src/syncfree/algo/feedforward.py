"""PPO on flat rollouts (rsl_rl's algorithm): preallocated `[steps, envs]` storage, GAE, clipped surrogate and value
losses, entropy bonus, KL-adaptive learning rate.

The rollout step's two halves are pure functions of device tensors: `act_step` (normalize, act, store the policy's
side) and `record_step` (normalizer updates, the env's side of the storage); the same functions run eagerly, timed or
counted phase by phase, and with `perf.compile` on each is one compiled graph. The minibatch update is a compiled
forward and loss (`hot`), or the whole minibatch as one graph (`step`, `syncfree.algo.minibatch_step`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from syncfree.algo.advantages import compute_gae, global_mean_std
from syncfree.algo.base import Algorithm, CheckpointReader, first_episode_returns, reward_scale
from syncfree.algo.configs import PPOTrainConfig
from syncfree.algo.minibatch_step import MinibatchStep
from syncfree.algo.optim import Collective, PolicyOptimizer, hidden_matrices, searchable_optimizers
from syncfree.algo.rnd import RND, build_rnd
from syncfree.algo.settings import PPOConfig
from syncfree.algo.storage import Batch, RolloutStorage, StepRow, store_env, store_policy
from syncfree.algo.symmetry import Symmetry, build_symmetry
from syncfree.core.compile import hot, mark_static, unaligned_for_cuda_graphs, use_cuda_graphs
from syncfree.core.phases import UNTIMED, Phases
from syncfree.core.switches import SEED_BEFORE, PerfConfig, Scope
from syncfree.envs.api import ActionSpec, StepResult, VecEnv
from syncfree.errors import POLICY_MEMORY, STORAGE_MEMORY, UserError, allocating
from syncfree.policy.actor_critic import ActorCritic, PolicyBase, auto_lowers_mlps, set_autocast
from syncfree.policy.build import EnvShape, obs_dim
from syncfree.policy.settings import TokenPolicyConfig
from syncfree.policy.token_encoder import TokenActorCritic, default_layout

log = logging.getLogger("syncfree")

UPDATE_STATS = ("surrogate_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")
"""Means over the iteration's minibatches; followed by `skipped_steps` (a count) and `learning_rate`. A policy with
an auxiliary loss (the token policy's reconstruction) adds `reconstruction_loss` before `grad_norm`."""

RSL_RL_LOGGED = 3
"""The first statistics, the losses rsl_rl's update logs: with `device_loss_stats` off they are read with `.item()`
at every minibatch, as rsl_rl reads them."""


class FeedForwardPPO(Algorithm):
    """PPO for a feed-forward policy (`ActorCritic` or `TokenActorCritic`) on `num_envs` envs."""

    name = "ppo"
    description = "PPO on flat rollouts: MLP or universal-token policies (rsl_rl's PPO)"
    label = "PPO"
    family = "ppo"
    config_type = PPOTrainConfig
    policy: PolicyBase

    @classmethod
    def search_space(cls, cfg: PPOTrainConfig) -> dict[str, dict[str, Any]]:
        """PPO's default search (RL Zoo's ranges, narrowed to the settings that matter most): the learning rate and
        the entropy bonus on log scales, epochs, minibatches, gamma, lambda, the clip range, steps per env, the
        envs at half, the same and twice the preset's count (powers of two keep every minibatch count a divisor), and
        the optimizer (`muon` for an MLP policy with a hidden matrix, `schedule_free_adamw` with a fixed rate)."""
        envs = cfg.env.num_envs
        policy = cfg.policy
        mlp = getattr(policy, "kind", "mlp") == "mlp"
        optimizers = searchable_optimizers(max(policy.actor_hidden, policy.critic_hidden, key=len) if mlp else [],
                                           fixed_rate=cfg.ppo.schedule == "fixed")
        return {
            "ppo.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "ppo.entropy_coef": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
            "ppo.num_epochs": {"type": "int", "low": 2, "high": 10},
            "ppo.num_minibatches": {"type": "categorical", "choices": [1, 2, 4, 8]},
            "ppo.gamma": {"type": "float", "low": 0.9, "high": 0.999},
            "ppo.lam": {"type": "float", "low": 0.8, "high": 0.99},
            "ppo.clip_param": {"type": "float", "low": 0.1, "high": 0.4},
            "ppo.steps_per_env": {"type": "categorical", "choices": [8, 16, 32, 64]},
            "env.num_envs": {"type": "categorical", "choices": sorted({max(1, envs // 2), envs, 2 * envs})},
            "ppo.optimizer": {"type": "categorical", "choices": optimizers},
        }

    def __init__(self, policy: PolicyBase, cfg: PPOConfig, perf: PerfConfig, num_envs: int, critic_dim: int,
                 action_spec: ActionSpec, device: torch.device, dist: Collective | None = None,
                 symmetry: Symmetry | None = None, rnd: RND | None = None) -> None:
        self.policy, self.cfg, self.perf, self.device, self.dist = policy, cfg, perf, device, dist
        self.symmetry = symmetry
        """Mirror augmentation and/or the mirror loss in each minibatch (`syncfree.algo.symmetry`), if set."""
        self.rnd = rnd
        self.phases = Phases()
        self.steps_per_env, self.num_envs = cfg.steps_per_env, num_envs
        self.max_skipped_updates = cfg.max_skipped_updates
        self.epochs, self.minibatches_per_update = cfg.num_epochs, cfg.num_epochs * cfg.num_minibatches
        self.params = [p for p in policy.parameters() if p.requires_grad]
        clip_groups = policy.gradient_groups() if cfg.grad_clip == "per_network" else None
        self.optim = PolicyOptimizer(self.params, cfg, perf, device, dist, clip_groups, hidden_matrices(policy))
        with allocating(STORAGE_MEMORY):
            self.storage = RolloutStorage(cfg.steps_per_env, num_envs, policy.actor_obs_dim, critic_dim, action_spec,
                                          policy.head.num_params, device)
        self._next_actor_obs = (torch.zeros(num_envs, policy.actor_obs_dim, device=device)
                                if policy.assembles_actor_obs else None)
        """Where a policy that assembles its observation builds the next one for its normalizers."""
        self._done = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self.reward_scale = reward_scale(cfg, num_envs, device)
        aux = getattr(policy, "auxiliary_loss", None)
        self.reconstruction_weight = float(getattr(getattr(policy, "cfg", None), "reconstruction_weight", 0.0))
        self.auxiliary_loss = aux if aux is not None and self.reconstruction_weight > 0 else None
        """The policy's own extra loss (the token policy's reconstruction, with its weight), added to PPO's."""
        extra = (("reconstruction_loss",) if self.auxiliary_loss is not None else ()) + (
            ("symmetry_loss",) if symmetry is not None else ())
        self.stat_names = (*UPDATE_STATS[:-1], *extra, UPDATE_STATS[-1])
        self.stats = torch.zeros(len(self.stat_names), device=device)
        self.host_loss_sums: list[float] | None = None if perf.device_loss_stats else [0.0] * RSL_RL_LOGGED
        """`device_loss_stats` off: the logged losses summed on the host, as rsl_rl sums them."""

        use_cuda_graphs(perf, device)  # rejects cuda_graphs=on off a GPU
        rows = [view for row in self.storage.rows for view in row]  # each step's graph writes its row's views
        outs = [] if self._next_actor_obs is None else [self._next_actor_obs]
        self._staged: StepRow | None = None
        """With CUDA graphs and storage rows whose start is not 16-byte aligned (`num_envs` times a column's bytes per
        env not a multiple of 16, e.g. an odd env count): the one aligned row the step graphs write, copied into the
        step's row eagerly (CUDA graph trees take an unaligned input as not static, and skip a graph that writes
        one)."""
        if unaligned_for_cuda_graphs(perf, device, rows):
            self._staged = StepRow(*(torch.zeros_like(view) for view in self.storage.rows[0]))
            rows = list(self._staged)
        self._staged_episodes: Tensor | None = None
        """Likewise for the observer's episode row of a step (made at its first step: the observer comes later)."""
        self._act_step = hot(self.act_step, perf, device, static=rows + outs)
        self._record_step = hot(self.record_step, perf, device, static=[*rows, *outs, self._done])
        self._gae = compute_gae if dist is not None else hot(compute_gae, perf, device,
                                                             static=(self.storage.advantages, self.storage.returns))
        """With several processes the advantage statistics need a collective: GAE then stays eager."""
        self.losses = hot(self.minibatch_losses, perf, device)
        """`minibatch_losses`, or its compiled graph (`PerfConfig.compile`); its backward is compiled with it."""
        self.whole_step: MinibatchStep[Batch] | None = None
        """`compile=step`: the whole minibatch update as one function (`syncfree.algo.minibatch_step`)."""
        fallback = self.whole_step_fallback() if perf.compile == "step" else None
        if fallback is not None:
            log.info("perf.compile=step: the minibatch update is compiled as with perf.compile=hot (%s)", fallback)
        elif perf.compile == "step":
            adapt = self.optim.next_learning_rate if self.optim.adapt_per_minibatch else None
            optimizer = cast(torch.optim.AdamW, self.optim.optimizer)  # `whole_step_fallback`: AdamW's only
            self.whole_step = MinibatchStep(policy, self.minibatch_losses, optimizer, cfg.max_grad_norm,
                                            adapt, skip_nonfinite=perf.grad_finite_from_norm is True,
                                            clip_groups=self.optim.clip_groups)
            self._whole_step = hot(self.whole_step, perf, device)

    # -- the class's side: building, evaluating, the switches' scope ---------------------------------------------

    @classmethod
    def build(cls, cfg: PPOTrainConfig, env: VecEnv, device: torch.device, dist: Collective | None = None,
              read_checkpoint: CheckpointReader | None = None) -> FeedForwardPPO:
        with allocating(POLICY_MEMORY):
            policy = cls.build_policy(cfg, env).to(device)
        set_autocast(policy, cfg.perf.autocast, device)
        return cls(policy, cfg.ppo, cfg.perf, env.num_envs, obs_dim(env, "critic"), env.action_spec, device, dist=dist,
                   symmetry=build_symmetry(cfg, env, policy), rnd=build_rnd(cfg, env, device, dist))

    @classmethod
    def build_policy(cls, cfg: PPOTrainConfig, env: EnvShape) -> PolicyBase:
        """`policy.kind`: `mlp` (`ActorCritic`) or `token` (`TokenActorCritic`, on the `tokenizer/` groups of a
        task that has them, g1-track)."""
        critic_dim = obs_dim(env, "critic")
        if cfg.policy.kind == "mlp":
            return ActorCritic(obs_dim(env, cfg.policy.actor_obs), critic_dim, env.action_spec, cfg.policy,
                               validate_distributions=cfg.perf.validate_distributions,
                               critic_chunk_size=cfg.perf.critic_chunk_size)
        if cfg.policy.actor_obs != "policy":
            raise UserError(f"policy.actor_obs={cfg.policy.actor_obs}: only the MLP actor (policy.kind=mlp) reads "
                            "another group than policy")
        if cfg.policy.layer_norm:
            raise UserError(f"policy.layer_norm={cfg.policy.layer_norm} is invalid with policy.kind="
                            f"{cfg.policy.kind}: only the MLP policies have layer norms (the token policy's networks "
                            "are policy.token.*)")
        tokenizer = any(k.startswith("tokenizer/") for k in env.obs_shapes)
        if not isinstance(cfg.policy, TokenPolicyConfig) or env.action_spec.kind != "continuous" or not tokenizer:
            raise UserError(f"policy.kind={cfg.policy.kind}: task {cfg.task!r} has no tokenizer observations or no "
                            "continuous actions (use it with g1-track)")
        try:
            layout = default_layout(env.obs_shapes, cfg.policy.token)
            return TokenActorCritic(layout, critic_dim, env.action_spec, cfg.policy.token,
                                    validate_distributions=cfg.perf.validate_distributions,
                                    cache_encoded_outputs=cfg.perf.cache_encoded_outputs,
                                    cache_full_latent=cfg.perf.cache_full_latent,
                                    critic_chunk_size=cfg.perf.critic_chunk_size)
        except ValueError as e:
            raise UserError(f"policy.token: {e}") from None

    @staticmethod
    @torch.inference_mode()
    def evaluate(policy: PolicyBase, env: VecEnv, greedy: bool = True) -> np.ndarray:
        """The return of each env's first episode under the policy's deterministic action (mean or argmax;
        `greedy`) or actions drawn from its distribution, as the rollout draws them."""
        def sampled(actor_obs: Tensor) -> Tensor:
            return policy.head.sample(policy.dist_params(actor_obs))[0]

        act = policy.act_deterministic if greedy else sampled
        return first_episode_returns(env, lambda obs: act(policy.actor_input(obs)))

    @classmethod
    def scope(cls, cfg: PPOTrainConfig, device_type: str, world_size: int, env_layer: bool) -> Scope:
        p, rows = cfg.ppo, cfg.env.rows()
        largest = max(rows, rows * p.steps_per_env // max(p.num_minibatches, 1))  # a rollout step, a minibatch
        return Scope(token_policy=cfg.policy.kind == "token", env_layer=env_layer, device=device_type,
                     adaptive_lr=p.schedule == "adaptive", world_size=world_size, critic_rows=largest,
                     policy_rows=largest, auto_precision_modules=cfg.policy.kind == "token" or auto_lowers_mlps(
                         [*cfg.policy.actor_hidden, *cfg.policy.critic_hidden], largest))

    def obs_dims(self, env: EnvShape) -> dict[str, int]:
        return {"policy": self.policy.actor_obs_dim, "critic": obs_dim(env, "critic")}

    def forward_only(self, obs: dict[str, Tensor]) -> Callable[[], list[Tensor]]:
        act = hot(self.policy.act, self.perf, self.device)
        actor_obs, critic_obs = self.policy.actor_input(obs).clone(), obs["critic"].clone()
        # each step's actions are copied out, as `act` stores them: a CUDA graph replay overwrites its outputs
        return lambda: [act(actor_obs, critic_obs).actions.clone() for _ in range(self.steps_per_env)]

    def rollout_forward(self, obs: dict[str, Tensor]) -> None:
        self.policy.act(self.policy.actor_input(obs), obs["critic"])

    def first_minibatch_loss(self) -> Tensor:
        data = self.storage.flat()
        size = data[0].shape[0] // self.cfg.num_minibatches
        return self.minibatch_losses(Batch(*(x[:size] for x in data)))[0]

    # -- rollout -------------------------------------------------------------------------------------------

    def act(self, obs: dict[str, Tensor], t: int) -> Tensor:
        row = self.storage.rows[t]
        if self.perf.compile != "off":  # one graph: the phases inside it are not timed apart
            with self.phases("act"):
                return self._act_step(obs, row if self._staged is None else self._staged)
        return self.act_step(obs, row, self.phases)

    def record(self, t: int, step: StepResult) -> None:
        row, observer = self.storage.rows[t], self.observer
        observed = observer.rows(t) if observer is not None and observer.fused else None
        if self.perf.compile != "off":  # one graph: bootstrap values, normalizers, storage, the observer's bookkeeping
            with self.phases("stats"):
                if self._staged is None:
                    self._record_step(step, row, observed)
                else:
                    self.record_staged(step, row, observed, self._staged)
        else:
            self.record_step(step, row, observed, self.phases)
        if observer is not None and observed is None:  # the conventional monitors read the host: outside the step
            with self.phases("stats"):
                observer.record(t, step)

    def record_staged(self, step: StepResult, row: StepRow, observed: tuple[Tensor, ...] | None,
                      staged: StepRow) -> None:
        """`_record_step` on the staged rows, then the step's rows copied from them (`_staged`)."""
        written = list(zip(row, staged, strict=True))
        if observed is not None:
            if self._staged_episodes is None:
                self._staged_episodes = torch.zeros_like(observed[0])
                mark_static(self.perf, self.device, self._staged_episodes)
            written.append((observed[0], self._staged_episodes))
            observed = (self._staged_episodes, *observed[1:])  # the step's index is only read
        self._record_step(step, staged, observed)
        for stored, value in written:
            stored.copy_(value)

    def act_step(self, obs: dict[str, Tensor], row: StepRow, phase: Phases = UNTIMED) -> Tensor:
        """Normalize, act, sample and store the policy's side of one step; returns the actions. The same function
        runs eagerly (its parts timed or counted as the `act` and `store` phases) and, with `perf.compile`, as one
        graph (`_act_step`, with no phases inside)."""
        with phase("act"):
            actor_obs = self.policy.actor_input(obs, out=row.actor_obs if self._next_actor_obs is not None else None)
            act = self.policy.act(actor_obs, obs["critic"])
        with phase("store"):
            store_policy(row, actor_obs, obs["critic"], act)
        return act.actions

    def record_step(self, step: StepResult, row: StepRow, observed: tuple[Tensor, ...] | None,
                    phase: Phases = UNTIMED) -> None:
        """The bootstrap values of the episodes that ended, normalizer updates, the env's side of the storage and
        (given its rows) the observer's bookkeeping of one step; eagerly as the `act`, `normalizer`, `store` and
        `stats` phases, or as one graph (`_record_step`)."""
        with phase("act"), torch.no_grad():  # before the normalizers move: the value the policy had at the step
            bootstrap_values = self.final_values(step)
        with phase("normalizer"):
            self.update_normalizers(step.obs)
        with phase("store"):
            done = torch.logical_or(step.terminated, step.truncated, out=self._done)
            store_env(row, self.learned_reward(self.rewarded(step), done), done, step.truncated, self.cfg.gamma,
                      bootstrap_values)
        observer = self.observer
        if observed is not None and observer is not None:
            with phase("stats"):
                observer.record_rows(step, observed)

    def update_normalizers(self, obs: dict[str, Tensor]) -> None:
        self.policy.update_normalizers(self.policy.actor_input(obs, out=self._next_actor_obs), obs["critic"])

    def final_values(self, step: StepResult) -> Tensor | None:
        """Time-outs bootstrap from the value of the episode's last observation, when the env provides it."""
        if "final_obs" not in step.info:
            return None
        return self.policy.value(step.info["final_obs"]["critic"])

    def compute_returns(self, obs: dict[str, Tensor]) -> None:
        s = self.storage
        with self.phases("advantages"):
            last_values = self.policy.value(obs["critic"])
            dist = self.dist
            mean_std = None if dist is None else (lambda x: global_mean_std(x, dist))
            self._gae(s.rewards, s.values, s.dones, last_values, self.cfg.gamma, self.cfg.lam, s.advantages,
                      s.returns, mean_std=mean_std)

    # -- update --------------------------------------------------------------------------------------------

    def update(self, progress: float = 0.0) -> None:
        """Epochs x minibatches over the rollout."""
        cfg = self.cfg
        data = self.storage.flat()
        batch_size = data.returns.shape[0]
        minibatch_size = batch_size // cfg.num_minibatches
        self.stats.zero_()
        if self.host_loss_sums is not None:
            self.host_loss_sums = [0.0] * RSL_RL_LOGGED
        self.optim.begin_update(progress)
        rnd_obs = None
        if self.rnd is not None:
            self.rnd.begin_update()
            rnd_obs = data.actor_obs if self.rnd.group == "policy" else data.critic_obs
        state = None
        if self.whole_step is not None:
            state = self.whole_step.state(self.optim.lr, self.stats, self.optim.skipped_steps)
            mark_static(self.perf, self.device, *data, *state.params, *state.moments, *state.squares, *state.steps,
                        state.lr, state.stats, state.skipped)  # the rollout too: CUDA graph trees copy other inputs in at each replay
        for _ in range(cfg.num_epochs):
            order = self.minibatch_order(batch_size)
            for start in range(0, batch_size, minibatch_size):
                idx = order[start : start + minibatch_size]
                if state is not None:
                    with self.phases("update.step"):
                        self._whole_step(data, idx, state)
                        self.optim.track_skips()
                else:
                    self.minibatch_update(Batch(*(x[idx] for x in data)))
                if rnd_obs is not None:
                    with self.phases("update.optimizer"):  # the predictor's whole step
                        cast(RND, self.rnd).update(rnd_obs, idx)
        if state is not None and self.optim.adaptive and not self.optim.adapt_per_minibatch:
            # the whole-step graph summed the minibatch KLs into the statistics
            self.optim.record_kl(self.stats[self.stat_names.index("approx_kl")], cfg.num_epochs * cfg.num_minibatches)
        self.optim.end_update()
        if rnd_obs is not None:
            cast(RND, self.rnd).module.update_normalizer(rnd_obs)
        if self.host_loss_sums is not None:  # the host's sums join the device statistics (no host read)
            self.stats[:RSL_RL_LOGGED].copy_(torch.tensor(self.host_loss_sums))

    def statistics(self) -> dict[str, Tensor]:
        minibatches = self.cfg.num_epochs * self.cfg.num_minibatches
        means = self.stats / minibatches
        return {**dict(zip(self.stat_names, means.unbind(), strict=True)), **self.optim.statistics(),
                **self.rnd_statistics(minibatches)}

    def storage_tensors(self) -> list[Tensor]:
        return list(self.storage.state_tensors().values())

    def whole_step_fallback(self) -> str | None:
        """Why `compile=step` runs the minibatch update as `hot` does (None: it does not): the conventional
        paths of these switches, and the gradient all-reduce of several processes, sit between the backward and
        the optimizer step, on the host or in a collective."""
        if self.dist is not None:
            return "several processes (the gradient all-reduce)"
        if not isinstance(self.optim.optimizer, torch.optim.AdamW):
            return f"ppo.optimizer={self.cfg.optimizer}: the whole-step graph steps AdamW only"
        if not self.perf.device_loss_stats:
            return "perf.device_loss_stats=false"
        if self.optim.adaptive and not self.perf.device_adaptive_lr:
            return "perf.device_adaptive_lr=false"
        if self.perf.grad_finite_from_norm == SEED_BEFORE:
            return "perf.grad_finite_from_norm=seed_before (a host read per gradient)"
        return None

    def minibatch_order(self, batch_size: int) -> Tensor:
        """The order in which an epoch visits the rollout's samples (consecutive slices are the minibatches).

        With several processes each rank permutes its own rollout, so a minibatch is `world_size` random
        slices, one per rank, rather than one random slice of the combined rollout: the same distribution
        of minibatches, not the same draws."""
        return torch.randperm(batch_size, device=self.device)

    def minibatch_update(self, mb: Batch) -> None:
        with self.phases("update.forward"):
            loss, parts, kl_mean = self.losses(mb)
        self.backward_and_step(loss, parts, kl_mean)

    def add_statistics(self, parts: Sequence[Tensor], grad_norm: Tensor) -> None:
        if self.host_loss_sums is None:
            super().add_statistics(parts, grad_norm)
            return
        for i, part in enumerate(parts[:RSL_RL_LOGGED]):  # rsl_rl: `mean_value_loss += value_loss.item()`, ...
            self.host_loss_sums[i] += part.item()
        with torch.no_grad():
            self.stats[RSL_RL_LOGGED:].add_(torch.stack((*parts[RSL_RL_LOGGED:], grad_norm)))

    def minibatch_losses(self, mb: Batch) -> tuple[Tensor, tuple[Tensor, ...], Tensor]:
        """The loss to minimize; its parts (surrogate, value loss, entropy, KL, clip fraction, the reconstruction
        error before its weight when the policy has that loss, the mirror loss with `symmetry` on) without gradient;
        the mean KL. A pure function of the minibatch and the parameters (compiled when asked). With
        `symmetry.augment` the surrogate and value losses average over the minibatch and its reflection."""
        cfg, original = self.cfg, mb
        augment = self.symmetry is not None and self.symmetry.augment
        if augment:  # the reflection's rows follow the originals' (the KL and entropy: the originals only)
            mb = cast(Symmetry, self.symmetry).augmented(mb)
        ev = self.policy.evaluate(mb.actor_obs, mb.critic_obs, mb.actions)
        rows = original.actions.shape[0]
        dist_params, entropies = (ev.dist_params[:rows], ev.entropy[:rows]) if augment else (ev.dist_params, ev.entropy)
        with torch.no_grad():
            kl_mean = self.policy.head.kl(mb.old_dist_params, dist_params).mean()
        ratio = torch.exp(ev.log_prob - mb.old_log_prob)
        surrogate = torch.max(-mb.advantages * ratio,
                              -mb.advantages * ratio.clamp(1.0 - cfg.clip_param, 1.0 + cfg.clip_param)).mean()
        if cfg.clipped_value_loss:
            clipped = mb.old_values + (ev.value - mb.old_values).clamp(-cfg.clip_param, cfg.clip_param)
            value_loss = torch.max((ev.value - mb.returns).square(), (clipped - mb.returns).square()).mean()
        else:
            value_loss = (ev.value - mb.returns).square().mean()
        entropy = entropies.mean()
        loss = surrogate + cfg.value_loss_coef * value_loss - cfg.entropy_coef * entropy
        with torch.no_grad():
            clip_fraction = ((ratio - 1.0).abs() > cfg.clip_param).float().mean()
        parts: tuple[Tensor, ...] = (surrogate.detach(), value_loss.detach(), entropy.detach(), kl_mean, clip_fraction)
        if self.auxiliary_loss is not None:
            auxiliary = self.auxiliary_loss(original.actor_obs)
            loss = loss + auxiliary
            parts = (*parts, auxiliary.detach() / self.reconstruction_weight)
        if self.symmetry is not None:
            mirror_loss = self.symmetry.mirror_loss(self.policy, original.actor_obs, ev.dist_params)
            if self.symmetry.trains_mirror_loss:
                loss = loss + self.symmetry.mirror_loss_coef * mirror_loss
            parts = (*parts, mirror_loss.detach())
        return loss, parts, kl_mean


ALGORITHMS = (FeedForwardPPO,)
"""Registered by `syncfree.algo` (`--algorithm ppo`)."""
