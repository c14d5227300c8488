"""Student-teacher distillation (`distill` settings) with rsl_rl 5.5's semantics (`rsl_rl.algorithms.Distillation`).

Rollout: the student (the run's policy) samples its actions from its Gaussian head, so the envs visit the states its
own mistakes lead to (DAgger); the frozen teacher's mean action on the same observation is stored beside the
student's observation. Update: `num_epochs` passes over the rollout's steps in order; the losses of `gradient_length`
consecutive steps (each the mean over envs and action entries of the MSE or Huber loss between the student's mean
action and the teacher's) are summed and take one Adam step. Steps left over at the end of an update count in the
logged loss only, as in rsl_rl. The student's observation normalizer is updated from the whole rollout after the
update, as rsl_rl does.

`perf.whole_chunk_distillation` (on): the `gradient_length` steps of one optimizer step are one forward and one loss
over all their rows (the sum of `gradient_length` means over equally many rows is `gradient_length` x the mean over
all of them); off: one forward and one loss per step, summed, as rsl_rl computes them.

The rollout step is a pure function of device tensors (`act_step`), compiled as one graph with `perf.compile`; so is
the loss of a chunk (or of a step). No host read in either; the logged loss stays on the device
(`perf.device_loss_stats`; off, it is read at every step, as rsl_rl reads it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, cast

import numpy as np
import torch
from torch import Tensor, nn

from syncfree.algo.base import Algorithm, CheckpointReader
from syncfree.algo.configs import DistillationTrainConfig, PPOTrainConfig, RecurrentDistillationTrainConfig
from syncfree.algo.feedforward import FeedForwardPPO
from syncfree.algo.optim import Collective, PolicyOptimizer, hidden_matrices
from syncfree.algo.recurrent import RecurrentPPO
from syncfree.algo.settings import DistillConfig, PPOConfig
from syncfree.config import TrainConfig
from syncfree.core.compile import hot, use_cuda_graphs
from syncfree.core.phases import UNTIMED, Phases
from syncfree.core.switches import PerfConfig, Scope
from syncfree.envs.api import StepResult, VecEnv
from syncfree.errors import POLICY_MEMORY, STORAGE_MEMORY, UserError, allocating
from syncfree.policy.actor_critic import ActorCritic, auto_lowers_mlps, set_autocast
from syncfree.policy.build import EnvShape, obs_dim
from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy
from syncfree.policy.settings import PolicyConfig, RecurrentMLPPolicyConfig

log = logging.getLogger("syncfree")

DISTILL_STATS = ("behavior_loss", "grad_norm")
"""`behavior_loss`: the mean over the update's steps of each step's loss (rsl_rl's `behavior`); `grad_norm`: the mean
over its optimizer steps of the gradient norm before clipping."""

LOSSES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "mse": nn.functional.mse_loss,
    "huber": nn.functional.huber_loss,
}
"""`distill.loss`: rsl_rl's `loss_type`s (each the mean over rows and action entries; Huber's delta is 1)."""


class DistillRow(NamedTuple):
    """Views of one rollout step in the storage (made once: a compiled step takes them as inputs)."""

    student_obs: Tensor
    teacher_actions: Tensor
    keep: Tensor | None = None
    """A recurrent student's: 0 where the step's observation starts an episode (its state is zeroed), else 1."""


class Chunk(NamedTuple):
    """The rollout steps of one optimizer step, or of the loss-only remainder: `steps` of them, read as the slice
    `start:start + steps` of the storage when they are consecutive there, else gathered by `gather` (a chunk that
    runs from one epoch's last steps into the next's first)."""

    steps: int
    start: int
    gather: Tensor | None


def chunks(total_steps: int, steps_per_env: int, gradient_length: int, device: torch.device) -> tuple[list[Chunk],
                                                                                                      Chunk | None]:
    """The optimizer steps' chunks of `total_steps` (`num_epochs * steps_per_env`) steps in order, and the remainder
    (fewer than `gradient_length` steps, counted in the logged loss only), if any. Step `i` of the update is rollout
    step `i % steps_per_env`."""
    def chunk(first: int, count: int) -> Chunk:
        start = first % steps_per_env
        if start + count <= steps_per_env:
            return Chunk(count, start, None)
        return Chunk(count, start, torch.arange(first, first + count, device=device) % steps_per_env)

    full = total_steps // gradient_length
    rest = total_steps - full * gradient_length
    return ([chunk(k * gradient_length, gradient_length) for k in range(full)],
            chunk(full * gradient_length, rest) if rest else None)


def load_teacher(path: str, env: EnvShape, read_checkpoint: CheckpointReader) -> ActorCritic:
    """The feed-forward MLP policy of the checkpoint at `path`, frozen; one line naming what does not fit this env
    (a field of the wrong type or shape too)."""
    try:
        cfg, state = read_checkpoint(path)
    except UserError as e:
        raise UserError(f"distill.teacher: {e}") from None
    where = f"distill.teacher: {path}"
    policy_cfg = getattr(cfg, "policy", None)
    if not isinstance(policy_cfg, PolicyConfig) or policy_cfg.kind != "mlp":
        raise UserError(f"{where} holds a policy of {cfg.algorithm} ({getattr(policy_cfg, 'kind', 'none')}); the "
                        "teacher is a feed-forward MLP policy")
    group = policy_cfg.actor_obs
    if group not in env.obs_shapes:
        raise UserError(f"{where} reads observation group {group!r}, which this env lacks "
                        f"(has {', '.join(env.obs_shapes)})")
    spec = (env.action_spec.kind, env.action_spec.size)
    widths = {"policy": obs_dim(env, group), "critic": obs_dim(env, "critic")}
    try:
        recorded_spec, recorded = tuple(state["action_spec"]), dict(state["obs_dims"])
    except (TypeError, ValueError):
        raise UserError(f"{where}: its action_spec or obs_dims is not what a checkpoint records") from None
    if recorded_spec != spec:
        raise UserError(f"{where} acts in {recorded_spec} but this env has {spec}")
    if recorded != widths:
        raise UserError(f"{where} was trained on observations of widths {recorded}; this env gives {widths} "
                        f"(the teacher reads {group!r})")
    teacher = FeedForwardPPO.build_policy(cast(PPOTrainConfig, cfg), env)
    assert isinstance(teacher, ActorCritic)  # policy.kind=mlp
    try:
        teacher.load_state_dict(state["policy"])
    except (RuntimeError, TypeError, AttributeError) as e:
        lines = str(e).strip().splitlines()
        detail = lines[1].strip() if len(lines) > 1 else lines[0]
        raise UserError(f"{where}: its policy does not fit its own config ({detail})") from None
    return teacher.eval().requires_grad_(False)


class Distillation(Algorithm):
    """The student (an `ActorCritic` whose critic is not trained) imitates `teacher` on `num_envs` envs."""

    name = "distillation"
    description = "student-teacher distillation into a feed-forward MLP student (distill.teacher: the teacher)"
    label = "distillation"
    family = "distillation"
    config_type: ClassVar[type[TrainConfig]] = DistillationTrainConfig
    learning_rate_key = "distill.learning_rate"
    skipped_updates_key = ""
    policy: Any
    """An `ActorCritic` here; a `RecurrentMLPPolicy` in `RecurrentDistillation`."""
    stat_names = DISTILL_STATS

    def __init__(self, policy: Any, teacher: ActorCritic, cfg: DistillConfig, steps_per_env: int,
                 perf: PerfConfig, num_envs: int, device: torch.device, dist: Collective | None = None) -> None:
        if policy.action_spec.kind != "continuous":
            raise UserError("distill: the student regresses the teacher's mean action; this task's actions are "
                            f"{policy.action_spec.kind} (continuous only)")
        self.policy, self.teacher, self.cfg, self.perf, self.device = policy, teacher, cfg, perf, device
        self.phases = Phases()
        self.steps_per_env, self.num_envs = steps_per_env, num_envs
        self.loss_fn = LOSSES[cfg.loss]
        self.params = [p for p in policy.gradient_groups()[0] if p.requires_grad]
        """The student's actor and its action distribution, not its critic (the Gaussian's deviation gets no gradient
        from the mean action's loss and stays as initialized, as in rsl_rl)."""
        optim_cfg = PPOConfig(learning_rate=cfg.learning_rate, schedule="fixed", weight_decay=0.0, grad_clip="global",
                              max_grad_norm=cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf,
                              optimizer=cfg.optimizer)
        self.optim = PolicyOptimizer(self.params, optim_cfg, perf, device, dist, matrices=hidden_matrices(policy),
                                     key="distill")
        """`distill.optimizer` (Adam by default: AdamW without weight decay) at a fixed rate; `max_grad_norm=0`: the
        norm is taken but not clipped."""
        size = policy.action_spec.size
        with allocating(STORAGE_MEMORY):
            self.student_obs = torch.zeros(steps_per_env, num_envs, policy.actor_obs_dim, device=device)
            self.teacher_actions = torch.zeros(steps_per_env, num_envs, size, device=device)
        self.rows = [DistillRow(self.student_obs[t], self.teacher_actions[t]) for t in range(steps_per_env)]
        """`rows[t]`: the views of step t."""
        total = cfg.num_epochs * steps_per_env
        self.chunks, self.remainder = chunks(total, steps_per_env, cfg.gradient_length, device)
        self.epochs, self.minibatches_per_update = cfg.num_epochs, len(self.chunks)
        if self.remainder is not None:
            log.warning(f"distill: num_epochs x steps_per_env = {total} is not a multiple of "
                          f"distill.gradient_length = {cfg.gradient_length}: the last {self.remainder.steps} steps of "
                          "each update count in the logged loss but take no optimizer step")
        self.stats = torch.zeros(len(self.stat_names), device=device)
        self.stat_counts = torch.tensor([float(total), float(max(len(self.chunks), 1))], device=device)
        """What each statistic is a mean over: the update's steps, its optimizer steps."""
        self.host_loss_sum: float | None = None if perf.device_loss_stats else 0.0
        """`device_loss_stats` off: the logged loss summed on the host, read at every step as rsl_rl reads it."""

        use_cuda_graphs(perf, device)  # rejects cuda_graphs=on off a GPU
        if perf.compile == "step":
            log.info("perf.compile=step: distillation's update is compiled as with perf.compile=hot")
        self._act_step = hot(self.act_step, perf, device)
        self._record_step = hot(self.record_step, perf, device)
        self.loss = hot(self.steps_loss, perf, device)
        """`steps_loss`, or its compiled graph (its backward compiled with it)."""

    # -- the class's side: building, evaluating, the switches' scope ---------------------------------------------

    @classmethod
    def build(cls, cfg: DistillationTrainConfig, env: VecEnv, device: torch.device, dist: Collective | None = None,
              read_checkpoint: CheckpointReader | None = None) -> Distillation:
        if read_checkpoint is None:
            raise UserError("distill.teacher: no way to read checkpoints was given")
        with allocating(POLICY_MEMORY):
            policy = cls.build_policy(cfg, env).to(device)
            teacher = load_teacher(cfg.distill.teacher, env, read_checkpoint).to(device)
        set_autocast(policy, cfg.perf.autocast, device)
        set_autocast(teacher, cfg.perf.autocast, device)
        return cls(policy, teacher, cfg.distill, cfg.distill.steps_per_env, cfg.perf, env.num_envs, device, dist)

    @classmethod
    def build_policy(cls, cfg: DistillationTrainConfig, env: EnvShape) -> nn.Module:
        return ActorCritic(obs_dim(env, cfg.policy.actor_obs), obs_dim(env, "critic"), env.action_spec, cfg.policy,
                           validate_distributions=cfg.perf.validate_distributions,
                           critic_chunk_size=cfg.perf.critic_chunk_size)

    @staticmethod
    def evaluate(policy: Any, env: VecEnv, greedy: bool = True) -> np.ndarray:
        return FeedForwardPPO.evaluate(policy, env, greedy)

    @classmethod
    def scope(cls, cfg: DistillationTrainConfig, device_type: str, world_size: int, env_layer: bool) -> Scope:
        rows = max(cfg.env.rows() * cfg.distill.gradient_length, cfg.env.rows())  # a chunk's forward, a step's
        return Scope(distillation=True, whole_step_update=False, chunked_critic=False, adaptive_lr=False,
                     env_layer=env_layer, device=device_type, world_size=world_size, critic_rows=0,
                     policy_rows=rows, auto_precision_modules=auto_lowers_mlps(
                         [*cfg.policy.actor_hidden, *cfg.policy.critic_hidden], rows))

    def obs_dims(self, env: EnvShape) -> dict[str, int]:
        return {"policy": self.policy.actor_obs_dim, "critic": obs_dim(env, "critic")}

    def forward_only(self, obs: dict[str, Tensor]) -> Callable[[], list[Tensor]]:
        act = hot(self.act_both, self.perf, self.device)
        frozen = {name: value.clone() for name, value in obs.items()}
        return lambda: [act(frozen)[0].clone() for _ in range(self.steps_per_env)]

    def rollout_forward(self, obs: dict[str, Tensor]) -> None:
        """The student's and the teacher's forwards."""
        self.act_both(obs)

    def first_minibatch_loss(self) -> Tensor:
        """The first chunk's loss (the remainder's forward is left out)."""
        self.begin_replay()
        return self.chunk_loss(self.chunks[0])

    # -- rollout -------------------------------------------------------------------------------------------

    def act(self, obs: dict[str, Tensor], t: int) -> Tensor:
        row = self.rows[t]
        if self.perf.compile != "off":
            with self.phases("act"):
                return self._act_step(obs, row)
        return self.act_step(obs, row, self.phases)

    def act_both(self, obs: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """The student's sampled actions, its observation and the teacher's mean action on the same step."""
        student_obs = self.policy.actor_input(obs)
        actions, _ = self.policy.head.sample(self.policy.dist_params(student_obs))
        return actions, student_obs, self.teacher_act(obs)

    def teacher_act(self, obs: dict[str, Tensor]) -> Tensor:
        return self.teacher.act_deterministic(self.teacher.actor_input(obs))

    def act_step(self, obs: dict[str, Tensor], row: DistillRow, phase: Phases = UNTIMED) -> Tensor:
        """Act with the student, store its observation and the teacher's action; returns the student's actions."""
        with phase("act"):
            actions, student_obs, teacher_actions = self.act_both(obs)
        with phase("store"):
            row.student_obs.copy_(student_obs)
            row.teacher_actions.copy_(teacher_actions)
        return actions

    def record(self, t: int, step: StepResult) -> None:
        """The env's side of a step is the observer's only: distillation learns from no reward."""
        observer = self.observer
        if observer is None:
            return
        with self.phases("stats"):
            if observer.fused:
                self._record_step(step, observer.rows(t))
            else:
                observer.record(t, step)

    def record_step(self, step: StepResult, rows: tuple[Tensor, ...]) -> None:
        cast(Any, self.observer).record_rows(step, rows)

    def compute_returns(self, obs: dict[str, Tensor]) -> None:
        """Nothing: the student's targets are the teacher's actions."""

    # -- update --------------------------------------------------------------------------------------------

    def update(self, progress: float = 0.0) -> None:
        """`num_epochs` passes over the rollout in `gradient_length`-step chunks, one optimizer step each."""
        self.stats.zero_()
        if self.host_loss_sum is not None:
            self.host_loss_sum = 0.0
        self.optim.begin_update(progress)
        self.begin_replay()
        for chunk in self.chunks:
            with self.phases("update.forward"):
                loss = self.chunk_loss(chunk)
            self.backward_and_step(loss, (loss.detach(),), None)
            self.end_chunk()
        if self.remainder is not None:  # counted in the logged loss, as rsl_rl counts it; no step
            with self.phases("update.forward"), torch.no_grad():
                self.add_loss(self.chunk_loss(self.remainder))
        self.optim.end_update()
        with self.phases("update.optimizer"):  # the normalizer, after the update from the whole rollout (rsl_rl)
            self.policy.update_actor_normalizer(self.student_obs.view(-1, self.policy.actor_obs_dim))
        if self.host_loss_sum is not None:  # the host's sum joins the device statistics (no host read)
            self.stats[0].fill_(self.host_loss_sum)

    def begin_replay(self) -> None:
        """Before an update's first chunk (a recurrent student's replay starts from the rollout's first state)."""

    def end_chunk(self) -> None:
        """After a chunk's optimizer step (a recurrent student's state is detached: truncated backpropagation)."""

    def chunk_loss(self, chunk: Chunk) -> Tensor:
        """The sum over the chunk's steps of each step's loss: one forward over all of them
        (`perf.whole_chunk_distillation`), or one per step (rsl_rl's); with `device_loss_stats` off each loss the
        sum adds is read on the host."""
        if self.perf.whole_chunk_distillation:
            obs, target = self.chunk_rows(self.student_obs, chunk), self.chunk_rows(self.teacher_actions, chunk)
            return self.summed(self.loss(obs.flatten(0, 1), target.flatten(0, 1), float(chunk.steps)))
        return self.summed(*(self.loss(self.student_obs[t], self.teacher_actions[t], 1.0)
                             for t in self.steps_of(chunk)))

    def steps_of(self, chunk: Chunk) -> list[int]:
        """The rollout step of each of the chunk's steps."""
        return [(chunk.start + i) % self.steps_per_env for i in range(chunk.steps)]

    def summed(self, *losses: Tensor) -> Tensor:
        """The sum of `losses`, each read on the host first when `device_loss_stats` is off (rsl_rl's `.item()`)."""
        total: Tensor | None = None
        for loss in losses:
            self.read_loss(loss)
            total = loss if total is None else total + loss
        return cast(Tensor, total)

    @staticmethod
    def chunk_rows(buffer: Tensor, chunk: Chunk) -> Tensor:
        """The chunk's steps of `buffer` (`[steps, envs, ...]`): a view when they are consecutive there, else
        gathered."""
        if chunk.gather is None:
            return buffer[chunk.start:chunk.start + chunk.steps]
        return buffer[chunk.gather]

    def steps_loss(self, features: Tensor, teacher_actions: Tensor, steps: float) -> Tensor:
        """`steps` x the loss over rows of `steps` steps of equally many envs: the sum of the steps' losses. A pure
        function of its inputs and the parameters (compiled when asked). `features`: what the student's mean action
        is computed from (`mean_actions`)."""
        return steps * self.loss_fn(self.mean_actions(features), teacher_actions)

    def mean_actions(self, student_obs: Tensor) -> Tensor:
        """The student's mean action on its observations."""
        return cast(Tensor, self.policy.act_deterministic(student_obs))

    def read_loss(self, loss: Tensor) -> None:
        """`device_loss_stats` off: read the loss on the host, as rsl_rl's `behavior_loss.item()` does."""
        if self.host_loss_sum is not None:
            self.host_loss_sum += loss.item()

    def add_loss(self, loss: Tensor) -> None:
        if self.host_loss_sum is None:
            self.stats[0].add_(loss)

    def add_statistics(self, parts: tuple[Tensor, ...] | Any, grad_norm: Tensor) -> None:
        with torch.no_grad():
            self.add_loss(parts[0])
            self.stats[1].add_(grad_norm)

    def statistics(self) -> dict[str, Tensor]:
        means = self.stats / self.stat_counts
        return {**dict(zip(self.stat_names, means.unbind(), strict=True)), **self.optim.statistics()}

    def storage_tensors(self) -> list[Tensor]:
        return [self.student_obs, self.teacher_actions]

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state (the student's parameters are saved by the runner; the teacher is its checkpoint)."""
        return self.optim.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optim.load_state_dict(state)


class RecurrentDistillation(Distillation):
    """A recurrent student (`RecurrentMLPPolicy`'s actor: its cells, MLP and head; policy.kind=recurrent on a flat
    task) imitates a feed-forward `teacher`.

    Rollout: the student's state runs on from step to step, zeroed where an episode starts, as in PPO on BPTT
    segments. Update: the rollout is replayed from the state the student had at its first step, step by step
    through the cells, the state zeroed where it was; after each chunk's optimizer step the state is detached
    (truncated backpropagation through `gradient_length` steps), and each epoch replays from the rollout's first
    state again. rsl_rl replays from the state its previous update's replay ended with, which is the same state
    computed with the parameters before that update; syncfree replays from the state the rollout really had.
    `perf.whole_chunk_distillation`: the chunk's hidden states go through the MLP, the head and the loss at once;
    off, step by step (the cells run step by step either way)."""

    name = "recurrent-distillation"
    chosen_by_policy_kind = "recurrent"
    description = "student-teacher distillation into a recurrent MLP student"
    label = "recurrent distillation"
    config_type = RecurrentDistillationTrainConfig

    def __init__(self, policy: RecurrentMLPPolicy, teacher: ActorCritic, cfg: DistillConfig, steps_per_env: int,
                 perf: PerfConfig, num_envs: int, device: torch.device, dist: Collective | None = None) -> None:
        super().__init__(policy, teacher, cfg, steps_per_env, perf, num_envs, device, dist)
        with allocating(STORAGE_MEMORY):
            self.keeps = torch.zeros(steps_per_env, num_envs, 1, device=device)
            self.state = policy.initial_actor_state(num_envs, device)
            """The student's recurrent state in the rollout (written in place)."""
            self.first_state = policy.initial_actor_state(num_envs, device)
            """Its state before the rollout's first step: where the update's replay starts."""
        self.done = torch.ones(num_envs, dtype=torch.bool, device=device)
        """Whether the last step ended each env's episode (the next observation starts one)."""
        self.rows = [row._replace(keep=self.keeps[t]) for t, row in enumerate(self.rows)]
        self.replay_state: tuple[Tensor, ...] = self.first_state
        self._cell = hot(self.cell_step, perf, device)

    @classmethod
    def build_policy(cls, cfg: DistillationTrainConfig, env: EnvShape) -> nn.Module:
        policy = cast(RecurrentMLPPolicyConfig, cfg.policy)
        if policy.actor_obs != "policy":
            raise UserError(f"policy.actor_obs={policy.actor_obs}: the recurrent student reads the policy group")
        return RecurrentMLPPolicy(obs_dim(env, "policy"), obs_dim(env, "critic"), env.action_spec, policy)

    @staticmethod
    def evaluate(policy: Any, env: VecEnv, greedy: bool = True) -> np.ndarray:
        return RecurrentPPO.evaluate(policy, env, greedy)

    def forward_only(self, obs: dict[str, Tensor]) -> Callable[[], list[Tensor]]:
        act = hot(self.act_both, self.perf, self.device)
        frozen = {name: value.clone() for name, value in obs.items()}
        return lambda: [act(frozen)[0].clone() for _ in range(self.steps_per_env)]

    def act_both(self, obs: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """As `act_step` computes them, without writing the state (for the bench's floor and FLOPs)."""
        actions, _, _ = self.student_act(obs["policy"])
        return actions, obs["policy"], self.teacher_act(obs)

    def student_act(self, student_obs: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, ...]]:
        """The student's sampled actions from its state, the step's keep mask and its new state."""
        keep = (~self.done).unsqueeze(-1).to(student_obs.dtype)
        hidden, state = self.cell_step(student_obs, self.state, keep)
        actions, _ = self.policy.head.sample(self.policy.head.params(self.policy.actor(hidden)))
        return actions, keep, state

    def cell_step(self, student_obs: Tensor, state: tuple[Tensor, ...], keep: Tensor) -> tuple[Tensor,
                                                                                                  tuple[Tensor, ...]]:
        """One step of the student's cells: its top hidden state and its new state."""
        return cast(tuple[Tensor, tuple[Tensor, ...]],
                    self.policy.actor_core(self.policy.actor_norm(student_obs), state, keep))

    def act_step(self, obs: dict[str, Tensor], row: DistillRow, phase: Phases = UNTIMED) -> Tensor:
        with phase("act"):
            actions, keep, state = self.student_act(obs["policy"])
            teacher_actions = self.teacher_act(obs)
        with phase("store"):
            row.student_obs.copy_(obs["policy"])
            row.teacher_actions.copy_(teacher_actions)
            cast(Tensor, row.keep).copy_(keep)
            torch._foreach_copy_(self.state, state)
        return actions

    def record(self, t: int, step: StepResult) -> None:
        torch.logical_or(step.terminated, step.truncated, out=self.done)
        super().record(t, step)

    def begin_rollout(self) -> None:
        torch._foreach_copy_(self.first_state, self.state)
        super().begin_rollout()

    def reset_episodes(self) -> None:
        super().reset_episodes()
        torch._foreach_zero_(self.state)
        self.done.fill_(True)

    def begin_replay(self) -> None:
        self.replay_state = self.first_state

    def end_chunk(self) -> None:
        self.replay_state = tuple(s.detach() for s in self.replay_state)

    def chunk_loss(self, chunk: Chunk) -> Tensor:
        """Step the cells through the chunk (from the rollout's first state at an epoch's first step), then the
        loss over their hidden states: at once (`perf.whole_chunk_distillation`), or step by step."""
        hidden = []
        steps = self.steps_of(chunk)
        for t in steps:
            if t == 0:
                self.replay_state = self.first_state
            h, self.replay_state = self._cell(self.student_obs[t], self.replay_state, self.keeps[t])
            hidden.append(h)
        if self.perf.whole_chunk_distillation:
            target = self.chunk_rows(self.teacher_actions, chunk).flatten(0, 1)
            return self.summed(self.loss(torch.cat(hidden), target, float(chunk.steps)))
        return self.summed(*(self.loss(h, self.teacher_actions[t], 1.0) for h, t in zip(hidden, steps, strict=True)))

    def mean_actions(self, hidden: Tensor) -> Tensor:
        head = self.policy.head
        return cast(Tensor, head.deterministic(head.params(self.policy.actor(hidden))))

    def storage_tensors(self) -> list[Tensor]:
        return [*super().storage_tensors(), self.keeps, *self.state, *self.first_state]


ALGORITHMS = (Distillation, RecurrentDistillation)
"""Registered by `syncfree.algo` (`--algorithm distillation`, `recurrent-distillation`)."""
