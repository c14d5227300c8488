"""What the off-policy learners (`sac`, `td3`) share: their settings, the replay buffer's rollout side, the
iteration's gradient steps, the target networks' soft update, the statistics and the checkpoints.

An iteration collects `steps_per_env` steps of every env into the replay buffer (`syncfree.algo.replay`), then takes
`updates_per_iteration` gradient steps, each on a batch drawn from it. The buffer's write position and fill are host
integers that the rollout advances, so neither a step nor a gradient step reads the device. A time-out bootstraps
from the episode's last observation where the env gives it (`final_obs`), else from the step's own observation, as
PPO's time-outs do. Until `learning_starts` env steps the actions are uniform and no gradient step is taken (counted
on the host from the steps collected, which a checkpoint keeps).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, cast

import torch
from torch import Tensor, nn

from syncfree.algo.base import Algorithm, CheckpointReader
from syncfree.algo.offpolicy_step import Trained, steps_whole, trained
from syncfree.algo.optim import (
    Collective,
    GradientAllReduce,
    ScheduleFreeAdamW,
    average_weights,
    hidden_matrices,
    load_moments,
    lr_groups,
    make_optimizer,
    searchable_optimizers,
)
from syncfree.algo.replay import Batch, drawable_transitions, replay_buffer, ring_bytes, ring_slots
from syncfree.algo.settings import OPTIMIZERS
from syncfree.config import PerfConfig, TrainConfig
from syncfree.core.compile import hot, mark_static
from syncfree.core.memory import available_memory
from syncfree.core.phases import Phases
from syncfree.core.switches import Scope
from syncfree.envs.api import StepResult, VecEnv
from syncfree.errors import POLICY_MEMORY, UserError, allocating, check
from syncfree.policy.actor_critic import auto_lowers_mlps, set_autocast
from syncfree.policy.build import EnvShape, obs_dim
from syncfree.policy.sac import Support, TwinCritics
from syncfree.policy.settings import PolicyConfig

log = logging.getLogger("syncfree")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class OffPolicyConfig:
    """The settings every off-policy learner has: the rollout and updates of an iteration, the replay buffer, the
    targets, the two networks' step sizes."""

    steps_per_env: int = 4
    """Env steps collected per env and iteration."""
    updates_per_iteration: int = 32
    """Gradient steps per iteration."""
    buffer_size: int = 1_000_000
    """Transitions the replay buffer holds (rounded up to a multiple of the env count); the oldest are overwritten."""
    batch_size: int = 256
    """Transitions per gradient step, drawn uniformly (with replacement) from the buffer."""
    learning_starts: int = 5000
    """Env steps (all envs together) of uniform random actions before the first gradient step."""
    n_step: int = 1
    """Steps summed into each sampled transition's return before it bootstraps (1: the one-step target)."""
    gamma: float = 0.99
    """Discount."""
    tau: float = 0.005
    """Soft target update: each target parameter moves this fraction of the way to its network's, every gradient
    step."""
    actor_learning_rate: float = 3e-4
    """The actor's step size."""
    critic_learning_rate: float = 1e-3
    """The critics' step size."""
    critic: Literal["scalar", "distributional"] = "scalar"
    """Each critic gives one Q value (regressed by mean squared error), or a categorical distribution over
    `num_atoms` values evenly spaced in [`v_min`, `v_max`], trained by cross-entropy against the target's
    distribution shifted by the n-step return and projected onto them (C51; FastTD3's critic). The actor
    maximizes the distribution's mean."""
    num_atoms: int = 101
    """A distributional critic's atoms."""
    v_min: float = -250.0
    """A distributional critic's lowest atom: below the lowest return the critic should represent (values
    outside [v_min, v_max] are clipped to the ends)."""
    v_max: float = 250.0
    """A distributional critic's highest atom."""
    schedule: Literal["fixed", "linear", "cosine"] = "fixed"
    """The actor's and the critics' step sizes over the run: `fixed`, or from `actor_learning_rate` and
    `critic_learning_rate` down to `final_learning_rate_fraction` of them by the run's end, along a line (`linear`)
    or half a cosine (`cosine`); set from the host before each update, from the iteration's place in the run (a
    resumed run goes on along it). The record's `learning_rate` is the critics' rate."""
    final_learning_rate_fraction: float = 0.0
    """Where `linear` and `cosine` end, as a fraction of the starting rates."""
    optimizer: Literal["adam", "adamw", "muon", "schedule_free_adamw"] = "adam"
    """What steps the actor and the critics (each its own optimizer; SAC's temperature steps with Adam whatever this
    is): `adam`, `adamw` (weight decay 0.01 unless `weight_decay` says), `muon` (on the hidden matrices of each MLP,
    AdamW on the rest) or `schedule_free_adamw`, as `ppo.optimizer` describes them. With `schedule_free_adamw` the
    rollout acts and the targets follow with the weights the gradient steps take; evaluation, checkpoints and
    `syncfree.learn`'s policy get the average."""
    weight_decay: float = 0.0
    """Decoupled weight decay of `optimizer` (see there)."""
    action_bounds: Literal["env", "symmetric", "unit"] = "unit"
    """The range the actor's [-1, 1] (and the random warm-up's) is mapped onto before the env takes it: `unit`,
    [-1, 1] (the env's own scaling, where 0 is g1-track's default pose); where the env declares bounds
    (`VecEnv.action_bounds`: g1-track's joint limits as actions), `env` maps [-1, 1] onto them (0 to the middle of
    each range, not to the default pose: on g1-track that ends the untrained policy's episodes within 7 steps, and
    SAC and TD3 did not learn, docs/off-policy.md), and `symmetric` onto [-m, m], m each action's larger distance
    from 0 to its bounds (FastSAC's joint-limit-aware bounds: 0 stays the default pose and ±1 reaches the joint
    limit farther from it; the env clips what passes the nearer one); without declared bounds, [-1, 1]. The buffer,
    the critics and the noises work in [-1, 1] whatever the map; checkpoints and exports carry it."""
    pre_tanh_penalty: float = 0.0
    """Added to the actor's loss: this times the batch mean of the squared length of the actor's output before its
    tanh (TD3: the action's; SAC: its Gaussian's mean), which keeps the actor off the ends of [-1, 1] where the tanh
    passes almost no gradient (TD3's actor drove 89-100 % of g1-track's action components there,
    docs/off-policy.md). 0: no penalty (CleanRL's). The record's `actor_loss` includes it."""
    save_buffer: bool = False
    """Checkpoints hold the replay buffer too (it can be large: `buffer_size` transitions of every group stored), so
    that a resumed run continues with it; off, a resumed run starts with an empty buffer."""

    def validate(self, section: str) -> None:
        for key in ("steps_per_env", "updates_per_iteration", "buffer_size", "batch_size", "n_step"):
            check(getattr(self, key) >= 1, f"{section}.{key}", "an integer >= 1", getattr(self, key))
        check(self.batch_size <= self.buffer_size, f"{section}.batch_size",
              f"an integer <= {section}.buffer_size={self.buffer_size}", self.batch_size)
        check(self.learning_starts >= 0, f"{section}.learning_starts", "an integer >= 0", self.learning_starts)
        check(0 <= self.gamma <= 1, f"{section}.gamma", "a number in [0, 1]", self.gamma)
        check(0 < self.tau <= 1, f"{section}.tau", "a number in (0, 1]", self.tau)
        for key in ("actor_learning_rate", "critic_learning_rate"):
            check(getattr(self, key) > 0, f"{section}.{key}", "a number > 0", getattr(self, key))
        check(self.weight_decay >= 0, f"{section}.weight_decay", "a number >= 0", self.weight_decay)
        check(math.isfinite(self.pre_tanh_penalty) and self.pre_tanh_penalty >= 0, f"{section}.pre_tanh_penalty",
              "a finite number >= 0", self.pre_tanh_penalty)
        check(self.action_bounds in ("env", "symmetric", "unit"), f"{section}.action_bounds", "env, symmetric, unit",
              self.action_bounds)
        check(self.optimizer in OPTIMIZERS, f"{section}.optimizer", ", ".join(OPTIMIZERS), self.optimizer)
        check(0 <= self.final_learning_rate_fraction <= 1, f"{section}.final_learning_rate_fraction",
              "a number in [0, 1]", self.final_learning_rate_fraction)
        check(self.num_atoms >= 2, f"{section}.num_atoms", "an integer >= 2", self.num_atoms)
        check(self.v_min < self.v_max, f"{section}.v_max", f"a number > {section}.v_min={self.v_min}", self.v_max)

    def support(self) -> Support | None:
        """The distributional critics' atoms; None for scalar critics."""
        return (self.v_min, self.v_max, self.num_atoms) if self.critic == "distributional" else None

    def rate_factor(self, progress: float) -> float:
        """The share of the starting rates the schedule gives after the fraction `progress` of the run."""
        end = self.final_learning_rate_fraction
        if self.schedule == "linear":
            return 1.0 - (1.0 - end) * progress
        if self.schedule == "cosine":
            return end + (1.0 - end) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    def decay(self) -> float:
        """The weight decay the optimizers step with: `weight_decay`, or 0.01 for `adamw` when it is 0."""
        return 0.01 if self.optimizer == "adamw" and self.weight_decay == 0 else self.weight_decay


