"""Typed configuration: the sections of `TrainConfig` and their validation (the switches: `syncfree.core.switches`)."""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from syncfree.core.switches import RETIRED, PerfConfig
from syncfree.errors import UserError

log = logging.getLogger("syncfree")


@dataclass
class GridEnvConfig:
    """One MettaGrid simulation of the grid-arena task (built with MettaGrid's own config builders)."""

    map: Literal["arena", "empty-room", "mines"] = "mines"
    """`mines`: mines placed at random, each push into one pays a heart (reward 1); `arena`: MettaGrid's arena
    builder; `empty-room`: no objects. Only `mines` pays reward (the others measure stepping speed)."""
    agents_per_env: int = 4
    """Agents per simulation."""
    width: int = 8
    """Playable width (without the wall border)."""
    height: int = 8
    """Playable height (without the wall border)."""
    max_steps: int = 64
    """Episode length (a time-out, bootstrapped from the value)."""
    mines: int = 6
    """Mines on the `mines` map."""


@dataclass
class G1TrackOptions:
    """g1-track: the settings whole-body tracking pipelines tune (read by the task, see `envs/tasks/g1_track`)."""

    history: int = 10
    """Steps of history of the policy's proprioceptive terms (gravity, angular velocity, joint positions and
    velocities, last actions)."""
    num_encoders: int = 2
    """Encoder types drawn per episode for a token-encoder policy (0: joints, 1: keypoints): 1 or 2, at most the
    number of `policy.token.encoders`."""
    tokenizer_frames: list[int] = field(default_factory=lambda: list(range(1, 11)))
    """Future reference frames (offsets >= 1 from the current target) in the token policy's encoder inputs."""
    sampler_bin_frames: int = 50
    """Adaptive start sampling: frames per bin of a clip."""
    sampler_uniform_ratio: float = 0.1
    """Share of the sampling probability kept uniform over clips (every clip weighs the same), in [0, 1]."""
    sampler_cap: float = 5.0
    """A bin's failure rate counts up to this multiple of the mean rate (> 0)."""
    sampler_decay: float = 0.9
    """Per-iteration decay of the bins' visit and failure counts, in [0, 1)."""


@dataclass
class EnvConfig:
    """The environments: how many, their episode limit, and the options of the tasks that read them."""

    num_envs: int = 256
    """Parallel environments per process: under torchrun each rank steps its own `num_envs` envs, so an
    iteration collects `world_size x num_envs x ppo.steps_per_env` env steps."""
    max_episode_length: int = 0
    """Time limit in env steps; 0 keeps the task's own (500 for CartPole, 200 for Pendulum, 500 for g1-track)."""
    robot: str = ""
    """g1-track: MJCF file of the robot; empty: the G1 29-DoF description shipped with syncfree."""
    motions: list[str] = field(default_factory=list)
    """g1-track: motion clips (.npz files or folders of them); empty: syncfree's generated clip set."""
    grid: GridEnvConfig = field(default_factory=GridEnvConfig)
    """grid-arena: the MettaGrid map; `num_envs` counts simulations, each with `grid.agents_per_env` agents."""
    g1: G1TrackOptions = field(default_factory=G1TrackOptions)
    """g1-track: history, encoders, tokenizer frames and the adaptive sampler."""
    backend: str = ""
    """g1-track: physics backend, `torch` (PD joints, root driven along the reference; no contacts), `mujoco`
    (MuJoCo on the CPU, real contacts) or `mujoco-warp` (MuJoCo Warp on the env's device: a GPU; Warp's CPU device works but is slow); empty:
    `torch`."""


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
    """The policy's networks: the MLP actor and critic, and the token and recurrent policies' own sections."""

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
    kind: Literal["mlp", "token", "recurrent"] = "mlp"
    """`mlp`: the MLP actor-critic above. `token`: the universal-token policy configured by `policy.token` (its
    own sizes; the fields above then do not apply). Needs a task with a `tokenizer` group (g1-track).
    `recurrent`: the recurrent token policy of `policy.recurrent`, trained on BPTT segments (grid-arena)."""
    token: TokenEncoderConfig = field(default_factory=TokenEncoderConfig)
    recurrent: RecurrentPolicyConfig = field(default_factory=RecurrentPolicyConfig)


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
    layers (the recurrent one) is clipped globally either way."""
    max_skipped_updates: int = 8
    """Stop the run (keeping the last good checkpoint) once this many minibatch updates in a row were skipped for
    non-finite gradients: the run has diverged. 0: never stop for it."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    bptt_horizon: int = 16
    """Recurrent policies: steps per BPTT segment (a divisor of `steps_per_env`)."""
    advantage: Literal["gae", "vtrace"] = "gae"
    """Recurrent policies: `gae`, or GAE with V-trace's clipped importance weights, recomputed every epoch from
    the ratios of the latest policy."""
    vtrace_rho_clip: float = 1.0
    """V-trace: clip of the importance weight on the TD error."""
    vtrace_c_clip: float = 1.0
    """V-trace: clip of the importance weight on the trace."""
    minibatch_sampler: Literal["sequential", "prioritized"] = "sequential"
    """Recurrent policies: minibatches of consecutive segments, or segments drawn with probability proportional
    to mean |advantage| ** `prio_alpha`, weighted by importance weights with exponent annealed from `prio_beta0`
    to 1 over the run."""
    prio_alpha: float = 0.6
    """Prioritized sampling: priority exponent."""
    prio_beta0: float = 0.4
    """Prioritized sampling: initial importance-weight exponent."""


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
    """Show a progress bar."""


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
    """Train a PPO policy on a built-in task."""

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
    """Checkpoint to continue from; the run continues exactly where it stopped."""
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    losses: LossesConfig = field(default_factory=LossesConfig)
    log: LogConfig = field(default_factory=LogConfig)
    perf: PerfConfig = field(default_factory=PerfConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)


