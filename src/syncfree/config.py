"""Typed configuration: the sections of `TrainConfig` and their validation (the switches: `syncfree.core.switches`)."""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, cast

from syncfree.core.switches import RETIRED, PerfConfig
from syncfree.errors import UserError, check

log = logging.getLogger("syncfree")


@dataclass
class EnvConfig:
    """The environments: how many. A task whose envs read options has its own section type, a subclass of this one
    (`syncfree.tasks`), so each task's `env` section holds just what its envs read."""

    num_envs: int = 256
    """Parallel environments per process: under torchrun each rank steps its own `num_envs` envs, so an
    iteration collects `world_size x num_envs x ppo.steps_per_env` env steps."""

    def rows(self) -> int:
        """Env rows the trainer acts for: one per env (a multi-agent task: one per agent)."""
        return self.num_envs

    def describe(self, rows: int) -> str:
        """`rows` env rows in words, for the start-up line and `syncfree eval`."""
        return f"{rows} envs"

    def validate(self) -> None:
        check(self.num_envs >= 1, "env.num_envs", "an integer >= 1", self.num_envs)


@dataclass
class TimeLimitEnvConfig(EnvConfig):
    """Envs whose time limit a run may change (the classic tasks, g1-track)."""

    max_episode_length: int = 0
    """Time limit in env steps; 0 keeps the task's own (500 for CartPole, 200 for Pendulum, 500 for g1-track)."""
    random_start: bool = False
    """Training starts each env's first episode at a random step of its time limit (rsl_rl's
    `init_at_random_ep_len`), so that the envs' episodes do not all end in the same step: where few episodes end
    early, a rollout would otherwise hold the same part of every episode, and the next another. As in Isaac Lab,
    the first episodes' reported lengths (and g1-track's per-step tracking metrics, divided by them) count from the
    drawn step. Evaluation starts every episode at step 0."""

    def validate(self) -> None:
        super().validate()
        check(self.max_episode_length >= 0, "env.max_episode_length", "an integer >= 0", self.max_episode_length)


