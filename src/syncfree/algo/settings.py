"""The algorithms' own sections: PPO's (`ppo`; on BPTT segments `RecurrentPPOConfig`), recurrent PPO's teacher
losses (`losses`), mirror symmetry (`symmetry`), random network distillation (`rnd`) and student-teacher
distillation (`distill`). Each validates itself; the config types that hold them are in `syncfree.algo.configs`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from syncfree.errors import check

OPTIMIZERS = ("adam", "adamw", "muon", "schedule_free_adamw")
"""The optimizers a policy may step with (`ppo.optimizer`, `distill.optimizer`)."""


@dataclass
class PPOConfig:
    """PPO: rollout length, epochs and minibatches, learning rate and its schedule, losses' coefficients."""

    steps_per_env: int = 16
    """Rollout length per environment and iteration."""
    num_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 4
    """Minibatches per epoch."""
    learning_rate: float = 1e-3
    """Initial learning rate."""
    schedule: Literal["fixed", "adaptive", "linear"] = "adaptive"
    """`adaptive` scales the learning rate by 1.5 to keep the KL near `desired_kl`; `linear` anneals it from
    `learning_rate` at the first iteration towards 0 at the end of the run, `learning_rate` x (1 - iteration /
    iterations) (CleanRL's `anneal_lr`); `fixed` keeps it."""
    desired_kl: float = 0.01
    """Target KL for the adaptive schedule."""
    kl_adapt_every: Literal["minibatch", "update"] = "minibatch"
    """When the adaptive schedule adapts: `minibatch`, after each minibatch on that minibatch's KL (rsl_rl); or
    `update`, once per iteration on the mean KL of the update's minibatches. The KL is measured against the
    rollout's policy, so it restarts near 0 at every update: per minibatch, the rate climbs x1.5 per minibatch
    while the KL is low, overshoots, and falls back, often to its 1e-5 floor, before the update ends (g1-track
    at 256 envs: at the floor after 100 % of its first 40 updates). Per update it settles where the update's
    KL is near the target."""
    gamma: float = 0.99
    """Discount."""
    lam: float = 0.95
    """GAE lambda."""
    clip_param: float = 0.2
    """PPO ratio clip (also the value clip)."""
    value_loss_coef: float = 1.0
    """Weight of the value loss."""
    clipped_value_loss: bool = True
    """Clip value updates like the policy ratio."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus."""
    normalize_rewards: bool = False
    """Divide each reward by the running standard deviation of the env's discounted return and clip it to ±10
    (`syncfree.policy.normalizer.RewardScale`; the `NormalizeReward` wrapper of Gym that CleanRL's MuJoCo PPO
    uses): returns of order 1 whatever the task's reward scale. Logged returns stay in the env's units. With
    several processes each keeps its own statistics."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip (see `grad_clip`)."""
    grad_clip: Literal["per_network", "global"] = "per_network"
    """`per_network`: the actor's gradient (its MLP and action distribution) and the critic's are each clipped to
    `max_grad_norm` by their own norm, as rsl_rl 5 does; a large value-loss gradient then does not shrink the
    actor's step. `global`: one norm over all parameters (CleanRL, rsl_rl 2). A policy whose actor and critic share
    layers (the recurrent token policy) is clipped globally either way."""
    max_skipped_updates: int = 8
    """Stop the run (keeping the last good checkpoint) once this many minibatch updates in a row were skipped for
    non-finite gradients: the run has diverged. 0: never stop for it."""
    optimizer: Literal["adam", "adamw", "muon", "schedule_free_adamw"] = "adam"
    """What steps the parameters (`syncfree.algo.optim.make_optimizer`). `adam`: torch's AdamW with
    `weight_decay` (0 by default, which is Adam; the trainer's optimizer before this setting existed). `adamw`: the
    same with decoupled weight decay `weight_decay`, or torch's default 0.01 when that is 0. `muon`: torch's Muon
    (Newton-Schulz orthogonalized momentum, its step scaled to AdamW's RMS, so one `learning_rate` serves both) on
    the hidden weight matrices of each MLP (every linear layer's weight but its first and last), AdamW on the rest
    (biases, the input and output layers, the action distribution's parameters), both with `weight_decay`.
    `schedule_free_adamw`: schedule-free AdamW (Defazio et al. 2024, as the `schedulefree` package's
    `AdamWScheduleFree` without warm-up), made for a `fixed` schedule: the policy acts and steps with the
    interpolated weights, and the average it keeps is what evaluation during training, checkpoints (so `eval` and
    `export`) and `syncfree.learn`'s policy get. With `perf.compile=step` only `adam` and `adamw` run the whole-step graph; `muon` and
    `schedule_free_adamw` run the update as `hot` does."""
    weight_decay: float = 0.0
    """Decoupled weight decay of `optimizer` (see there)."""

    def decay(self) -> float:
        """The weight decay the optimizer steps with: `weight_decay`, or 0.01 for `adamw` when it is 0."""
        return 0.01 if self.optimizer == "adamw" and self.weight_decay == 0 else self.weight_decay

    def validate(self) -> None:
        check(self.steps_per_env >= 1, "ppo.steps_per_env", "an integer >= 1", self.steps_per_env)
        check(self.num_epochs >= 1, "ppo.num_epochs", "an integer >= 1", self.num_epochs)
        check(self.learning_rate > 0, "ppo.learning_rate", "a number > 0", self.learning_rate)
        check(self.desired_kl > 0, "ppo.desired_kl", "a number > 0", self.desired_kl)
        check(0 <= self.gamma <= 1, "ppo.gamma", "a number in [0, 1]", self.gamma)
        check(0 <= self.lam <= 1, "ppo.lam", "a number in [0, 1]", self.lam)
        check(self.clip_param > 0, "ppo.clip_param", "a number > 0", self.clip_param)
        check(self.max_grad_norm > 0, "ppo.max_grad_norm", "a number > 0", self.max_grad_norm)
        check(self.max_skipped_updates >= 0, "ppo.max_skipped_updates", "an integer >= 0 (0: never stop)",
              self.max_skipped_updates)
        check(self.weight_decay >= 0, "ppo.weight_decay", "a number >= 0", self.weight_decay)
        check(self.optimizer in OPTIMIZERS, "ppo.optimizer", ", ".join(OPTIMIZERS), self.optimizer)