def _check(ok: bool, key: str, allowed: str, value: Any) -> None:
    if not ok:
        raise UserError(f"config: {key}={value!r} is invalid; allowed: {allowed}")


def validate(cfg: TrainConfig) -> TrainConfig:
    """Reject values that parse but make no sense, naming the key (the task name is checked where envs are made:
    `syncfree.envs.tasks.check_task`)."""
    for key, value in _numbers(cfg):
        _check(math.isfinite(value), key, "a finite number", value)
    _check(cfg.device == "auto" or cfg.device == "cpu" or cfg.device.startswith("cuda"), "device",
           "auto, cpu, cuda, cuda:N", cfg.device)
    _check(cfg.iterations >= 0, "iterations", "an integer >= 0", cfg.iterations)
    _check(cfg.threads >= 0, "threads", "an integer >= 0 (0: chosen)", cfg.threads)
    _check(cfg.save_every >= 1, "save_every", "an integer >= 1", cfg.save_every)
    _check(cfg.env.num_envs >= 1, "env.num_envs", "an integer >= 1", cfg.env.num_envs)
    _check(cfg.env.max_episode_length >= 0, "env.max_episode_length", "an integer >= 0", cfg.env.max_episode_length)
    for key in ("actor_hidden", "critic_hidden"):
        sizes = getattr(cfg.policy, key)
        _check(len(sizes) > 0 and all(s >= 1 for s in sizes), f"policy.{key}", "a non-empty list of integers >= 1", sizes)
    _check(cfg.policy.init_std > 0, "policy.init_std", "a number > 0", cfg.policy.init_std)
    p = cfg.ppo
    _check(p.steps_per_env >= 1, "ppo.steps_per_env", "an integer >= 1", p.steps_per_env)
    _check(p.num_epochs >= 1, "ppo.num_epochs", "an integer >= 1", p.num_epochs)
    if cfg.policy.kind != "recurrent":
        batch = cfg.env.num_envs * p.steps_per_env
        _check(1 <= p.num_minibatches <= batch and batch % p.num_minibatches == 0, "ppo.num_minibatches",
               f"a divisor of env.num_envs * ppo.steps_per_env = {batch}", p.num_minibatches)
    _check(p.learning_rate > 0, "ppo.learning_rate", "a number > 0", p.learning_rate)
    _check(p.desired_kl > 0, "ppo.desired_kl", "a number > 0", p.desired_kl)
    _check(0 <= p.gamma <= 1, "ppo.gamma", "a number in [0, 1]", p.gamma)
    _check(0 <= p.lam <= 1, "ppo.lam", "a number in [0, 1]", p.lam)
    _check(p.clip_param > 0, "ppo.clip_param", "a number > 0", p.clip_param)
    _check(p.max_grad_norm > 0, "ppo.max_grad_norm", "a number > 0", p.max_grad_norm)
    _check(p.max_skipped_updates >= 0, "ppo.max_skipped_updates", "an integer >= 0 (0: never stop)",
           p.max_skipped_updates)
    _check(p.weight_decay >= 0, "ppo.weight_decay", "a number >= 0", p.weight_decay)
    _check(cfg.distributed.timeout > 0, "distributed.timeout", "a number of seconds > 0", cfg.distributed.timeout)
    _check(cfg.distributed.backend in ("auto", "nccl", "gloo"), "distributed.backend", "auto, nccl, gloo",
           cfg.distributed.backend)
    _check(cfg.perf.compile in ("off", "hot", "step"), "perf.compile", "off, hot, step", cfg.perf.compile)
    _check(cfg.perf.autocast in ("off", "auto", "bf16"), "perf.autocast", "off, auto, bf16", cfg.perf.autocast)
    _check(cfg.perf.cuda_graphs in ("off", "auto", "on"), "perf.cuda_graphs", "off, auto, on", cfg.perf.cuda_graphs)
    _check(cfg.perf.cuda_graphs != "on" or cfg.perf.compile != "off", "perf.cuda_graphs",
           "off or auto while perf.compile=off (CUDA graphs replay compiled graphs)", cfg.perf.cuda_graphs)
    for f in PerfConfig.switches():
        if getattr(cfg.perf, f.name) != f.metadata["baseline"]:
            for other, needed in f.metadata["requires"].items():
                _check(getattr(cfg.perf, other) == needed, f"perf.{other}",
                       f"{str(needed).lower()} while perf.{f.name}={getattr(cfg.perf, f.name)}",
                       getattr(cfg.perf, other))
    _validate_g1(cfg)
    _validate_recurrent(cfg)
    _check(cfg.perf.critic_chunk_size >= 1, "perf.critic_chunk_size", "an integer >= 1", cfg.perf.critic_chunk_size)
    _check(cfg.perf.physics_partitions >= 1, "perf.physics_partitions", "an integer >= 1", cfg.perf.physics_partitions)
    return cfg