UNREAD_POLICY = {"init_std": "the off-policy learners explore by their own noise, not the policy's init_std",
                 "std_type": "the off-policy learners explore by their own noise, not the policy's std_type"}
"""Fields of the `policy` section the off-policy networks do not read, and why."""


@dataclass
class OffPolicyTrainConfig(TrainConfig):
    """An off-policy learner's run: the MLP sizes of `policy` (actor; each of the twin critics) and the learner's
    own section (`SECTION`)."""

    SECTION: ClassVar[str]
    """The learner's section (`sac`, `td3`)."""

    policy: PolicyConfig = field(default_factory=PolicyConfig)

    @property
    def learner(self) -> OffPolicyConfig:
        section: OffPolicyConfig = getattr(self, self.SECTION)
        return section

    def rollout_steps(self) -> int:
        return self.learner.steps_per_env

    def describe_iteration(self) -> str:
        own = self.learner
        return (f"{super().describe_iteration()} into a replay buffer of {own.buffer_size:,}, "
                f"{own.updates_per_iteration} gradient steps of {own.batch_size}")

    def learn_at_once(self) -> tuple[int, str]:
        """No random actions first, and as many iterations as fill a batch (the newest `n_step - 1` slots are not
        drawn)."""
        self.learner.learning_starts = 0
        return self.iterations_before_learning() + 1, "learning from the first step"

    def iterations_before_learning(self) -> int:
        return iterations_without_gradient_steps(self.learner, self.env.num_envs)

    def validate(self) -> None:
        super().validate()
        self.policy.validate(self.algorithm)
        self.learner.validate(self.SECTION)

    def unused_settings(self, defaults: TrainConfig | None = None) -> list[tuple[str, str]]:
        base = defaults if isinstance(defaults, OffPolicyTrainConfig) else type(self)()
        unused = [(f"policy.{name}={getattr(self.policy, name)!r}", why) for name, why in UNREAD_POLICY.items()
                  if getattr(self.policy, name) != getattr(base.policy, name)]
        own, section = self.learner, self.SECTION
        off = {"num_atoms": (own.critic == "scalar", f"{section}.critic is scalar"),
               "v_min": (own.critic == "scalar", f"{section}.critic is scalar"),
               "v_max": (own.critic == "scalar", f"{section}.critic is scalar"),
               "final_learning_rate_fraction": (own.schedule == "fixed", f"{section}.schedule is fixed")}
        return unused + [(f"{section}.{name}={getattr(own, name)!r}", why) for name, (idle, why) in off.items()
                         if idle and getattr(own, name) != getattr(base.learner, name)]

    @classmethod
    def adopt(cls, cfg: OffPolicyTrainConfig, source: TrainConfig) -> None:
        """From a PPO preset: its discount; the policy fields the learner does not read keep their defaults."""
        ppo = getattr(source, "ppo", None)
        if ppo is not None:
            cfg.learner.gamma = ppo.gamma
        fresh = PolicyConfig()
        cfg.policy = dataclasses.replace(cfg.policy, **{name: getattr(fresh, name) for name in UNREAD_POLICY})