@dataclass
class RecurrentPPOConfig(PPOConfig):
    """PPO on BPTT segments: the fields above, and segments, V-trace and the minibatch sampler."""

    bptt_horizon: int = 16
    """Steps per BPTT segment (a divisor of `steps_per_env`); 0: the whole rollout, one segment per env (as rsl_rl
    trains its recurrent models)."""
    advantage: Literal["gae", "vtrace"] = "gae"
    """`gae`, or GAE with V-trace's clipped importance weights, recomputed every epoch from
    the ratios of the latest policy."""
    vtrace_rho_clip: float = 1.0
    """V-trace: clip of the importance weight on the TD error."""
    vtrace_c_clip: float = 1.0
    """V-trace: clip of the importance weight on the trace."""
    minibatch_sampler: Literal["sequential", "prioritized"] = "sequential"
    """Minibatches of consecutive segments, or segments drawn with probability proportional
    to mean |advantage| ** `prio_alpha`, weighted by importance weights with exponent annealed from `prio_beta0`
    to 1 over the run."""
    prio_alpha: float = 0.6
    """Prioritized sampling: priority exponent."""
    prio_beta0: float = 0.4
    """Prioritized sampling: initial importance-weight exponent."""

    def validate(self) -> None:
        super().validate()
        check(self.bptt_horizon == 0 or (self.bptt_horizon >= 2 and self.steps_per_env % self.bptt_horizon == 0),
              "ppo.bptt_horizon", f"an integer >= 2 dividing ppo.steps_per_env={self.steps_per_env} (0: all of it)",
              self.bptt_horizon)
        check(self.horizon() >= 2, "ppo.steps_per_env", "an integer >= 2 (a BPTT segment has at least 2 steps)",
              self.steps_per_env)
        check(self.advantage in ("gae", "vtrace"), "ppo.advantage", "gae, vtrace", self.advantage)
        check(self.vtrace_rho_clip > 0 and self.vtrace_c_clip > 0, "ppo.vtrace_rho_clip", "clips > 0",
              (self.vtrace_rho_clip, self.vtrace_c_clip))
        check(self.minibatch_sampler in ("sequential", "prioritized"), "ppo.minibatch_sampler",
              "sequential, prioritized", self.minibatch_sampler)
        check(0 <= self.prio_beta0 <= 1, "ppo.prio_beta0", "a number in [0, 1]", self.prio_beta0)

    def horizon(self) -> int:
        """Steps per BPTT segment (`bptt_horizon`, or the whole rollout when it is 0)."""
        return self.bptt_horizon or self.steps_per_env


