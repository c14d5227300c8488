"""PPO with truncated backpropagation through time on many agents: the gridworld pipeline (grid-arena's recurrent
token policy), and `policy.kind=recurrent` on any task of flat observations (the recurrent MLP policy,
`syncfree.policy.recurrent_mlp`).

Each iteration collects `steps_per_env` steps of every agent into a `[segments, bptt_horizon]` buffer (each agent
fills consecutive rows; the recurrent state an agent carried into a row is snapshotted with it), computes
advantages over the rows (GAE, or V-trace recomputed every epoch from the latest ratios), and trains on whole rows
replayed from their snapshots, with the losses `losses.*` enable (`syncfree.algo.losses`).

The rules of the hot loop hold: no host read per rollout step or minibatch on the training side (a CPU simulator
such as MettaGrid is the env boundary: its step copies the actions to the host and the observations back,
explicitly).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from syncfree.algo.base import Algorithm, CheckpointReader, evaluation_steps, reward_scale
from syncfree.algo.configs import RecurrentPPOTrainConfig
from syncfree.algo.losses import LossInputs, build_losses, needed_fields, needs_full_log_probs, teacher_fields
from syncfree.algo.optim import Collective, PolicyOptimizer, hidden_matrices
from syncfree.algo.rnd import RND, build_rnd
from syncfree.algo.segments import Minibatch, SegmentBuffer, prioritized_beta
from syncfree.algo.settings import LossesConfig, PPOConfig, RecurrentPPOConfig
from syncfree.algo.symmetry import Symmetry, build_symmetry
from syncfree.algo.vtrace import vtrace_advantages
from syncfree.core.compile import hot, outputs_overwritten
from syncfree.core.fields import Field
from syncfree.core.phases import Phases
from syncfree.core.switches import PerfConfig, Scope
from syncfree.envs.api import StepResult, VecEnv
from syncfree.errors import POLICY_MEMORY, STORAGE_MEMORY, UserError, allocating
from syncfree.policy.actor_critic import auto_lowers_mlps, set_autocast
from syncfree.policy.build import EnvShape, obs_dim
from syncfree.policy.recurrent import EMPTY_TOKEN, RecurrentTokenPolicy, SequenceEvaluation, StepOutput
from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy
from syncfree.policy.settings import RecurrentMLPPolicyConfig, RecurrentTokenPolicyConfig

log = logging.getLogger("syncfree")

TRAINING_STATS = ("grad_norm",)
"""Logged after the losses' own statistics; then `skipped_steps`, `learning_rate` and `reward_per_agent_step`."""

RecurrentPolicy = RecurrentTokenPolicy | RecurrentMLPPolicy
"""The policies this algorithm trains: on MettaGrid tokens, or on any task's flat observation groups. Both answer
the same calls; their observation is a tensor of tokens or a pair of groups (`rollout_input`, `sequence_input`)."""

StepFn = Callable[..., tuple[StepOutput, tuple[Tensor, ...]]]
"""Either policy's `step` (its first argument the policy's own observation, see `RecurrentPolicy`)."""

Teacher = Callable[[Tensor], Tensor]
"""A scripted teacher: observation tokens [agents, tokens, 3] -> its actions [agents] (int64)."""