def iterations_without_gradient_steps(own: OffPolicyConfig, num_envs: int, env_steps: int = 0, filled: int = 0) -> int:
    """The iterations a run at `env_steps` env steps, its buffer holding `filled` steps of every env, takes before the
    first whose update takes gradient steps: until `learning_starts` env steps, and until the buffer holds a batch to
    draw (the newest `n_step - 1` steps of every env wait for their returns)."""
    random_left = max(own.learning_starts - env_steps, 0)
    steps_needed = -(-own.batch_size // num_envs) + own.n_step - 1 - filled  # of every env
    first = max(-(-random_left // (num_envs * own.steps_per_env)), -(-steps_needed // own.steps_per_env), 1)
    return first - 1


def soft_update(targets: list[Tensor], sources: list[Tensor], tau: float, fused: bool) -> None:
    """Move every target parameter `tau` of the way to its source: one `_foreach_lerp_` (`perf.fused_target_update`),
    or the conventional per-parameter loop (CleanRL's `target.data.copy_(tau * p.data + (1 - tau) * target.data)`)."""
    with torch.no_grad():
        if fused:
            torch._foreach_lerp_(targets, sources, tau)
        else:
            for target, source in zip(targets, sources, strict=True):
                target.data.copy_(tau * source.data + (1 - tau) * target.data)


def project_onto_atoms(probs: Tensor, values: Tensor, support: Support) -> Tensor:
    """C51's projection: the distribution over the support's atoms that puts each mass `probs[i, j]`, sitting at
    `values[i, j]`, on the two atoms around that value, split in proportion to their nearness (a value outside the
    support goes to its end atom). It keeps each row's total mass, and its mean where every value is inside."""
    v_min, v_max, num_atoms = support
    position = (values.clamp(v_min, v_max) - v_min) * ((num_atoms - 1) / (v_max - v_min))
    below = position.floor()
    above_share = position - below
    below_index = below.long()
    above_index = (below_index + 1).clamp_(max=num_atoms - 1)  # the top atom's share of above is 0
    projected = torch.zeros_like(probs)
    projected.scatter_add_(-1, below_index, probs * (1.0 - above_share))
    return projected.scatter_add_(-1, above_index, probs * above_share)


class OffPolicy(Algorithm):
    """An off-policy learner on `num_envs` envs with its replay buffer; the subclass gives its networks' gradient
    step (`gradient_step`), its exploration (`explore`) and its optimizers."""

    own_payback = True
    shared_statistics = ()
    optional_state = ("replay_buffer",)
    """Checkpoints hold the buffer where `save_buffer` asked; a run resumed with it set otherwise starts empty."""
    policy: TwinCritics

    def __init__(self, policy: TwinCritics, cfg: OffPolicyConfig, perf: PerfConfig, num_envs: int, critic_group: str,
                 device: torch.device, dist: Collective | None = None) -> None:
        self.policy, self.cfg, self.perf, self.device, self.dist = policy, cfg, perf, device, dist
        self.phases = Phases()
        self.steps_per_env, self.num_envs = cfg.steps_per_env, num_envs
        self.minibatches_per_update = cfg.updates_per_iteration
        self.critic_group = critic_group
        dims = {policy.actor_group: policy.actor_obs_dim, critic_group: policy.critic_obs_dim}
        self.check_batch_drawable(num_envs)
        if not perf.replay_on_device or device.type == "cpu":
            self.check_buffer_fits(ring_bytes(dims, policy.action_dim, num_envs, cfg.buffer_size, cfg.n_step))
        self.buffer = replay_buffer(perf.replay_on_device, dims, policy.action_dim, num_envs, cfg.buffer_size,
                                    cfg.batch_size, cfg.n_step, cfg.gamma, device, perf.vectorized_n_step)
        self.groups = list(dims)
        held = sum(t.numel() * t.element_size() for t in self.buffer.tensors())
        say = log.info if getattr(dist, "is_main", True) else log.debug  # rank 0 speaks for all
        say("%s: a replay buffer of %s transitions (%d slots x %d envs), %.1f MiB in %s memory", self.name,
                 f"{self.buffer.slots * num_envs:,}", self.buffer.slots, num_envs, held / 2**20,
                 "host" if self.buffer.on_host else device.type)
        """The observation groups stored: the actor's and the critics'."""
        self.targets, self.followed = policy.followed_params()
        self.env_steps = 0
        """Env steps collected by this run, all envs together (kept by checkpoints): `learning_starts` counts them."""
        self.gradient_steps = 0
        """Gradient steps of the last update."""
        self.learning_rate = cfg.critic_learning_rate
        """The critics' rate of the last update (`schedule`)."""
        self.stats = torch.zeros(len(self.stat_names), device=device)
        self.host_stats = [0.0] * len(self.stat_names)
        """The statistics' sums read at every gradient step (`perf.device_loss_stats` off)."""
        self._no_extra = torch.zeros(1, device=device)
        self._step_lrs = [torch.zeros(1, dtype=torch.float64, device=device) for _ in range(3)]
        """`compile=step`: each optimizer's learning rate (`named_optimizers`' order), set from the host per update;
        each its own tensor (a CUDA graph copies in, at every replay, a static input off a 16-byte boundary)."""
        self._whole_step: Callable[..., None] | None = None
        """`compile=step`: the learner's whole gradient step, compiled (`whole_step`); None otherwise."""
        self.parts: list[Trained] = []
        """`compile=step`: each optimizer's share of the whole gradient step (`step_parts`), built per update."""
        self._env_actions = torch.zeros(num_envs, policy.action_dim, device=device) if policy.maps_actions else None
        """The actions in the env's range (`action_bounds`), where they are mapped."""

    def check_batch_drawable(self, num_envs: int) -> None:
        """One line when a full buffer would hold fewer transitions a batch can draw than the batch (the newest
        `n_step - 1` steps wait for their n-step returns): the run would never take a gradient step."""
        cfg, section = self.cfg, self.config_type.SECTION  # type: ignore[attr-defined]
        slots, most = ring_slots(cfg.buffer_size, num_envs, cfg.n_step), drawable_transitions(
            cfg.buffer_size, num_envs, cfg.n_step)
        if cfg.batch_size > most:
            raise UserError(f"config: {section}.batch_size={cfg.batch_size:,} is more than the {most:,} transitions a "
                            f"batch can draw from a buffer of {slots:,} steps of {num_envs:,} envs (the newest "
                            f"{section}.n_step-1={cfg.n_step - 1} held back for n-step returns); raise "
                            f"{section}.buffer_size or lower {section}.batch_size")

    def check_buffer_fits(self, needed: int) -> None:
        """One line when a ring in host memory would need more than the memory available now (its zeros are only
        backed as the run writes them, so the kernel would end the run hours later)."""
        free = available_memory()
        if free is not None and needed > free:
            section = self.config_type.SECTION  # type: ignore[attr-defined]
            raise UserError(f"config: {section}.buffer_size={self.cfg.buffer_size:,} needs {needed / 2**20:,.0f} MiB of "
                            f"host memory for the replay buffer, more than the {free / 2**20:,.0f} MiB available; "
                            f"lower {section}.buffer_size (each transition holds every observation group twice)")

    def compiled(self, fn: F) -> F:
        """`fn` (a loss of a batch: its forward, and its backward with it) compiled as one graph under `perf.compile`
        (`hot` and `step` alike), the batch tensors the buffer gathers into marked static; itself with it off."""
        batch = self.buffer.batch
        static = [*batch.obs.values(), batch.actions, batch.returns, batch.discounts, *batch.next_obs.values()]
        return hot(fn, self.perf, self.device, static=[] if self.buffer.on_host else static)

    def whole_step(self, fn: F) -> F | None:
        """`fn`, the whole gradient step (`syncfree.algo.offpolicy_step`), compiled under `compile=step`; None under
        another mode, or where the step cannot be one graph (`whole_step_fallback`, said in one line: the step is
        then compiled as under `hot`)."""
        if self.perf.compile != "step":
            return None
        reason = self.whole_step_fallback()
        if reason is not None:
            log.info("perf.compile=step: %s's gradient step is compiled as with perf.compile=hot (%s)", self.name,
                     reason)
            return None
        return self.compiled(fn)

    def whole_step_fallback(self) -> str | None:
        """Why a gradient step cannot be one graph (None: it can): a gradient all-reduce between the backward and
        the optimizer step, an optimizer other than Adam(W), or statistics read on the host."""
        section = self.config_type.SECTION  # type: ignore[attr-defined]
        if self.dist is not None:
            return "several processes (the gradient all-reduce)"
        if not all(steps_whole(optimizer) for optimizer in self.named_optimizers().values()):
            return f"{section}.optimizer={self.cfg.optimizer}: the whole-step graph steps adam and adamw only"
        if not self.perf.device_loss_stats:
            return "perf.device_loss_stats=false (the statistics read on the host)"
        return None

    def step_parts(self) -> list[Trained]:
        """Each optimizer's share of a whole step (`named_optimizers`' order), at its learning rate of this update
        (a host float written to the device, nothing read); built per update, since a loaded checkpoint replaces
        the optimizers' state."""
        parts = []
        for i, optimizer in enumerate(self.named_optimizers().values()):
            lr = self._step_lrs[i]
            lr.fill_(float(optimizer.param_groups[0]["lr"]))
            parts.append(trained(self.policy, optimizer, lr))
        mark_static(self.perf, self.device, *(t for part in parts for t in part.tensors()), *self.targets,
                    self.stats)
        return parts

    def network_optimizer(self, params: list[Tensor], lr: float, network: str) -> torch.optim.Optimizer:
        """The optimizer of `optimizer` (`make_optimizer`) over a network's `params` (`network` names it in errors),
        fused: the step counts stay on the device (torch's default Adam reads each on the host)."""
        matrices = hidden_matrices(self.policy)
        section = self.config_type.SECTION  # type: ignore[attr-defined]
        if self.cfg.optimizer == "muon" and not {id(p) for p in matrices} & {id(p) for p in params}:
            raise UserError(f"config: {section}.optimizer='muon' is invalid here: the {network} has no hidden matrix "
                            "(a linear layer between two others of an MLP); give its MLP two hidden layers or more, "
                            "or use adam")
        return make_optimizer(cast(list[nn.Parameter], params), self.cfg.optimizer, lr, self.cfg.decay(),
                              matrices=matrices, fused=True)

    def gradient_average(self, params: list[Tensor]) -> GradientAllReduce | None:
        """With several processes: what averages `params`' gradients over the ranks before their optimizer steps
        (one collective; each rank draws its batches from its own buffer, so the ranks step alike)."""
        return None if self.dist is None else GradientAllReduce(cast(list[nn.Parameter], params), self.dist)

    def average(self, gradients: GradientAllReduce | None) -> None:
        if gradients is not None:
            gradients(self._no_extra)

    # -- the class's side -------------------------------------------------------------------------------------

    @classmethod
    def build(cls, cfg: OffPolicyTrainConfig, env: VecEnv, device: torch.device, dist: Collective | None = None,
              read_checkpoint: CheckpointReader | None = None) -> OffPolicy:
        cls.check_actions(cfg, env)
        own = cfg.learner
        if own.action_bounds != "unit" and getattr(env, "action_bounds", None) is None:
            log.warning("%s.action_bounds=%s: the env declares no action bounds (VecEnv.action_bounds); the actions "
                        "go to it in [-1, 1], as with unit (an env that maps them itself, as the Gymnasium adapter "
                        "onto its Box, still does)", cfg.SECTION, own.action_bounds)
        with allocating(POLICY_MEMORY):
            policy = cls.build_policy(cfg, env).to(device)
        set_autocast(policy, cfg.perf.autocast, device)
        learner: OffPolicy = cast(Any, cls)(policy, cfg, device, env.num_envs, dist)  # each learner's constructor
        return learner

    @classmethod
    def search_space(cls, cfg: OffPolicyTrainConfig) -> dict[str, dict[str, Any]]:
        """The off-policy learners' default search (CleanRL's and RL Zoo's ranges): the two learning rates and tau on
        log scales, the batch size, gradient steps per iteration (a quarter to twice the preset's), n-step returns,
        gamma, the optimizer (`muon` where the actor and the critics each have a hidden matrix) and the pre-tanh
        penalty (none or one of three sizes)."""
        own, section = cfg.learner, cfg.SECTION
        updates = own.updates_per_iteration
        return {
            f"{section}.actor_learning_rate": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
            f"{section}.critic_learning_rate": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
            f"{section}.tau": {"type": "float", "low": 1e-3, "high": 5e-2, "log": True},
            f"{section}.batch_size": {"type": "categorical",
                                      "choices": [b for b in (128, 256, 512) if b <= own.buffer_size]},
            f"{section}.updates_per_iteration": {"type": "categorical",
                                                 "choices": sorted({max(1, updates // 4), max(1, updates // 2),
                                                                    updates, 2 * updates})},
            f"{section}.n_step": {"type": "int", "low": 1, "high": 5},
            f"{section}.gamma": {"type": "float", "low": 0.9, "high": 0.999},
            f"{section}.optimizer": {
                "type": "categorical", "choices": searchable_optimizers(cfg.policy.actor_hidden, cfg.policy.critic_hidden)},
            f"{section}.pre_tanh_penalty": {"type": "categorical", "choices": [0.0, 0.001, 0.01, 0.1]},
        }

    @classmethod
    def check_actions(cls, cfg: TrainConfig, env: EnvShape) -> None:
        spec = env.action_spec
        if spec.kind != "continuous":
            raise UserError(f"algorithm={cls.name}: task {cfg.task!r} has {spec.kind} actions ({spec.size} choices); "
                            f"{cls.label} trains continuous actions only (--algorithm ppo trains this task)")

    @staticmethod
    def policy_dims(cfg: OffPolicyTrainConfig, env: EnvShape) -> tuple[int, int]:
        return obs_dim(env, cfg.policy.actor_obs), obs_dim(env, "critic")

    @staticmethod
    def action_bounds(cfg: OffPolicyTrainConfig, env: EnvShape) -> tuple[Tensor, Tensor] | None:
        """The range the actions are mapped onto (`action_bounds`); None: [-1, 1], or a checkpoint's shape (its
        policy's map is in its state)."""
        mode = cfg.learner.action_bounds
        bounds = getattr(env, "action_bounds", None) if mode in ("env", "symmetric") else None
        if bounds is None:
            return None
        low, high = (torch.as_tensor(b, dtype=torch.float32).reshape(-1).cpu() for b in bounds)
        size = env.action_spec.size
        if low.shape != (size,) or high.shape != (size,) or not bool(torch.all(low < high)) \
                or not bool(torch.isfinite(low).all() and torch.isfinite(high).all()):
            raise UserError(f"env: action_bounds must be two finite tensors of {size} values, each low below its "
                            f"high; got {tuple(low.shape)} and {tuple(high.shape)}")
        if mode == "symmetric":
            reach = torch.maximum(low.abs(), high.abs())
            return -reach, reach
        return low, high

    @classmethod
    def scope(cls, cfg: OffPolicyTrainConfig, device_type: str, world_size: int, env_layer: bool) -> Scope:
        own = cfg.learner
        rows = max(cfg.env.rows(), own.batch_size)  # a rollout step's actor, a gradient step's networks
        return Scope(flat_rollouts=False, whole_step_update=False, chunked_critic=False,
                     adaptive_lr=False, env_layer=env_layer, device=device_type, world_size=world_size,
                     critic_rows=own.batch_size, policy_rows=rows, off_policy=True, n_step=own.n_step,
                     auto_precision_modules=auto_lowers_mlps([*cfg.policy.actor_hidden, *cfg.policy.critic_hidden],
                                                             rows))

    def obs_dims(self, env: EnvShape) -> dict[str, int]:
        return {"policy": self.policy.actor_obs_dim, "critic": self.policy.critic_obs_dim}

    def forward_only(self, obs: dict[str, Tensor]) -> Callable[[], list[Tensor]]:
        actor_obs = self.policy.actor_input(obs).clone()
        return lambda: [self.explore(actor_obs) for _ in range(self.steps_per_env)]

    def rollout_forward(self, obs: dict[str, Tensor]) -> None:
        self.explore(self.policy.actor_input(obs))

    def rows_per_minibatch(self) -> int:
        return self.cfg.batch_size

    # -- rollout ----------------------------------------------------------------------------------------------

    @abstractmethod
    def explore(self, actor_obs: Tensor) -> Tensor:
        """The actions the rollout takes once learning started (the actor's, with its exploration)."""

    def warn_idle(self, iterations_left: int) -> None:
        """One warning line when the run ends before its first gradient step (`iterations_before_update`): its env
        steps stay below `learning_starts`, or its buffer never holds a batch to draw (as when resumed with an empty
        one)."""
        if iterations_left <= 0 or self.iterations_before_update() < iterations_left:
            return
        section, steps = self.config_type.SECTION, iterations_left * self.steps_per_env  # type: ignore[attr-defined]
        env_steps = self.env_steps + steps * self.num_envs
        if env_steps < self.cfg.learning_starts:
            why = f"its {env_steps:,} env steps stay below {section}.learning_starts={self.cfg.learning_starts:,}"
        else:
            drawable = max(self.buffer.filled + steps - self.cfg.n_step + 1, 0) * self.num_envs
            why = (f"its buffer holds {drawable:,} transitions to draw by then, fewer than "
                   f"{section}.batch_size={self.cfg.batch_size:,}")
        log.warning("%s: no gradient step in the %d iteration%s the run has left: %s", self.name, iterations_left,
                    "s" if iterations_left != 1 else "", why)

    def iterations_before_update(self) -> int:
        return iterations_without_gradient_steps(self.cfg, self.num_envs, self.env_steps, self.buffer.filled)

    def acting_randomly(self) -> bool:
        """Before `learning_starts` env steps the actions are uniform in [-1, 1] (decided on the host)."""
        return self.env_steps < self.cfg.learning_starts

    def act(self, obs: dict[str, Tensor], t: int) -> Tensor:
        with self.phases("act"):
            if self.acting_randomly():
                actions = torch.rand(self.num_envs, self.policy.action_dim, device=self.device).mul_(2.0).sub_(1.0)
            else:
                actions = self.explore(self.policy.actor_input(obs))
            taken = actions if self._env_actions is None else torch.addcmul(  # the env's range (`action_bounds`)
                self.policy.action_bias, self.policy.action_scale, actions, out=self._env_actions)
        with self.phases("store"):
            self.buffer.write_obs(obs, actions)
        return taken

    def record(self, t: int, step: StepResult) -> None:
        """The env's side of the transition; a time-out's next observation is the episode's last (`final_obs`) where
        the env gives it, else the step's own observation (the returned one already starts the next episode)."""
        with self.phases("store"):
            final = step.info.get("final_obs", {})
            next_obs = {g: final[g] if g in final else step.obs[g] for g in self.groups}
            self.buffer.write_step(step.reward, step.terminated, step.truncated, next_obs)
        with self.phases("normalizer"):
            self.policy.update_normalizers(self.policy.actor_input(step.obs), step.obs[self.critic_group])
        if self.observer is not None:
            with self.phases("stats"):
                self.observer.record(t, step)
        self.env_steps += self.num_envs

    def compute_returns(self, obs: dict[str, Tensor]) -> None:
        """Nothing: the targets are computed per gradient step, from the critics of that step."""

    # -- update -----------------------------------------------------------------------------------------------

    def sample_batch(self) -> Batch:
        return self.buffer.sample()

    def penalized(self, actor_loss: Tensor, pre_tanh: Tensor) -> Tensor:
        """The actor's loss with `pre_tanh_penalty`'s term on its output before the tanh, [rows, action_dim];
        unchanged (the same tensor) without a penalty."""
        if not self.cfg.pre_tanh_penalty:
            return actor_loss
        return actor_loss + self.cfg.pre_tanh_penalty * pre_tanh.square().sum(-1).mean()

    def target_distribution(self, batch: Batch, next_actions: Tensor, next_cost: Tensor | None = None) -> Tensor:
        """Distributional critics' target, [batch, num_atoms] (no gradient): of the two target critics' distributions
        at the next observation and `next_actions`, the one with the lower mean (clipped double-Q, per transition),
        its atoms `z` moved to `R + discount (z - next_cost)` (SAC's entropy cost `alpha log pi`; TD3 has none) and
        projected back onto the atoms. Called without gradient."""
        policy = self.policy
        p1, p2 = policy.target_q_probs(batch.next_obs[self.critic_group], next_actions)
        atoms = cast(Tensor, policy.atoms)
        probs = torch.where((p1 @ atoms <= p2 @ atoms).unsqueeze(-1), p1, p2)
        next_values = atoms if next_cost is None else atoms - next_cost.unsqueeze(-1)
        values = batch.returns.unsqueeze(-1) + batch.discounts.unsqueeze(-1) * next_values
        return project_onto_atoms(probs, values, cast(Support, policy.support))

    def distributional_loss(self, batch: Batch, target: Tensor) -> tuple[Tensor, Tensor]:
        """Each distributional critic's cross-entropy against `target`, summed, and their mean Q."""
        logits = self.policy.q_logits(batch.obs[self.critic_group], batch.actions)
        loss = -(target * logits[0].log_softmax(-1)).sum(-1).mean() - (target * logits[1].log_softmax(-1)).sum(-1).mean()
        with torch.no_grad():
            q1, q2 = self.policy.expected(logits)
        return loss, 0.5 * (q1 + q2).mean()

    def update(self, progress: float = 0.0) -> None:
        """`updates_per_iteration` gradient steps, once `learning_starts` env steps were collected and the buffer
        holds a batch (a resumed run's refills first)."""
        self.schedule_learning_rates(progress)
        self.stats.zero_()
        self.host_stats = [0.0] * len(self.stat_names)
        ready = not self.acting_randomly() and self.buffer.sampleable() >= self.cfg.batch_size
        self.gradient_steps = self.cfg.updates_per_iteration if ready else 0
        if ready:  # schedule-free AdamW: from the first update on, the parameters hold the weights the steps take
            for optimizer in self.schedule_free():
                optimizer.train()
        if ready and self._whole_step is not None:
            self.parts = self.step_parts()
        for _ in range(self.gradient_steps):
            self.gradient_step()

    def updated(self) -> bool:
        return self.gradient_steps > 0

    def schedule_learning_rates(self, progress: float) -> None:
        """Set the actor's and the critics' rates for this update (`schedule`; host floats, nothing read)."""
        factor = self.cfg.rate_factor(progress)
        optimizers = self.named_optimizers()
        self.learning_rate = self.cfg.critic_learning_rate * factor
        for name, rate in (("actor_optimizer", self.cfg.actor_learning_rate * factor),
                           ("critic_optimizer", self.learning_rate)):
            for group in lr_groups(optimizers[name]):
                group["lr"] = rate

    @abstractmethod
    def gradient_step(self) -> None:
        """One step of the critics, and of the actor (and what else the learner trains) on a batch."""

    def soft_update(self) -> None:
        soft_update(self.targets, self.followed, self.cfg.tau, self.perf.fused_target_update)

    def add_step_statistics(self, values: tuple[Tensor, ...]) -> None:
        """Add a gradient step's statistics (`stat_names`' order) to the iteration's sums: on the device
        (`perf.device_loss_stats`), or read with `.item()` and summed on the host (Stable-Baselines3's logging)."""
        if self.perf.device_loss_stats:
            self.stats.add_(torch.stack([v.detach() for v in values]))
        else:
            self.host_stats = [total + v.item() for total, v in zip(self.host_stats, values, strict=True)]

    def statistics(self) -> dict[str, Tensor]:
        sums = self.stats if self.perf.device_loss_stats else torch.tensor(self.host_stats, device=self.device)
        means = sums / max(self.gradient_steps, 1)
        return {**dict(zip(self.stat_names, means.unbind(), strict=True)),
                "gradient_steps": torch.full((), self.gradient_steps, device=self.device)}

    def record_statistics(self, stats: dict[str, float]) -> dict[str, Any]:
        record: dict[str, Any] = dict(stats)
        record["gradient_steps"] = int(stats["gradient_steps"])
        record["learning_rate"] = self.learning_rate
        return record

    def divergence(self, stats: dict[str, float]) -> str | None:
        if not all(math.isfinite(stats[name]) for name in self.stat_names):
            return f"the update's losses are not finite (the run diverged: try a smaller {self.learning_rate_key})"
        return None

    def storage_tensors(self) -> list[Tensor]:
        return self.buffer.tensors()

    # -- checkpoints ------------------------------------------------------------------------------------------

    @abstractmethod
    def named_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers by the name their state has in checkpoints."""

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return list(self.named_optimizers().values())

    def optimizer_params(self) -> dict[str, list[Tensor]]:
        """Each optimizer's parameters in the order of its state dict (Muon's matrices first with `muon`)."""
        return {name: [p for group in o.param_groups for p in group["params"]]
                for name, o in self.named_optimizers().items()}

    def schedule_free(self) -> list[ScheduleFreeAdamW]:
        return [o for o in self.optimizers() if isinstance(o, ScheduleFreeAdamW)]

    def average_weights(self) -> contextlib.AbstractContextManager[bool]:
        """With `optimizer=schedule_free_adamw`, the actor and the critics hold their averages inside the block."""
        return average_weights(self.optimizers())

    def keep_average_weights(self) -> None:
        for optimizer in self.schedule_free():
            optimizer.eval()

    def state_dict(self) -> dict[str, Any]:
        """The optimizers and the env steps collected (the networks, the targets and the temperature are the
        policy's), and the replay buffer where `save_buffer` asks for it. With schedule-free AdamW, the weights the
        run acts and steps with too (the policy's saved weights are the average)."""
        state: dict[str, Any] = {name: o.state_dict() for name, o in self.named_optimizers().items()}
        state["env_steps"] = self.env_steps
        if self.schedule_free():
            state["acting_weights"] = [p.detach().clone() for o in self.schedule_free()
                                       for group in o.param_groups for p in group["params"]]
        if self.cfg.save_buffer:
            state["replay_buffer"] = self.buffer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, optimizer in self.named_optimizers().items():
            load_moments(optimizer, state[name])  # the options stay the run's config's
        if self.schedule_free():  # the policy was loaded with the average
            params = [p for o in self.schedule_free() for group in o.param_groups for p in group["params"]]
            with torch.no_grad():
                torch._foreach_copy_(params, [w.to(p.device) for w, p in zip(state["acting_weights"], params,
                                                                             strict=True)])
            for optimizer in self.schedule_free():
                optimizer.train_mode = True
        self.env_steps = int(state["env_steps"])
        saved = state.get("replay_buffer")
        section = self.config_type.SECTION  # type: ignore[attr-defined]
        if saved is None or not self.cfg.save_buffer:
            why = (f"--{section}.save_buffer false: the checkpoint's is not read" if saved is not None else
                   "the checkpoint does not hold it; " + (
                       "this run's checkpoints will" if self.cfg.save_buffer else
                       f"--{section}.save_buffer true saves it"))
            log.info("%s: the run resumes with an empty replay buffer (%s); it refills from the trained policy's "
                     "actions", self.name, why)
            return
        try:
            self.buffer.load_state_dict(saved)
        except (RuntimeError, ValueError, KeyError, TypeError, AssertionError) as e:
            raise UserError(f"resume: the checkpoint's replay buffer cannot be used: {e}") from None
        log.info("%s: the run resumes with the checkpoint's replay buffer (%d transitions)", self.name,
                 self.buffer.transitions)