@dataclass
class LossesConfig:
    """Weights of the recurrent trainer's losses (0 disables one). Teacher losses read a teacher: the scripted
    teacher of the `mines` map (`supervised`) or a syncfree checkpoint (`kickstarter`, `behavior_cloning`)."""

    ppo: float = 1.0
    """PPO's clipped surrogate, value loss and entropy bonus."""
    supervised: float = 0.0
    """Cross-entropy to the teacher actions the env provides (on MettaGrid's `mines` map: a scripted teacher that
    walks to the nearest mine)."""
    kickstarter: float = 0.0
    """KL(teacher || student) over the full action distribution, teacher from `losses.teacher`."""
    kickstarter_value: float = 0.0
    """Huber loss of the student's value to the teacher's."""
    behavior_cloning: float = 0.0
    """Cross-entropy to the teacher's most likely action, teacher from `losses.teacher`."""
    teacher: str = ""
    """Checkpoint of a recurrent grid-arena run (its policy is the teacher of `kickstarter` and
    `behavior_cloning`)."""

    def validate(self) -> None:
        for name in ("ppo", "supervised", "kickstarter", "kickstarter_value", "behavior_cloning"):
            check(getattr(self, name) >= 0, f"losses.{name}", "a weight >= 0", getattr(self, name))
        teacher_losses = self.kickstarter + self.kickstarter_value + self.behavior_cloning > 0
        check(bool(self.teacher) == teacher_losses, "losses.teacher",
              "a checkpoint path when kickstarter, kickstarter_value or behavior_cloning is on (and empty otherwise)",
              self.teacher)
        check(self.ppo + self.supervised + self.kickstarter + self.kickstarter_value + self.behavior_cloning > 0,
              "losses", "at least one weight > 0", "all 0")


@dataclass
class SymmetryConfig:
    """Mirror symmetry (rsl_rl's `symmetry_cfg`): the env's reflection of observations and actions
    (`VecEnv.mirror`, or `mirror`) used to augment each minibatch and/or as a mirror loss. MLP policies with
    continuous actions, feed-forward or recurrent (the rollout then carries the state of each agent's mirrored
    history, from which the mirrored rows are replayed)."""

    augment: bool = False
    """Append each minibatch's reflection (observations and actions mirrored, old log-probabilities, values,
    advantages and returns repeated) so the surrogate and value losses see both; entropy and KL are taken on the
    original samples, as rsl_rl does."""
    mirror_loss: bool = False
    """Add `mirror_loss_coef` x the mirror loss to the loss (its target, the mirrored mean on the original
    observations, carries no gradient)."""
    mirror_loss_coef: float = 0.0
    """The mirror loss's weight in the loss."""
    log_only: bool = False
    """Compute and log the mirror loss without training on it, when neither `augment` nor `mirror_loss` is on
    (rsl_rl's symmetry with both off)."""
    mirror: str = ""
    """`module:function` returning the `Mirror` to use for an env (called with the env); empty: the env's own."""

    def active(self) -> bool:
        """Any of it is on: the mirror loss is then computed each minibatch and logged as `symmetry_loss`
        (the mean of |mean(pi(mirror(s))) - mirror(mean(pi(s)))|^2 over the minibatch's rows and action entries)."""
        return self.augment or self.mirror_loss or self.log_only

    def validate(self) -> None:
        check(self.mirror_loss_coef >= 0, "symmetry.mirror_loss_coef", "a number >= 0", self.mirror_loss_coef)
        check(not self.mirror or ":" in self.mirror, "symmetry.mirror", "module:function, or empty (the env's own)",
              self.mirror)


@dataclass
class RNDConfig:
    """Random network distillation (rsl_rl's `rnd_cfg`): a fixed random target network and a predictor trained to
    match it on one observation group; the prediction error on each step's next observation, weighted, is added to
    the env's reward, so states the predictor has seen little of pay more. MLP policies, feed-forward or recurrent,
    on a flat observation group."""

    enabled: bool = False
    """Add the intrinsic reward and train the predictor."""
    state: Literal["policy", "critic"] = "policy"
    """The observation group the networks read (rsl_rl's `obs_groups["rnd_state"]`; its default is the policy's)."""
    weight: float = 0.0
    """The intrinsic reward's weight (before `weight_schedule`). rsl_rl multiplies its `weight` by the env's step
    duration; the rsl_rl drop-in does that, this setting is the product."""
    weight_schedule: Literal["constant", "step", "linear"] = "constant"
    """How the weight changes with the env steps taken (counted per step of the vectorized env, as rsl_rl counts):
    `step`: `weight` before `final_step`, `final_value` from it; `linear`: from `weight` at `initial_step` to
    `final_value` at `final_step`."""
    initial_step: int = 0
    final_step: int = 0
    final_value: float = 0.0
    num_outputs: int = 1
    """The width of the networks' embedding."""
    predictor_hidden: list[int] = field(default_factory=lambda: [-1])
    """The predictor's hidden layers (-1: the group's width)."""
    target_hidden: list[int] = field(default_factory=lambda: [-1])
    """The target's hidden layers (-1: the group's width)."""
    activation: Literal["elu", "tanh", "relu", "silu"] = "elu"
    state_normalization: bool = False
    """Normalize the networks' input by its running mean and deviation, updated once per iteration from the
    rollout's observations (as rsl_rl does)."""
    reward_normalization: bool = False
    """Divide the intrinsic reward by the running deviation of its discounted sum (discount 0.99)."""
    learning_rate: float = 1e-3
    """The predictor's Adam step size (its own optimizer; no gradient clipping, as rsl_rl)."""

    def validate(self) -> None:
        check(self.state in ("policy", "critic"), "rnd.state", "policy, critic", self.state)
        check(self.weight_schedule in ("constant", "step", "linear"), "rnd.weight_schedule", "constant, step, linear",
              self.weight_schedule)
        check(self.initial_step >= 0, "rnd.initial_step", "an integer >= 0", self.initial_step)
        check(self.final_step >= 0, "rnd.final_step", "an integer >= 0", self.final_step)
        check(self.weight_schedule != "linear" or self.final_step > self.initial_step, "rnd.final_step",
              f"> rnd.initial_step = {self.initial_step} with the linear schedule", self.final_step)
        check(self.num_outputs >= 1, "rnd.num_outputs", "an integer >= 1", self.num_outputs)
        for key in ("predictor_hidden", "target_hidden"):
            sizes = getattr(self, key)
            check(len(sizes) > 0 and all(s >= 1 or s == -1 for s in sizes), f"rnd.{key}",
                  "a non-empty list of layer widths (>= 1, or -1 for the group's width)", sizes)
        check(self.learning_rate > 0, "rnd.learning_rate", "a number > 0", self.learning_rate)
        check(self.activation in ("elu", "tanh", "relu", "silu"), "rnd.activation", "elu, tanh, relu, silu",
              self.activation)