class RecurrentPPO(Algorithm):
    """PPO on BPTT segments for a `RecurrentTokenPolicy` acting for `num_agents` agents.

    `losses` picks the losses and their weights; `teacher` is a frozen policy (the `kickstarter` and
    `behavior_cloning` losses read its full log-probabilities, `kickstarter_value` its values), `env_teacher` a
    scripted teacher (the `supervised` loss imitates its actions). With several processes (`dist`) each rank
    trains on its own agents' rows and the gradients are averaged over ranks before every step."""

    policy: RecurrentPolicy

    def __init__(self, policy: RecurrentPolicy, cfg: RecurrentPPOConfig, losses: LossesConfig, perf: PerfConfig,
                 num_agents: int, obs_shapes: dict[str, tuple[int, ...]], device: torch.device,
                 teacher: RecurrentTokenPolicy | None = None, env_teacher: Teacher | None = None,
                 dist: Collective | None = None, rnd: RND | None = None, symmetry: Symmetry | None = None) -> None:
        self.policy, self.cfg, self.perf, self.device = policy, cfg, perf, device
        self.rnd = rnd
        self.symmetry = symmetry
        """Mirror symmetry (the recurrent MLP policy): the rollout carries the state of each agent's mirrored history
        beside its own, and each minibatch replays the mirrored rows from it (augmentation, the mirror loss)."""
        self.teacher, self.env_teacher = teacher, env_teacher
        self.phases = Phases()
        self.steps_per_env, self.num_envs = cfg.steps_per_env, num_agents
        self.max_skipped_updates = cfg.max_skipped_updates
        self.epochs, self.minibatches_per_update = cfg.num_epochs, cfg.num_epochs * cfg.num_minibatches
        self.losses = build_losses(losses, cfg)
        self.stat_names = (tuple(name for _, loss in self.losses for name in loss.stats)
                           + (("symmetry_loss",) if symmetry is not None else ()) + TRAINING_STATS)
        # the token policy's actor and critic share the encoder and the core: clipped globally (`ppo.grad_clip`)
        per_network = isinstance(policy, RecurrentMLPPolicy) and cfg.grad_clip == "per_network"
        clip_groups = policy.gradient_groups() if isinstance(policy, RecurrentMLPPolicy) and per_network else None
        self.optim = PolicyOptimizer([p for p in policy.parameters() if p.requires_grad], cfg, perf, device, dist,
                                     clip_groups, hidden_matrices(policy))
        """The optimizer, gradient clipping, non-finite step skipping and learning-rate schedule."""

        num_actions = policy.num_actions
        fields = {**policy.observation_fields(obs_shapes), "actions": policy.action_field(),
                  "log_prob": Field((), torch.float32), "values": Field((), torch.float32),
                  "rewards": Field((), torch.float32), "dones": Field((), torch.bool)}
        if policy.last_action is not None:
            fields["last_actions"] = Field((), torch.int64)
        if cfg.advantage == "vtrace":
            fields["ratio"] = Field((), torch.float32)
        if policy.emit_full_log_probs:  # the behaviour policy's full distribution, kept with the step (what the gate saves)
            fields["full_log_probs"] = Field((num_actions,), torch.float32)
        fields.update({k: v for k, v in teacher_fields(num_actions).items() if k in needed_fields(self.losses)})
        segments = num_agents * (cfg.steps_per_env // cfg.horizon())
        with allocating(STORAGE_MEMORY):
            snapshots = policy.state_size * (2 if symmetry is not None else 1)  # with symmetry: the mirrored state
            self.buffer = SegmentBuffer(fields, segments, cfg.horizon(), num_agents, [(policy.hidden,)] * snapshots,
                                        device, cpu_time_index=perf.cpu_time_index,
                                        preallocated_last_actions=perf.preallocated_last_actions,
                                        cached_minibatch_indices=perf.cached_minibatch_indices)
        self.returns = torch.zeros_like(self.buffer.advantages)
        self.reward_scale = reward_scale(cfg, num_agents, device)
        self.reward_total = torch.zeros((), device=device)
        """The env reward of the iteration's rollout, summed over agents and steps."""
        self.over_max_tokens = torch.zeros((), device=device)
        """Observations of the rollout with more valid tokens than the policy reads (their excess goes unread)."""
        stored_tokens = policy.stored_tokens(obs_shapes) if isinstance(policy, RecurrentTokenPolicy) else None
        self._first_unread = stored_tokens if stored_tokens is not None and stored_tokens < obs_shapes["policy"][0] \
            else None
        """The first token the policy does not read (tokens are packed: valid there means some are unread)."""
        self._unread = torch.zeros(num_agents, dtype=torch.bool, device=device)
        self._unread_count = torch.zeros((), dtype=torch.int64, device=device)
        """Per-step buffers of the count above: counting allocates nothing in the rollout step."""
        self.stats = torch.zeros(len(self.stat_names), device=device)
        self._everyone = slice(0, num_agents)
        self._ones = torch.ones(num_agents, device=device)
        self._bootstrap = torch.zeros(num_agents, device=device)
        self._values = torch.zeros(num_agents, device=device)
        """The values of the step's observations, kept from `act` for the time-outs `record` bootstraps."""
        self.state_in_place = outputs_overwritten(perf, device)
        """Under CUDA graphs, which overwrite a graph's outputs at its next replay, each step's new state (and value)
        is copied into the tensors below once stored, and the next step reads them where they stay (static);
        otherwise the step's outputs become the state, as rsl_rl carries it."""
        # the states the compiled step returns are inference tensors: so are the first ones (one graph for both)
        with allocating(STORAGE_MEMORY), torch.inference_mode(not self.state_in_place):
            self.state = policy.initial_state(num_agents, device)
            """The recurrent state each agent carries into its next step."""
            self.mirror_state = policy.initial_state(num_agents, device) if symmetry is not None else ()
            """The state the policy would have had, had it seen each agent's mirrored history (`symmetry`)."""
        self.done = torch.ones(num_agents, dtype=torch.bool, device=device)
        """Whether each agent's next step starts an episode (written in place by `record`)."""
        self.reward_in = torch.zeros(num_agents, device=device)
        """The reward that led to the current observation (stored with it: the row convention of `vtrace`)."""
        self.policy_step: StepFn = hot(policy.step, perf, device, static=(*self.state, *self.mirror_state, self.done))
        """The policy's rollout step (encoder, core, heads, sampling), or its compiled graph (`perf.compile`)."""
        self._loss = hot(self.minibatch_loss, perf, device)
        """`minibatch_loss`, or its compiled graph; its backward is compiled with it."""
        self._mirror_step = hot(self.mirror_step, perf, device)
        """`mirror_step`, or its compiled graph (with `symmetry`)."""
        if perf.compile == "step":
            log.info("perf.compile=step: the recurrent minibatch update is compiled as with perf.compile=hot (its "
                     "forward, losses and backward; the whole-step graph with AdamW exists for the feed-forward "
                     "algorithm only)")
        self.reset_episodes()

    # -- the class's side: building, evaluating, the switches' scope ---------------------------------------------

    name = "recurrent-ppo"
    chosen_by_policy_kind = "recurrent"
    description = "PPO on BPTT segments: recurrent policies (policy.kind=recurrent chooses it)"
    label = "recurrent PPO"
    family = "ppo"
    config_type = RecurrentPPOTrainConfig

    @classmethod
    def build(cls, cfg: RecurrentPPOTrainConfig, env: VecEnv, device: torch.device, dist: Collective | None = None,
              read_checkpoint: CheckpointReader | None = None) -> RecurrentPPO:
        """Also the teachers: a checkpoint's policy (`losses.teacher`, read with `read_checkpoint`) and the
        env's scripted one (`losses.supervised`)."""
        with allocating(POLICY_MEMORY):
            policy = cls.build_policy(cfg, env).to(device)
        set_autocast(policy, cfg.perf.autocast, device)
        teacher = None
        if cfg.losses.teacher:
            if read_checkpoint is None:
                raise UserError("losses.teacher: no way to read checkpoints was given")
            teacher = cls.load_teacher(cfg.losses.teacher, env, read_checkpoint).to(device)
        return cls(policy, cfg.ppo, cfg.losses, cfg.perf, env.num_envs, env.obs_shapes, device, teacher=teacher,
                   env_teacher=scripted_teacher(env) if cfg.losses.supervised > 0 else None, dist=dist,
                   rnd=build_rnd(cfg, env, device, dist), symmetry=build_symmetry(cfg, env, policy))

    @classmethod
    def build_policy(cls, cfg: RecurrentPPOTrainConfig, env: EnvShape,
                     emit_full_log_probs: bool | None = None) -> RecurrentPolicy:
        """The recurrent MLP policy of `policy.rnn` on flat observations (`RecurrentMLPPolicyConfig`), or the
        recurrent token policy of `policy.recurrent`, on token observations and discrete actions; the token policy
        emits full log-probabilities when its losses need them (`emit_full_log_probs`, by default from `cfg`)."""
        if cfg.policy.actor_obs != "policy":
            raise UserError(f"policy.actor_obs={cfg.policy.actor_obs}: the recurrent policies read the policy group "
                            "(only the feed-forward MLP actor reads another)")
        if isinstance(cfg.policy, RecurrentMLPPolicyConfig):
            return RecurrentMLPPolicy(obs_dim(env, "policy"), obs_dim(env, "critic"), env.action_spec, cfg.policy)
        if not isinstance(cfg.policy, RecurrentTokenPolicyConfig) or env.action_spec.kind != "discrete" or len(
                env.obs_shapes.get("policy", ())) != 2:
            raise UserError(f"policy.kind=recurrent: task {cfg.task!r} has no token observations or no discrete "
                            "actions")
        if emit_full_log_probs is None:
            emit_full_log_probs = cls.full_log_probs_needed(cfg.losses, cfg.ppo, cfg.perf)
        r = cfg.policy.recurrent
        return RecurrentTokenPolicy(env.action_spec.size, embed_dim=r.embed_dim, encoder_hidden=r.encoder_hidden,
                                    hidden=r.hidden, max_tokens=r.max_tokens or None,
                                    emit_full_log_probs=emit_full_log_probs, core=r.core,
                                    last_action_input=r.last_action_input,
                                    embedding_tables=cfg.perf.token_embedding_tables,
                                    sparse_max=cfg.perf.sparse_token_max)

    @classmethod
    def load_teacher(cls, path: str, env: EnvShape, read_checkpoint: CheckpointReader) -> RecurrentTokenPolicy:
        """The recurrent policy of the checkpoint at `path`, frozen, emitting its full log-probabilities."""
        cfg, state = read_checkpoint(path)
        if not isinstance(cfg, RecurrentPPOTrainConfig):
            raise UserError(f"losses.teacher: {path} was trained by {cfg.algorithm}, not recurrent-ppo: its policy is "
                            "not a recurrent one")
        if tuple(state["action_spec"]) != (env.action_spec.kind, env.action_spec.size):
            raise UserError(f"losses.teacher: {path} acts in {tuple(state['action_spec'])} but this env has "
                            f"{(env.action_spec.kind, env.action_spec.size)}")
        teacher = cls.build_policy(cfg, env, emit_full_log_probs=True)
        if not isinstance(teacher, RecurrentTokenPolicy):
            raise UserError(f"losses.teacher: {path} holds a recurrent MLP policy; the teacher losses read a recurrent "
                            "token policy")
        teacher.load_state_dict(state["policy"])
        return teacher.eval().requires_grad_(False)

    @staticmethod
    @torch.inference_mode()
    def evaluate(policy: RecurrentPolicy, env: VecEnv, greedy: bool = True) -> np.ndarray:
        """The return of each agent's first episode (every row of `env`), acting with the most likely action
        (`greedy`) or sampling."""
        n = env.num_envs
        obs = env.reset()
        state = policy.initial_state(n, env.device)
        done = torch.ones(n, dtype=torch.bool, device=env.device)
        last = torch.zeros(n, dtype=torch.int64, device=env.device)
        first_return = torch.full((n,), float("nan"), device=env.device)
        finished = torch.zeros(n, dtype=torch.bool, device=env.device)
        step_fn: StepFn = policy.step
        for _ in evaluation_steps(env, finished):
            out, state = step_fn(policy.rollout_input(obs), state, done,
                                 last if policy.last_action is not None else None, greedy=greedy)
            step = env.step(out.actions)
            done = step.terminated | step.truncated
            first_return = torch.where(done & ~finished, step.info["episode_return"], first_return)
            finished |= done
            obs, last = step.obs, out.actions
        return first_return.cpu().numpy()

    @classmethod
    def scope(cls, cfg: RecurrentPPOTrainConfig, device_type: str, world_size: int, env_layer: bool) -> Scope:
        p = cfg.ppo  # rows are agents; the critic is not chunked here anyway
        flat = not isinstance(cfg.policy, RecurrentTokenPolicyConfig)
        agents = cfg.env.rows()
        largest = max(agents, agents * p.steps_per_env // max(p.num_minibatches, 1))  # a step, a minibatch's rows
        return Scope(flat_rollouts=False, whole_step_update=False, chunked_critic=False,
                     segment_buffer=True, full_log_probs=not flat,
                     env_layer=env_layer, device=device_type,
                     adaptive_lr=p.schedule == "adaptive", world_size=world_size, critic_rows=cfg.env.rows(),
                     full_log_probs_needed=needs_full_log_probs(build_losses(cfg.losses, p)),
                     sequential_minibatches=p.minibatch_sampler == "sequential" or p.prio_alpha <= 0,
                     token_sets=not flat,
                     policy_rows=largest,  # the token encoder stays float32 under `auto`
                     auto_precision_modules=flat and auto_lowers_mlps(
                         [*cfg.policy.actor_hidden, *cfg.policy.critic_hidden], largest))

    def obs_dims(self, env: EnvShape) -> dict[str, Any]:
        if isinstance(self.policy, RecurrentMLPPolicy):
            return {"policy": self.policy.actor_obs_dim, "critic": self.policy.critic_obs_dim}
        return {"policy": list(env.obs_shapes["policy"])}

    def forward_only(self, obs: dict[str, Tensor]) -> Callable[[], list[Tensor]]:
        inputs = self.policy.rollout_input({k: v.clone() for k, v in obs.items()})
        done = self.done.clone()
        last_actions = (self.buffer.previous_actions(self._everyone).clone()
                        if "last_actions" in self.buffer.data else None)

        def rollout() -> list[Tensor]:  # each step from the agents' state, which it leaves as it is
            return [self.policy_step(inputs, self.state, done, last_actions)[0].actions.clone()
                    for _ in range(self.steps_per_env)]

        return rollout

    def rollout_forward(self, obs: dict[str, Tensor]) -> None:
        last = self.buffer.previous_actions(self._everyone) if "last_actions" in self.buffer.data else None
        step: StepFn = self.policy.step
        step(self.policy.rollout_input(obs), self.state, self.done, last)

    def first_minibatch_loss(self) -> Tensor:
        return self.minibatch_loss(self.minibatch(0, self.buffer.segments // self.cfg.num_minibatches, 1.0))[0]

    @staticmethod
    def full_log_probs_needed(losses: LossesConfig, cfg: PPOConfig, perf: PerfConfig) -> bool:
        """Whether the policy must emit full log-probabilities: some enabled loss reads them, or the gate is off."""
        return needs_full_log_probs(build_losses(losses, cfg)) or not perf.gate_full_log_probs

    def reset_episodes(self) -> None:
        """Zero the recurrent states and mark every agent's next step as an episode's first."""
        super().reset_episodes()
        n = self.num_envs
        with torch.inference_mode():
            torch._foreach_zero_([*self.state, *self.mirror_state])
        self.teacher_state = self.teacher.initial_state(n, self.device) if self.teacher is not None else None
        self.done.fill_(True)
        self.reward_in.zero_()

    # -- rollout -------------------------------------------------------------------------------------------

    def begin_rollout(self) -> None:
        super().begin_rollout()
        self.buffer.reset_for_rollout()
        self.reward_total.zero_()
        self.over_max_tokens.zero_()

    def act(self, obs: dict[str, Tensor], t: int) -> Tensor:
        buf, phase, policy = self.buffer, self.phases, self.policy
        with phase("act"):
            last_actions = buf.previous_actions(self._everyone) if "last_actions" in buf.data else None
            out, next_state = self.policy_step(policy.rollout_input(obs), self.state, self.done, last_actions)
            next_mirror_state: tuple[Tensor, ...] = ()
            if self.symmetry is not None:
                flat = cast(tuple[Tensor, Tensor], policy.rollout_input(obs))  # the recurrent MLP policy's pair
                next_mirror_state = self._mirror_step(flat, self.mirror_state, self.done)
            data = {**policy.stored_observation(obs), "actions": out.actions, "log_prob": out.log_prob,
                    "values": out.value, "rewards": self.reward_in, "dones": self.done}
            if last_actions is not None:
                data["last_actions"] = last_actions  # stored before `store` overwrites them with `actions`
            if out.full_log_probs is not None:
                data["full_log_probs"] = out.full_log_probs
            tokens = obs["policy"]
            self.teacher_step(tokens, data, last_actions)
            if self._first_unread is not None:
                torch.ne(tokens[:, self._first_unread, 0], EMPTY_TOKEN, out=self._unread)
                self.over_max_tokens.add_(torch.sum(self._unread, dim=0, out=self._unread_count))
        with phase("store"):
            if "ratio" in buf.data:
                data["ratio"] = self._ones
            buf.store(self._everyone, data, (*self.state, *self.mirror_state))
            if self.state_in_place:
                torch._foreach_copy_([*self.state, *self.mirror_state, self._values],
                                     [*next_state, *next_mirror_state, out.value])
            else:
                self.state, self.mirror_state, self._values = next_state, next_mirror_state, out.value
        return out.actions

    def record(self, t: int, step: StepResult) -> None:
        with self.phases("stats"):
            # time-outs bootstrap from the value before the step (MettaGrid gives no final observation)
            torch.logical_or(step.terminated, step.truncated, out=self.done)
            torch.mul(self._values, step.truncated, out=self._bootstrap)
            torch.add(self.learned_reward(self.rewarded(step), self.done), self._bootstrap, alpha=self.cfg.gamma,
                      out=self.reward_in)
            self.reward_total.add_(step.reward.sum())
        with self.phases("normalizer"):
            self.policy.update_normalizers(step.obs)
        with self.phases("stats"):
            if self.observer is not None:
                self.observer.record(t, step)

    def mirror_step(self, obs: tuple[Tensor, Tensor], state: tuple[Tensor, ...], done: Tensor) -> tuple[Tensor, ...]:
        """The mirrored history's state one step on: the cores stepped on the step's reflected observations."""
        mirror = cast(Symmetry, self.symmetry).mirror
        policy = cast(RecurrentMLPPolicy, self.policy)
        return policy.advance((mirror.observations("policy", obs[0]), mirror.observations("critic", obs[1])), state,
                              done)

    def teacher_step(self, tokens: Tensor, data: dict[str, Tensor], last_actions: Tensor | None) -> None:
        """The teachers' outputs for this step, for the fields some enabled loss reads."""
        fields, env_teacher = self.buffer.data, self.env_teacher
        if "teacher_actions" in fields and env_teacher is not None:
            data["teacher_actions"] = env_teacher(tokens)
        if self.teacher is not None and self.teacher_state is not None:
            out, self.teacher_state = self.teacher.step(tokens, self.teacher_state, self.done, last_actions)
            if "teacher_log_probs" in fields and out.full_log_probs is not None:  # a teacher emits them
                data["teacher_log_probs"] = out.full_log_probs
            if "teacher_values" in fields:
                data["teacher_values"] = out.value

    def compute_returns(self, obs: dict[str, Tensor]) -> None:
        """The first epoch's advantages (every row's last step has no successor in the row: `obs` is not read)."""
        with self.phases("advantages"):
            self.compute_advantages()

    def compute_advantages(self) -> None:
        p, d, buf = self.cfg, self.buffer.data, self.buffer
        ratio = d["ratio"] if p.advantage == "vtrace" else None
        vtrace_advantages(d["rewards"], d["values"], d["dones"], ratio, p.gamma, p.lam, p.vtrace_rho_clip,
                          p.vtrace_c_clip, out=buf.advantages)
        torch.add(buf.advantages, d["values"], out=self.returns)

    # -- update --------------------------------------------------------------------------------------------

    def minibatch(self, mb: int, count: int, beta: float) -> Minibatch:
        p = self.cfg
        if p.minibatch_sampler == "prioritized":
            return self.buffer.prioritized_minibatch(mb, count, p.prio_alpha, beta)
        return self.buffer.sequential_minibatch(mb, count)

    def update(self, progress: float = 0.0) -> None:
        """Epochs x minibatches of whole rows; `progress` (the fraction of the run done) anneals the prioritized
        sampler's importance-weight exponent."""
        p, phase, buf = self.cfg, self.phases, self.buffer
        count = buf.segments // p.num_minibatches
        beta = prioritized_beta(p.prio_beta0, progress)
        self.stats.zero_()
        self.optim.begin_update(progress)
        if self.rnd is not None:
            self.rnd.begin_update()
        for epoch in range(p.num_epochs):
            if epoch > 0 and p.advantage == "vtrace":
                with phase("advantages"), torch.no_grad():
                    self.compute_advantages()
            for mb in range(p.num_minibatches):
                with phase("update.forward"):
                    batch = self.minibatch(mb, count, beta)
                    loss, parts, kl_mean = self._loss(batch)
                self.backward_and_step(loss, parts, kl_mean)
                if self.rnd is not None:
                    with phase("update.optimizer"):  # the predictor's whole step, on the rows' observations
                        self.rnd.train(self.rnd_observations(batch.data))
        self.optim.end_update()
        if self.rnd is not None:
            self.rnd.module.update_normalizer(self.rnd_observations(self.buffer.data))

    def rnd_observations(self, data: dict[str, Tensor]) -> Tensor:
        """The RND group's observations of rows of the buffer (`data`: its fields, or a minibatch's), one per row
        and step: `[rows * steps, width]`."""
        group = cast(RND, self.rnd).group
        rows = data["obs" if group == "policy" else "critic_obs"]
        return rows.reshape(-1, rows.shape[-1])

    def minibatch_loss(self, batch: Minibatch) -> tuple[Tensor, list[Tensor], Tensor | None]:
        """The weighted sum of the enabled losses on a minibatch of rows, their statistics, and the approximate KL
        of the rows (for the adaptive schedule; None with a fixed one)."""
        d, state, rows = batch.data, batch.initial_state, batch.indices.shape[0]
        replay: Callable[..., SequenceEvaluation] = self.policy.evaluate_sequence
        returns, advantages, weights = self.returns.index_select(0, batch.indices), batch.advantages, batch.prio_weights
        symmetry, mirror_state = self.symmetry, cast(tuple[Tensor, ...], ())
        if symmetry is not None:
            state, mirror_state = state[: len(state) // 2], state[len(state) // 2:]
        if symmetry is not None and symmetry.augment:  # the mirrored rows after the originals, from their own state
            data = {**{k: torch.cat((v, v)) for k, v in d.items()}, **self.mirrored_rows(d, symmetry)}
            ev = replay(self.policy.sequence_input(data), data["actions"],
                        tuple(torch.cat((s, m)) for s, m in zip(state, mirror_state, strict=True)), data["dones"])
            inputs = LossInputs(ev, data, torch.cat((advantages, advantages)), torch.cat((returns, returns)),
                                torch.cat((weights, weights)))
        else:
            ev = replay(self.policy.sequence_input(d), d["actions"], state, d["dones"], d.get("last_actions"))
            inputs = LossInputs(ev, d, advantages, returns, weights)
        total: Tensor | None = None
        parts: list[Tensor] = []
        for weight, loss_fn in self.losses:
            value, stats = loss_fn(inputs)
            total = weight * value if total is None else total + weight * value
            parts.extend(stats)
        if symmetry is not None:
            mirror_loss = self.mirror_loss(d, state, mirror_state, symmetry)
            if symmetry.trains_mirror_loss:
                total = cast(Tensor, total) + symmetry.mirror_loss_coef * mirror_loss
            parts.append(mirror_loss.detach())
        kl_mean = None
        if "ratio" in self.buffer.data or self.optim.adaptive:
            with torch.no_grad():  # the original rows' (the KL and V-trace's ratios: of the behaviour's actions)
                log_ratio = ev.log_prob[:rows] - d["log_prob"]
                ratio = log_ratio.exp()
                if "ratio" in self.buffer.data:  # V-trace reads the latest policy's ratios at the next epoch
                    self.buffer.data["ratio"].index_copy_(0, batch.indices, ratio)
                if self.optim.adaptive:
                    kl_mean = ((ratio - 1.0) - log_ratio)[:, :-1].mean()
        return cast(Tensor, total), parts, kl_mean  # at least one loss is on (`LossesConfig.validate`)

    @staticmethod
    def mirrored_rows(d: dict[str, Tensor], symmetry: Symmetry) -> dict[str, Tensor]:
        """The rows' observations and actions, the originals followed by their reflections (`[2S, T, ...]`)."""
        def both(key: str, reflect: Callable[[Tensor], Tensor]) -> Tensor:
            x = d[key]
            return torch.cat((x, reflect(x.flatten(0, 1)).view_as(x)))

        m = symmetry.mirror
        return {"obs": both("obs", lambda x: m.observations("policy", x)),
                "critic_obs": both("critic_obs", lambda x: m.observations("critic", x)),
                "actions": both("actions", m.actions)}

    def mirror_loss(self, d: dict[str, Tensor], state: tuple[Tensor, ...], mirror_state: tuple[Tensor, ...],
                    symmetry: Symmetry) -> Tensor:
        """Mean over the rows' steps and action entries of (mean(pi(M h)) - M mean(pi(h)))^2, `h` a row's history and
        `M h` its reflection replayed from the mirrored history's state; the target carries no gradient. Detached
        unless the mirror loss trains."""
        policy = cast(RecurrentMLPPolicy, self.policy)
        actor = policy.actor_core.state_size
        obs, dones = d["obs"], d["dones"]
        means = policy.sequence_means(obs, state[:actor], dones)
        reflected = symmetry.mirror.observations("policy", obs.flatten(0, 1)).view_as(obs)
        on_mirrored = policy.sequence_means(reflected, mirror_state[:actor], dones)
        target = symmetry.mirror.actions(means.flatten(0, 1)).view_as(means).detach()
        loss = (on_mirrored - target).square().mean()
        return loss if symmetry.trains_mirror_loss else loss.detach()

    def storage_tensors(self) -> list[Tensor]:
        """The segment buffer (rows and scratch rows, state snapshots, advantages, last actions), the returns and
        the agents' recurrent states."""
        buf = self.buffer
        return [*buf._data.values(), *buf._states, buf.advantages, buf.last_actions, self.returns, *self.state,
                *self.mirror_state]

    def statistics(self) -> dict[str, Tensor]:
        means = self.stats / (self.cfg.num_epochs * self.cfg.num_minibatches)
        steps = self.cfg.steps_per_env * self.num_envs
        return {**dict(zip(self.stat_names, means.unbind(), strict=True)), **self.optim.statistics(),
                "reward_per_agent_step": self.reward_total.double() / steps,
                "obs_over_max_tokens": self.over_max_tokens.double() / steps,
                **self.rnd_statistics(self.cfg.num_epochs * self.cfg.num_minibatches)}


def scripted_teacher(env: VecEnv) -> Teacher:
    """The scripted teacher of the grid-arena `mines` map (the `supervised` loss imitates it)."""
    from syncfree.envs.adapters.mettagrid import MettaGridVecEnv  # imports mettagrid: only when asked for
    from syncfree.envs.adapters.mettagrid_teacher import MinesTeacher

    if not isinstance(env, MettaGridVecEnv):
        raise UserError(f"losses.supervised: {type(env).__name__} provides no scripted teacher (a MettaGrid env does)")
    return MinesTeacher.from_env(env)


ALGORITHMS = (RecurrentPPO,)
"""Registered by `syncfree.algo` (`--algorithm recurrent-ppo`)."""