def _validate_g1(cfg: TrainConfig) -> None:
    g = cfg.env.g1
    _check(g.history >= 1, "env.g1.history", "an integer >= 1", g.history)
    encoders = len(cfg.policy.token.encoders) if cfg.policy.kind == "token" else 2
    _check(1 <= g.num_encoders <= min(2, encoders), "env.g1.num_encoders",
           f"1 or 2, at most the {encoders} policy.token.encoders", g.num_encoders)
    _check(len(g.tokenizer_frames) > 0 and all(f >= 1 for f in g.tokenizer_frames), "env.g1.tokenizer_frames",
           "a non-empty list of frame offsets >= 1", g.tokenizer_frames)
    _check(g.sampler_bin_frames >= 1, "env.g1.sampler_bin_frames", "an integer >= 1", g.sampler_bin_frames)
    _check(0 <= g.sampler_uniform_ratio <= 1, "env.g1.sampler_uniform_ratio", "a number in [0, 1]",
           g.sampler_uniform_ratio)
    _check(g.sampler_cap > 0, "env.g1.sampler_cap", "a number > 0", g.sampler_cap)
    _check(0 <= g.sampler_decay < 1, "env.g1.sampler_decay", "a number in [0, 1)", g.sampler_decay)


def _validate_recurrent(cfg: TrainConfig) -> None:
    """The recurrent trainer's sections: segments, samplers, losses and the grid map."""
    recurrent_task = cfg.task == "grid-arena"
    _check(recurrent_task == (cfg.policy.kind == "recurrent"), "policy.kind",
           "recurrent for grid-arena (and only there)" if recurrent_task else "mlp or token (recurrent is for "
           "grid-arena)", cfg.policy.kind)
    losses = cfg.losses
    for name in ("ppo", "supervised", "kickstarter", "kickstarter_value", "behavior_cloning"):
        _check(getattr(losses, name) >= 0, f"losses.{name}", "a weight >= 0", getattr(losses, name))
    if not recurrent_task:
        for name in ("supervised", "kickstarter", "kickstarter_value", "behavior_cloning"):
            _check(getattr(losses, name) == 0, f"losses.{name}", "0 (teacher losses are for grid-arena)",
                   getattr(losses, name))
        return
    p, r, g = cfg.ppo, cfg.policy.recurrent, cfg.env.grid
    for name in ("agents_per_env", "width", "height", "max_steps"):
        _check(getattr(g, name) >= 1, f"env.grid.{name}", "an integer >= 1", getattr(g, name))
    _check(g.mines >= 0, "env.grid.mines", "an integer >= 0", g.mines)
    _check(p.bptt_horizon >= 2 and p.steps_per_env % p.bptt_horizon == 0, "ppo.bptt_horizon",
           f"an integer >= 2 dividing ppo.steps_per_env={p.steps_per_env}", p.bptt_horizon)
    segments = cfg.env.num_envs * g.agents_per_env * (p.steps_per_env // max(p.bptt_horizon, 1))
    _check(1 <= p.num_minibatches <= segments and segments % p.num_minibatches == 0, "ppo.num_minibatches",
           f"a divisor of the segments per rollout, env.num_envs * env.grid.agents_per_env * ppo.steps_per_env / "
           f"ppo.bptt_horizon = {segments}", p.num_minibatches)
    _check(p.advantage in ("gae", "vtrace"), "ppo.advantage", "gae, vtrace", p.advantage)
    _check(p.vtrace_rho_clip > 0 and p.vtrace_c_clip > 0, "ppo.vtrace_rho_clip", "clips > 0",
           (p.vtrace_rho_clip, p.vtrace_c_clip))
    _check(p.minibatch_sampler in ("sequential", "prioritized"), "ppo.minibatch_sampler", "sequential, prioritized",
           p.minibatch_sampler)
    _check(0 <= p.prio_beta0 <= 1, "ppo.prio_beta0", "a number in [0, 1]", p.prio_beta0)
    _check(r.core in ("lstm", "gru"), "policy.recurrent.core", "lstm, gru", r.core)
    for name in ("hidden", "embed_dim", "encoder_hidden"):
        _check(getattr(r, name) >= 1, f"policy.recurrent.{name}", "an integer >= 1", getattr(r, name))
    _check(r.max_tokens >= 0, "policy.recurrent.max_tokens", "an integer >= 0 (0: all)", r.max_tokens)
    teacher_losses = losses.kickstarter + losses.kickstarter_value + losses.behavior_cloning > 0
    _check(bool(losses.teacher) == teacher_losses, "losses.teacher",
           "a checkpoint path when kickstarter, kickstarter_value or behavior_cloning is on (and empty otherwise)",
           losses.teacher)
    _check(losses.supervised == 0 or g.map == "mines", "losses.supervised",
           "0 unless env.grid.map=mines (the scripted teacher walks to mines)", losses.supervised)
    _check(losses.ppo + losses.supervised + losses.kickstarter + losses.kickstarter_value
           + losses.behavior_cloning > 0, "losses", "at least one weight > 0", "all 0")


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


def key_hint(key: str) -> str:
    """For an unknown dotted key of `TrainConfig`: the nearest known key at its level and the keys of its section,
    as `; did you mean ppo.learning_rate? (allowed: ppo.steps_per_env, ...)`."""
    parts, cls, prefix = key.split("."), TrainConfig, ""
    for part in parts[:-1]:  # down to the section the unknown name is in
        field = {f.name: f for f in dataclasses.fields(cls)}.get(part)
        if field is None or not dataclasses.is_dataclass(field.default_factory):
            parts = [part]  # a section that does not exist: the unknown name is the section's
            break
        cls, prefix = field.default_factory, f"{prefix}{part}."
    names = [f.name for f in dataclasses.fields(cls)]
    close = difflib.get_close_matches(parts[-1], names, n=1)
    guess = f"; did you mean {prefix}{close[0]}?" if close else ""
    return f"{guess} (allowed: {', '.join(prefix + name for name in names)})"


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
            hint = key_hint(prefix + key) if root is TrainConfig else f" (allowed: {', '.join(fields)})"
            raise UserError(f"config: unknown key {prefix + key!r}{hint}")
        sub = fields[key].default_factory if fields[key].default_factory is not dataclasses.MISSING else None
        if sub is not None and dataclasses.is_dataclass(sub) and isinstance(value, dict):
            value = from_dict(sub, value, prefix=f"{prefix}{key}.", root=root)
        kwargs[key] = value
    return cls(**kwargs)