@dataclass
class DistillConfig:
    """Student-teacher distillation (rsl_rl's `Distillation`): instead of PPO, the policy (the student) is trained
    to output what a frozen teacher policy, read from a checkpoint, outputs on the same states. The student acts
    (sampling from its Gaussian, so it visits the states its own mistakes lead to, DAgger-style), the teacher's mean
    action is stored beside each step, and the update regresses the student's mean onto it. The teacher may read a
    privileged group (its `policy.actor_obs=critic`) while the student reads only `policy.actor_obs`. The teacher is
    a feed-forward MLP policy; the student an MLP one (`--algorithm distillation`) or, on a task of flat
    observations, the recurrent MLP policy (`--algorithm recurrent-distillation`); continuous actions. The student's
    critic is not trained."""

    teacher: str = ""
    """A syncfree checkpoint (`.pt`) of a feed-forward MLP policy for this task (required)."""
    steps_per_env: int = 16
    """Rollout length per environment and iteration."""
    loss: Literal["mse", "huber"] = "mse"
    """The regression loss between the student's and the teacher's mean actions (rsl_rl's `loss_type`)."""
    gradient_length: int = 15
    """Rollout steps whose losses are summed into one optimizer step (rsl_rl's `gradient_length`): an update takes
    `num_epochs * steps_per_env // gradient_length` steps; the remaining steps count in the logged loss only."""
    num_epochs: int = 1
    """Passes over the rollout per update (rsl_rl's `num_learning_epochs`)."""
    learning_rate: float = 1e-3
    """The optimizer's step size (fixed)."""
    optimizer: Literal["adam", "adamw", "muon", "schedule_free_adamw"] = "adam"
    """`adam`, `adamw` (weight decay 0.01), `muon` (on the student's hidden matrices, AdamW on the rest) or
    `schedule_free_adamw`, as `ppo.optimizer` describes them."""
    max_grad_norm: float = 0.0
    """Clip the gradient to this norm; 0: no clipping (rsl_rl's default, `max_grad_norm=None`)."""

    def validate(self) -> None:
        check(self.teacher != "", "distill.teacher", "a checkpoint of the teacher policy (distillation needs one)",
              self.teacher)
        check(self.steps_per_env >= 1, "distill.steps_per_env", "an integer >= 1", self.steps_per_env)
        check(self.loss in ("mse", "huber"), "distill.loss", "mse, huber", self.loss)
        check(self.num_epochs >= 1, "distill.num_epochs", "an integer >= 1", self.num_epochs)
        total = self.num_epochs * self.steps_per_env
        check(self.gradient_length >= 1, "distill.gradient_length", "an integer >= 1", self.gradient_length)
        check(self.gradient_length <= total, "distill.gradient_length",
              f"at most distill.num_epochs * distill.steps_per_env = {total} (else no step is ever taken)",
              self.gradient_length)
        check(self.learning_rate > 0, "distill.learning_rate", "a number > 0", self.learning_rate)
        check(self.max_grad_norm >= 0, "distill.max_grad_norm", "a number >= 0 (0: no clipping)", self.max_grad_norm)
        check(self.optimizer in OPTIMIZERS, "distill.optimizer", ", ".join(OPTIMIZERS), self.optimizer)