@dataclass
class TokenEncoderConfig:
    """The universal-token policy (`policy.kind=token`): its encoders, quantizer, decoder and critic."""

    encoders: dict[str, list[str]] = field(default_factory=lambda: {
        "motion": ["tokenizer/future_joint_pos", "tokenizer/future_joint_vel"],
        "keypoints": ["tokenizer/future_keypoints"],
    })
    """Encoder name -> the layout parts it reads, in order. Encoder k (in dict order) serves the envs whose
    `tokenizer/encoder_index` is k; an index with no encoder falls back to encoder 0."""
    encoder_hidden: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer sizes of every encoder MLP."""
    num_tokens: int = 4
    """Tokens per sample."""
    fsq_levels: list[int] = field(default_factory=lambda: [8, 5, 5, 5])
    """Quantization levels per token dimension (each >= 2); the token dimension is their count and the
    codebook size their product."""
    decoder_hidden: list[int] = field(default_factory=lambda: [512, 256, 128])
    """Hidden layer sizes of the action decoder (input: flattened tokens and the normalized `policy` part)."""
    critic_hidden: list[int] = field(default_factory=lambda: [512, 256, 128])
    """Hidden layer sizes of the critic MLP."""
    activation: Literal["elu", "tanh", "relu"] = "elu"
    """Hidden activation of every MLP."""
    init_std: float = 0.5
    """Initial action standard deviation (state-independent, learned)."""
    min_std: float = 0.05
    """Lower clamp of the learned standard deviation."""
    max_std: float = 2.0
    """Upper clamp of the learned standard deviation."""
    reconstruction_target: str = "motion"
    """Encoder whose normalized input the auxiliary decoder reconstructs from the tokens."""
    reconstruction_hidden: list[int] = field(default_factory=lambda: [256])
    """Hidden layer sizes of the auxiliary reconstruction MLP."""
    reconstruction_weight: float = 0.1
    """Factor applied by `auxiliary_loss` (the loss PPO adds to its own)."""
    normalize_obs: bool = True
    """Running mean/std normalization of the `policy` part, of each encoder's input and of the critic
    observation, updated by `update_normalizers`."""


@dataclass
class RecurrentPolicyConfig:
    """The recurrent token policy (`policy.kind=recurrent`, the grid-arena task's)."""

    core: Literal["lstm", "gru"] = "lstm"
    """Recurrent cell."""
    hidden: int = 64
    """Core input and state width."""
    embed_dim: int = 32
    """Token embedding width."""
    encoder_hidden: int = 64
    """Hidden width of the token encoder's MLP."""
    max_tokens: int = 64
    """Tokens read per observation (MettaGrid packs the valid ones first); 0: all. The grid-arena map shows an agent
    at most 56 valid tokens of its 500 (measured over 128,000 observations); the log's `obs_over_max_tokens` is the
    share of observations with more valid tokens than this, whose excess goes unread."""
    last_action_input: bool = True
    """Feed the agent's previous action to the core."""


@dataclass
class PolicyConfig:
    """The policy's networks: the MLP actor and critic."""

    actor_hidden: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the actor MLP."""
    critic_hidden: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the critic MLP."""
    activation: Literal["elu", "tanh", "relu"] = "elu"
    """Hidden activation."""
    init_std: float = 1.0
    """Initial standard deviation of the Gaussian head (continuous actions)."""
    normalize_obs: bool = True
    """Running mean/std normalization of actor and critic observations, updated during rollouts."""
    obs_norm_std_offset: float = 0.0
    """0: observations are divided by sqrt(var + 1e-8); > 0: by sqrt(var) + this offset (rsl_rl's
    `EmpiricalNormalization` adds 0.01; `syncfree.rsl_rl` sets it, so rsl_rl checkpoints act the same)."""
    std_type: Literal["log", "scalar"] = "log"
    """How the Gaussian head learns its state-independent standard deviation: `log`, its logarithm; `scalar`, the
    standard deviation itself, clamped to [1e-6, 1e6] (rsl_rl's default `std_type`)."""
    actor_obs: Literal["policy", "critic"] = "policy"
    """The observation group the MLP actor reads: `policy`, or `critic` for a privileged actor that sees what the
    critic sees (a teacher to distill a deployable student from, `distill`)."""
    UNREAD: ClassVar[tuple[str, ...]] = ()
    """Fields of this section the policy does not read (a config of the earlier layout may hold any value there)."""

    kind: Literal["mlp", "token", "recurrent"] = "mlp"
    """`mlp`: the MLP actor-critic above. `token` (g1-track): the universal-token policy configured by `policy.token`
    (its own sizes; the fields above then do not apply). `recurrent` (grid-arena): the recurrent token policy of
    `policy.recurrent`, trained on BPTT segments. A task's config type says which it trains."""

    def validate(self, kinds: tuple[str, ...], task: str) -> None:
        check(self.kind in kinds, "policy.kind", f"{', '.join(kinds)} (the policies {task} trains)", self.kind)
        for key in ("actor_hidden", "critic_hidden"):
            sizes = getattr(self, key)
            check(len(sizes) > 0 and all(s >= 1 for s in sizes), f"policy.{key}", "a non-empty list of integers >= 1",
                  sizes)
        check(self.init_std > 0, "policy.init_std", "a number > 0", self.init_std)
        check(self.obs_norm_std_offset >= 0, "policy.obs_norm_std_offset", "a number >= 0", self.obs_norm_std_offset)
        check(self.std_type in ("log", "scalar"), "policy.std_type", "log, scalar", self.std_type)
        check(self.actor_obs in ("policy", "critic"), "policy.actor_obs", "policy, critic", self.actor_obs)


@dataclass
class TokenPolicyConfig(PolicyConfig):
    """The MLP policy, or (`kind=token`) the universal-token policy of `token`."""

    token: TokenEncoderConfig = field(default_factory=TokenEncoderConfig)


@dataclass
class RecurrentTokenPolicyConfig(PolicyConfig):
    """The recurrent token policy of `recurrent` (`kind=recurrent`; the MLP sizes above do not apply)."""

    UNREAD: ClassVar[tuple[str, ...]] = ("actor_hidden", "critic_hidden", "activation", "init_std", "normalize_obs",
                                         "obs_norm_std_offset", "std_type")
    """The MLP fields above: this policy does not read them, so they must keep their defaults."""

    kind: Literal["mlp", "token", "recurrent"] = "recurrent"
    recurrent: RecurrentPolicyConfig = field(default_factory=RecurrentPolicyConfig)

    def validate(self, kinds: tuple[str, ...], task: str) -> None:
        super().validate(kinds, task)
        mlp = PolicyConfig()
        for name in self.UNREAD:
            check(getattr(self, name) == getattr(mlp, name), f"policy.{name}",
                  f"{getattr(mlp, name)!r}: the recurrent token policy does not read it (its sizes are "
                  "policy.recurrent.*)", getattr(self, name))
        r = self.recurrent
        check(r.core in ("lstm", "gru"), "policy.recurrent.core", "lstm, gru", r.core)
        for name in ("hidden", "embed_dim", "encoder_hidden"):
            check(getattr(r, name) >= 1, f"policy.recurrent.{name}", "an integer >= 1", getattr(r, name))
        check(r.max_tokens >= 0, "policy.recurrent.max_tokens", "an integer >= 0 (0: all)", r.max_tokens)


@dataclass
class RecurrentCoreConfig:
    """The recurrent core of each network of the recurrent MLP policy (rsl_rl's `rnn_type`, `rnn_hidden_dim`,
    `rnn_num_layers`)."""

    core: Literal["lstm", "gru"] = "lstm"
    """Recurrent cell."""
    hidden: int = 256
    """State width of each layer (the MLP after the core reads the top layer's)."""
    num_layers: int = 1
    """Stacked cells, each reading the hidden state of the one below."""


@dataclass
class RecurrentMLPPolicyConfig(PolicyConfig):
    """`kind=recurrent` on flat observations: the actor and the critic each a recurrent core of `rnn` on their
    (normalized) observation group, followed by the MLP of `actor_hidden` / `critic_hidden` (rsl_rl's RNN
    actor-critic); trained on BPTT segments."""

    kind: Literal["mlp", "token", "recurrent"] = "recurrent"
    rnn: RecurrentCoreConfig = field(default_factory=RecurrentCoreConfig)

    def validate(self, kinds: tuple[str, ...], task: str) -> None:
        super().validate(kinds, task)
        r = self.rnn
        check(r.core in ("lstm", "gru"), "policy.rnn.core", "lstm, gru", r.core)
        for name in ("hidden", "num_layers"):
            check(getattr(r, name) >= 1, f"policy.rnn.{name}", "an integer >= 1", getattr(r, name))


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
    weight_decay: float = 0.0
    """AdamW weight decay."""

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


RUN_NAME_BYTES = 255
"""The longest file name most file systems take."""


@dataclass
class LogConfig:
    """Where a run writes (metrics, checkpoints, config) and what it logs to."""

    dir: str = "runs"
    """Root folder; each run writes `<dir>/<run_name>/` (metrics.jsonl, checkpoints, config)."""
    run_name: str = ""
    """Run folder name; empty means `<task>-<timestamp>`."""
    tensorboard: bool = False
    """Also write TensorBoard event files."""
    wandb: bool = False
    """Also log to Weights & Biases (needs the `wandb` extra; `WANDB_MODE=offline` logs to files)."""
    wandb_project: str = "syncfree"
    """W&B project."""
    wandb_entity: str = ""
    """W&B entity (user or team); empty: W&B's default for the logged-in user."""
    wandb_group: str = ""
    """W&B group (e.g. one per sweep, or the seeds of one config); empty: none."""
    wandb_id: str = ""
    """W&B run id; empty: a new one. The id is saved with the checkpoints, so a resumed run continues the same
    W&B run."""
    progress: bool = True
    """Report progress on stderr while training (see `progress_style`)."""
    progress_style: Literal["auto", "bar", "lines"] = "auto"
    """`bar`: a progress bar; `lines`: one line every `progress_every` iterations (iteration, env steps, the
    learning figure, steps/s, time left), which reads well in a log file; `auto`: a bar on a terminal, lines when
    stderr is a file or a pipe."""
    progress_every: int = 0
    """With line output, one line every this many iterations (and the first and the last); 0: about 20 lines a
    run."""


STOP_CONDITION = re.compile(r"\s*([A-Za-z_][\w/.]*)\s*(>=|<=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*")
"""`callbacks.stop_when`: `<metric> <op> <number>`."""


@dataclass
class CallbackConfig:
    """What happens between iterations, outside the hot loop: evaluation, the best checkpoint, early stopping (rank 0
    decides; with several processes all ranks stop one iteration later)."""

    eval_every: int = 0
    """Evaluate the policy every this many iterations (0: never) on `eval_envs` fresh envs of the task, each's first
    episode with the most likely actions; the record (metrics.jsonl, TensorBoard) gets `eval_return` and
    `eval_return_std`. Random draws of training are not touched: a run with evaluations trains bit for bit as one
    without."""
    eval_envs: int = 16
    """Envs per evaluation (a multi-agent task: simulations, every agent's first episode)."""
    eval_seed: int = 12345
    """The evaluation envs' seed (the same envs each time, so evaluations compare)."""
    save_best: str = ""
    """A record metric (e.g. `eval_return`, `mean_return`): `best.pt` in the run folder is written whenever it
    reaches a new high; empty: no best checkpoint."""
    stop_when: str = ""
    """`<metric> <op> <number>` (op `>=`, `<=`, `>` or `<`; e.g. `eval_return >= 450`): stop, saving, after the first
    iteration whose record meets it; empty: never."""
    patience: int = 0
    """Stop, saving, when the `save_best` metric has not reached a new high in this many of the records that report
    it (0: never)."""

    def validate(self) -> None:
        check(self.eval_every >= 0, "callbacks.eval_every", "an integer >= 0 (0: never)", self.eval_every)
        check(self.eval_envs >= 1, "callbacks.eval_envs", "an integer >= 1", self.eval_envs)
        check(self.stop_when == "" or STOP_CONDITION.fullmatch(self.stop_when) is not None, "callbacks.stop_when",
              "'<metric> <op> <number>' with op one of >=, <=, >, < (e.g. 'eval_return >= 450')", self.stop_when)
        check(self.patience >= 0, "callbacks.patience", "an integer >= 0 (0: never)", self.patience)
        check(self.patience == 0 or self.save_best != "", "callbacks.patience",
              "0 unless callbacks.save_best names the metric it watches", self.patience)
        condition = self.stop_condition()
        for key, metric in (("callbacks.save_best", self.save_best), ("callbacks.stop_when", condition and condition[0])):
            check(not (isinstance(metric, str) and metric.startswith("eval_")) or self.eval_every > 0, key,
                  f"a metric the records have ({metric} comes only with callbacks.eval_every > 0)",
                  self.save_best if key == "callbacks.save_best" else self.stop_when)

    def stop_condition(self) -> tuple[str, str, float] | None:
        """`stop_when` as (metric, op, value), or None."""
        match = STOP_CONDITION.fullmatch(self.stop_when)
        return (match.group(1), match.group(2), float(match.group(3))) if match else None


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
    activation: Literal["elu", "tanh", "relu"] = "elu"
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
        check(self.activation in ("elu", "tanh", "relu"), "rnd.activation", "elu, tanh, relu", self.activation)


@dataclass
class DistillConfig:
    """Student-teacher distillation (rsl_rl's `Distillation`): instead of PPO, the policy (the student) is trained
    to output what a frozen teacher policy, read from a checkpoint, outputs on the same states. The student acts
    (sampling from its Gaussian, so it visits the states its own mistakes lead to, DAgger-style), the teacher's mean
    action is stored beside each step, and the update regresses the student's mean onto it. The teacher may read a
    privileged group (its `policy.actor_obs=critic`) while the student reads only `policy.actor_obs`. The teacher is
    a feed-forward MLP policy; the student an MLP one or, with `policy.kind=recurrent` on a task of flat observations,
    the recurrent MLP policy; continuous actions. The student's critic is not trained."""

    teacher: str = ""
    """A syncfree checkpoint (`.pt`) of a feed-forward MLP policy for this task; set, the run distills."""
    loss: Literal["mse", "huber"] = "mse"
    """The regression loss between the student's and the teacher's mean actions (rsl_rl's `loss_type`)."""
    gradient_length: int = 15
    """Rollout steps whose losses are summed into one optimizer step (rsl_rl's `gradient_length`): an update takes
    `num_epochs * ppo.steps_per_env // gradient_length` steps; the remaining steps count in the logged loss only."""
    num_epochs: int = 1
    """Passes over the rollout per update (rsl_rl's `num_learning_epochs`)."""
    learning_rate: float = 1e-3
    """Adam's step size (fixed)."""
    max_grad_norm: float = 0.0
    """Clip the gradient to this norm; 0: no clipping (rsl_rl's default, `max_grad_norm=None`)."""

    def enabled(self) -> bool:
        return bool(self.teacher)

    def validate(self, steps_per_env: int) -> None:
        check(self.loss in ("mse", "huber"), "distill.loss", "mse, huber", self.loss)
        check(self.num_epochs >= 1, "distill.num_epochs", "an integer >= 1", self.num_epochs)
        total = self.num_epochs * steps_per_env
        check(self.gradient_length >= 1, "distill.gradient_length", "an integer >= 1", self.gradient_length)
        check(not self.enabled() or self.gradient_length <= total, "distill.gradient_length",
              f"at most distill.num_epochs * ppo.steps_per_env = {total} (else no step is ever taken)",
              self.gradient_length)
        check(self.learning_rate > 0, "distill.learning_rate", "a number > 0", self.learning_rate)
        check(self.max_grad_norm >= 0, "distill.max_grad_norm", "a number >= 0 (0: no clipping)", self.max_grad_norm)


@dataclass
class DistributedConfig:
    """Multi-process training (`torchrun --nproc_per_node=N -m syncfree train ...`); inert in a single process."""

    timeout: float = 120.0
    """Seconds a collective waits for the other ranks before it fails: a rank that died or hangs makes the others
    stop with an error naming the lost peer instead of waiting forever."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """Process-group backend; `auto`: NCCL when training on CUDA (each rank on `cuda:LOCAL_RANK`), gloo on CPU."""


@dataclass
class TrainConfig:
    """Train PPO on a task. A task's config type is this class or a subclass with the sections its envs, policy
    and algorithm read (`syncfree.tasks`); `RecurrentTrainConfig` is the recurrent algorithm's."""

    POLICY_KINDS: ClassVar[tuple[str, ...]] = ("mlp",)
    """The `policy.kind` values this config type trains."""

    task: str = "cartpole"
    """Task name (see `syncfree tasks`)."""
    seed: int = 0
    """Seeds torch, numpy, Python and the environment."""
    device: str = "auto"
    """`cpu`, `cuda`, `cuda:N`, or `auto` (CUDA when available)."""
    threads: int = 0
    """torch intra-op threads of this process; 0 chooses: `OMP_NUM_THREADS` or a count the program set with
    `torch.set_num_threads` are kept; else 1 when several processes or a simulator's own threads share the cores,
    or on the CPU with fewer than 1,024 envs (more threads do not pay there and stall on a busy machine); else
    torch's default (the core count). The start-up line says which."""
    iterations: int = 100
    """Training iterations (rollout + update)."""
    save_every: int = 50
    """Checkpoint every K iterations (and always at the end)."""
    resume: str = ""
    """Checkpoint to continue from; the run continues exactly where it stopped, in a new run folder beside the
    resumed run's (`log.run_name`, else `<its run>-resumed-<time>`) that starts with its metrics up to the
    checkpoint."""
    resume_in_place: bool = False
    """With `resume`: write on in the checkpoint's own folder (its metrics past the checkpoint are dropped; refused
    while another process trains there), e.g. a job that requeues itself with the same `--resume`."""
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    log: LogConfig = field(default_factory=LogConfig)
    perf: PerfConfig = field(default_factory=PerfConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    callbacks: CallbackConfig = field(default_factory=CallbackConfig)
    symmetry: SymmetryConfig = field(default_factory=SymmetryConfig)
    rnd: RNDConfig = field(default_factory=RNDConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)

    def minibatch_rows(self) -> tuple[int, str]:
        """What a rollout's minibatches split (`ppo.num_minibatches` must divide it): the count and how it is
        made."""
        return self.env.rows() * self.ppo.steps_per_env, "env.num_envs * ppo.steps_per_env"

    def unused_settings(self, defaults: TrainConfig | None = None) -> list[tuple[str, str]]:
        """Settings of a feature that is off, set away from `defaults` (the task's preset; else the config type's
        own): (`key=value`, why it changes nothing). A user who set `rnd.weight` without `rnd.enabled` is told
        rather than left to wonder."""
        unused = []
        base = defaults if defaults is not None else type(self)()
        if not self.rnd.enabled:
            default = base.rnd
            unused += [(f"rnd.{f.name}={getattr(self.rnd, f.name)!r}", "rnd.enabled is false")
                       for f in dataclasses.fields(RNDConfig) if getattr(self.rnd, f.name) != getattr(default, f.name)]
        if not self.distill.enabled():
            default_distill = base.distill
            unused += [(f"distill.{f.name}={getattr(self.distill, f.name)!r}", "distill.teacher is empty")
                       for f in dataclasses.fields(DistillConfig)
                       if getattr(self.distill, f.name) != getattr(default_distill, f.name)]
        else:
            unused += [(f"ppo.{f.name}={getattr(self.ppo, f.name)!r}",
                        "distillation reads ppo.steps_per_env only (its own settings are distill.*)")
                       for f in dataclasses.fields(self.ppo)  # those the preset has (not a recurrent one's own)
                       if f.name != "steps_per_env" and hasattr(base.ppo, f.name)
                       and getattr(self.ppo, f.name) != getattr(base.ppo, f.name)]
        if not self.symmetry.active() and self.symmetry.mirror != base.symmetry.mirror:
            unused.append((f"symmetry.mirror={self.symmetry.mirror!r}",
                           "symmetry.augment, symmetry.mirror_loss and symmetry.log_only are all false"))
        if not self.symmetry.mirror_loss and self.symmetry.mirror_loss_coef != base.symmetry.mirror_loss_coef:
            unused.append((f"symmetry.mirror_loss_coef={self.symmetry.mirror_loss_coef!r}",
                           "symmetry.mirror_loss is false"))
        return unused

    def validate(self) -> None:
        """Reject values that parse but make no sense, naming the key (the task name is checked by
        `syncfree.tasks.check_task`)."""
        for key, value in _numbers(self):
            check(math.isfinite(value), key, "a finite number", value)
        check(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"), "device",
              "auto, cpu, cuda, cuda:N", self.device)
        check(self.iterations >= 0, "iterations", "an integer >= 0", self.iterations)
        check(self.threads >= 0, "threads", "an integer >= 0 (0: chosen)", self.threads)
        check(self.save_every >= 1, "save_every", "an integer >= 1", self.save_every)
        check(bool(self.resume) or not self.resume_in_place, "resume_in_place", "false unless resume names a checkpoint",
              self.resume_in_place)
        self.env.validate()
        self.policy.validate(self.POLICY_KINDS, self.task)
        self.ppo.validate()
        rows, made = self.minibatch_rows()
        check(1 <= self.ppo.num_minibatches <= rows and rows % self.ppo.num_minibatches == 0, "ppo.num_minibatches",
              f"a divisor of {made} = {rows}", self.ppo.num_minibatches)
        name = self.log.run_name
        check(name == "" or (name not in (".", "..") and not any(c in name for c in "/\\\0")
                             and len(name.encode()) <= RUN_NAME_BYTES), "log.run_name",
              f"one folder name inside log.dir (no '/', not '.' or '..', at most {RUN_NAME_BYTES} bytes)",
              name if len(name) <= 80 else f"{name[:40]}...{name[-20:]} ({len(name.encode())} bytes)")
        check(self.log.progress_style in ("auto", "bar", "lines"), "log.progress_style", "auto, bar, lines",
              self.log.progress_style)
        check(self.log.progress_every >= 0, "log.progress_every", "an integer >= 0 (0: about 20 lines a run)",
              self.log.progress_every)
        self.callbacks.validate()
        self.symmetry.validate()
        self.rnd.validate()
        self.validate_distill()
        check(self.distributed.timeout > 0, "distributed.timeout", "a number of seconds > 0", self.distributed.timeout)
        check(self.distributed.backend in ("auto", "nccl", "gloo"), "distributed.backend", "auto, nccl, gloo",
              self.distributed.backend)
        _validate_perf(self.perf)

    def validate_distill(self) -> None:
        """`distill`'s own values, and what distillation trains: rsl_rl refuses RND and symmetry with it too."""
        self.distill.validate(self.ppo.steps_per_env)
        if not self.distill.enabled():
            return
        check(not self.rnd.enabled, "rnd.enabled", "false while distill.teacher is set (no reward to add to)",
              self.rnd.enabled)
        check(not self.symmetry.active(), "symmetry.augment",
              "false while distill.teacher is set (distillation has no PPO loss to augment)",
              self.symmetry.augment or self.symmetry.mirror_loss or self.symmetry.log_only)


@dataclass
class RecurrentTrainConfig(TrainConfig):
    """PPO on BPTT segments with a recurrent policy, and its teacher losses (`syncfree.algo.recurrent`)."""

    POLICY_KINDS: ClassVar[tuple[str, ...]] = ("recurrent",)
    MIRRORABLE: ClassVar[bool] = False
    """Whether the policy this config trains can take `symmetry` (the recurrent MLP policy can)."""

    policy: RecurrentTokenPolicyConfig = field(default_factory=RecurrentTokenPolicyConfig)
    ppo: RecurrentPPOConfig = field(default_factory=RecurrentPPOConfig)
    losses: LossesConfig = field(default_factory=LossesConfig)

    def minibatch_rows(self) -> tuple[int, str]:
        """Minibatches of whole BPTT segments."""
        segments = self.env.rows() * (self.ppo.steps_per_env // max(self.ppo.horizon(), 1))
        return segments, "the segments per rollout, env rows * ppo.steps_per_env / ppo.bptt_horizon"

    def validate(self) -> None:
        super().validate()
        self.losses.validate()
        check(not self.symmetry.active() or self.MIRRORABLE, "symmetry.augment",
              "false: symmetry covers MLP policies, feed-forward or recurrent, not the recurrent token policy",
              self.symmetry.augment or self.symmetry.mirror_loss or self.symmetry.log_only)


@dataclass
class RecurrentFlatTrainConfig(RecurrentTrainConfig):
    """PPO on BPTT segments with the recurrent MLP policy, on a task of flat observations (`policy.kind=recurrent`
    there: `recurrent_config`). PPO's loss only: the teacher losses read discrete full distributions."""

    MIRRORABLE: ClassVar[bool] = True

    policy: RecurrentMLPPolicyConfig = field(default_factory=RecurrentMLPPolicyConfig)  # type: ignore[assignment]

    def validate(self) -> None:
        super().validate()
        for name in ("supervised", "kickstarter", "kickstarter_value", "behavior_cloning"):
            check(getattr(self.losses, name) == 0, f"losses.{name}",
                  "0: the recurrent MLP policy trains with losses.ppo only", getattr(self.losses, name))


def validate(cfg: TrainConfigT) -> TrainConfigT:
    """`cfg.validate()`, returning `cfg`."""
    cfg.validate()
    return cfg


def _validate_perf(perf: PerfConfig) -> None:
    check(perf.compile in ("off", "auto", "hot", "step"), "perf.compile", "off, auto, hot, step", perf.compile)
    check(perf.autocast in ("off", "auto", "bf16"), "perf.autocast", "off, auto, bf16", perf.autocast)
    check(perf.cuda_graphs in ("off", "auto", "on"), "perf.cuda_graphs", "off, auto, on", perf.cuda_graphs)
    for f in PerfConfig.switches():
        seed_before, value = f.metadata["seed_before"], getattr(perf, f.name)
        if seed_before != f.metadata["baseline"]:  # a switch with the seed's before as a third value
            check(isinstance(value, bool) or value == seed_before, f"perf.{f.name}", f"true, false, {seed_before}",
                  value)
    check(perf.cuda_graphs != "on" or perf.compile != "off", "perf.cuda_graphs",
          "off or auto while perf.compile=off (CUDA graphs replay compiled graphs)", perf.cuda_graphs)
    for f in PerfConfig.switches():
        if getattr(perf, f.name) != f.metadata["baseline"]:
            for other, needed in f.metadata["requires"].items():
                check(getattr(perf, other) == needed, f"perf.{other}",
                      f"{str(needed).lower()} while perf.{f.name}={getattr(perf, f.name)}", getattr(perf, other))
    check(perf.critic_chunk_size >= 1, "perf.critic_chunk_size", "an integer >= 1", perf.critic_chunk_size)
    check(perf.physics_partitions >= 1, "perf.physics_partitions", "an integer >= 1", perf.physics_partitions)


TrainConfigT = TypeVar("TrainConfigT", bound=TrainConfig)


def _numbers(section: Any, prefix: str = "") -> list[tuple[str, float]]:
    """Every float of a config (a value such as `1e400` parses to infinity)."""
    found = []
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            found += _numbers(value, f"{prefix}{f.name}.")
        elif isinstance(value, float):
            found.append((prefix + f.name, value))
    return found


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def dotted_keys(cls: type, prefix: str = "") -> list[str]:
    """Every option of the config type `cls` as a dotted key (`ppo.learning_rate`), sections walked into."""
    keys = []
    for f in dataclasses.fields(cls):
        sub = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if sub is not None and dataclasses.is_dataclass(sub):
            keys += dotted_keys(cast(type, sub), f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


def options_named(name: str, root: type, exact: bool = True) -> list[str]:
    """The options of `root` (any section) whose last part is `name` (`-` read as `_`), or with `exact=False` the
    nearest such name's."""
    by_leaf: dict[str, list[str]] = {}
    for dotted in dotted_keys(root):
        by_leaf.setdefault(dotted.rsplit(".", 1)[-1], []).append(dotted)
    leaf = name.replace("-", "_")
    if exact:
        return by_leaf.get(leaf, [])
    return [key for near in difflib.get_close_matches(leaf, list(by_leaf), n=1) for key in by_leaf[near]]


def key_hint(key: str, root: type = TrainConfig) -> str:
    """For an unknown dotted key of the config type `root`: the nearest known key at its level, else an option of
    that name (or a near one) in another section, and the keys of its section, as `; did you mean
    ppo.learning_rate? (allowed: ppo.steps_per_env, ...)`."""
    parts, cls, prefix, in_section = key.split("."), root, "", True
    leaf = parts[-1]
    for part in parts[:-1]:  # down to the section the unknown name is in
        field = {f.name: f for f in dataclasses.fields(cls)}.get(part)
        if field is None or not dataclasses.is_dataclass(field.default_factory):
            parts, in_section = [part], False  # a section that does not exist: the unknown name is the section's
            break
        cls, prefix = field.default_factory, f"{prefix}{part}."
    names = [f.name for f in dataclasses.fields(cls)]
    near = [prefix + name for name in difflib.get_close_matches(parts[-1].replace("-", "_"), names, n=1)]
    # `--num_envs`, `--ppo.num_envs`, `--envs.num_envs`: an option of that name in another section comes first
    close = options_named(leaf, root) or (near if in_section else []) or options_named(leaf, root, exact=False) or near
    close.sort(key=lambda option: -difflib.SequenceMatcher(None, key, option).ratio())  # `ppp.x`: ppo.x first
    guess = f"; did you mean {' or '.join(close[:3])}?" if close else ""
    return f"{guess} (allowed: {', '.join(prefix + name for name in names)})"


BAD_VALUE = re.compile(r'Parser key "([\w.]+)": Expected a (.+?)\. Got value: (.*)$')
"""How the parser reports a value of the wrong type or outside a choice."""

BAD_UNION_VALUE = re.compile(r'Parser key "([\w.]+)": Does not validate against any of the Union subtypes '
                             r'Subtypes: \[(.*?)\] .*Given value: (.*)$')
"""... and a value outside each type of a union (`bool | Literal["seed_before"]`), its message on one line."""


def value_error_line(message: str) -> str | None:
    """The parser's message for a bad value as one line in syncfree's words (`ppo.schedule='adaptiv' is invalid;
    allowed: fixed, adaptive, linear; did you mean adaptive?`), or None for another message."""
    union = BAD_UNION_VALUE.search(" ".join(message.split()))
    if union is not None:  # `true, false or seed_before`: each subtype's allowed values
        key, subtypes, value = union.groups()
        words = {"<class 'bool'>": "true, false"}
        allowed = [words.get(t.strip(), t.strip()) for t in re.split(r",\s*(?=<class|typing)", subtypes)]
        allowed = [re.sub(r"typing\.Literal\[(.*)\]", r"\1", a).replace("'", "") for a in allowed]
        return f"{key}={value!r} is invalid; allowed: {', '.join(allowed)}"
    match = BAD_VALUE.search(message)
    if match is None:
        return None
    key, expected, value = match.groups()
    choices = re.fullmatch(r"typing\.Literal\[(.*)\]", expected)
    if choices:
        allowed = [c.strip().strip("'\"") for c in choices.group(1).split(",")]
        near = difflib.get_close_matches(value, allowed, n=1)
        return (f"{key}={value!r} is invalid; allowed: {', '.join(allowed)}"
                + (f"; did you mean {near[0]}?" if near else ""))
    kind = re.fullmatch(r"<class '(\w+)'>", expected)
    words = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
    return f"{key}={value!r} is invalid; allowed: {words.get(kind.group(1), kind.group(1)) if kind else expected}"


def from_dict(cls: type, data: dict[str, Any], prefix: str = "", root: type | None = None) -> Any:
    """Build a nested config dataclass from a plain dict (as stored in checkpoints), rejecting unknown keys."""
    root = root or cls
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if cls is PerfConfig and key in RETIRED:
            log.warning("config: %s is ignored: the switch was removed (%s)", prefix + key, RETIRED[key])
            continue
        if key not in fields:
            hint = (key_hint(prefix + key, root) if issubclass(root, TrainConfig)
                    else f" (allowed: {', '.join(fields)})")
            raise UserError(f"config: unknown key {prefix + key!r}{hint}")
        sub = fields[key].default_factory if fields[key].default_factory is not dataclasses.MISSING else None
        if sub is not None and dataclasses.is_dataclass(sub):
            if not isinstance(value, dict):
                raise UserError(f"config: {prefix + key} is a section (a mapping of options), found "
                                f"{type(value).__name__} {_shown(value)}")
            value = from_dict(sub, value, prefix=f"{prefix}{key}.", root=root)
        else:
            check_type(value, field_types(cls)[key], prefix + key)
        kwargs[key] = value
    return cls(**kwargs)


def field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each field of the config dataclass `cls`."""
    import typing

    return typing.get_type_hints(cls)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} characters)"


def _type_words(annotation: Any) -> str:
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is list:
        return f"a list of {_type_words(args[0])}s" if args else "a list"
    if origin in (typing.Union, __import__("types").UnionType):
        return " or ".join(_type_words(a) for a in args)
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            type(None): "null"}.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _is_type(value: Any, annotation: Any) -> bool:
    import types
    import typing

    if annotation is Any:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(_is_type(value, a) for a in args)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple)) and (not args or all(_is_type(v, args[0]) for v in value))
    if origin is dict:
        return isinstance(value, dict)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is type(None):
        return value is None
    return isinstance(value, annotation) if isinstance(annotation, type) else True


def check_type(value: Any, annotation: Any, key: str) -> None:
    """A stored config's value has its field's type (a config file, a checkpoint's config): one line naming the key
    otherwise."""
    if not _is_type(value, annotation):
        raise UserError(f"config: {key}={_shown(value)} is invalid; allowed: {_type_words(annotation)}")


CONFIG_FILE_BYTES = 1 << 20
"""The largest config file read (a whole config is a few kilobytes)."""


def read_config_file(path: str) -> dict[str, Any]:
    """A YAML config file's mapping (`syncfree train --config`); one line naming the file when it cannot be read.

    A config is plain data: a file over `CONFIG_FILE_BYTES`, or one that uses YAML anchors and aliases (with which
    a file of a few hundred bytes expands to gigabytes: "billion laughs"), is refused before anything is built from
    it; the check reads the file's events, which do not expand aliases."""
    import yaml

    try:
        with open(path, "rb") as f:
            raw = f.read(CONFIG_FILE_BYTES + 1)
        if len(raw) > CONFIG_FILE_BYTES:
            raise UserError(f"config: {path} is over {CONFIG_FILE_BYTES // 1024} KiB; a config file is a few KiB of "
                            "plain data")
        text = raw.decode("utf-8")
        if any(isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None
               for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise UserError(f"config: {path} uses YAML anchors or aliases; a config file is plain data (write each "
                            "value out)")
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"config: cannot read {path} ({type(e).__name__})") from None
    return data if isinstance(data, dict) else {}


UNKNOWN_KEY = (r"unrecognized arguments: --([\w.-]+)", r"Group '([\w.-]+)' does not accept option '([\w.-]+)'",
               r"Option '([\w.-]+)' is not accepted")
"""How the parser names an unknown key: on the command line, in a section of a YAML file, at its top level."""


def unknown_key_hint(message: str, cls: type = TrainConfig) -> str:
    """For an unknown key (on the command line or in a YAML file), the nearest known key of `cls` and the keys of
    its section."""
    match = next((m for m in (re.search(p, message) for p in UNKNOWN_KEY) if m), None)
    return key_hint(".".join(match.groups()), cls) if match else ""


def merge(tree: dict[str, Any], path: list[str], value: Any) -> None:
    """Set `tree[path[0]]...[path[-1]] = value`; a dict value updates a section key by key."""
    *sections, name = path
    for section in sections:
        tree = tree.setdefault(section, {})
        if not isinstance(tree, dict):
            raise UserError(f"config: {'.'.join(path)}: {section} is not a section")
    if isinstance(value, dict) and isinstance(tree.get(name), dict):
        for key, item in value.items():
            merge(tree[name], [key], item)
    else:
        tree[name] = value
