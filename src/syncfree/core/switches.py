"""The performance switches: every optimization of the hot loop, its conventional off path and its origin."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Scope:
    """Where a run stands, as far as the switches care: which of them act there (`inert_reason`). The algorithm
    says what its code has (`syncfree.algo.base.Algorithm.scope`), the task what its env is."""

    flat_rollouts: bool = True
    """The algorithm stores flat `[steps, envs]` rollouts, samples actions from the policy's head there and updates
    as rsl_rl does (PPO on flat rollouts)."""
    whole_step_update: bool = True
    """Its minibatch update can be one compiled graph with its own AdamW (`compile=step`)."""
    chunked_critic: bool = True
    """Its critic evaluations may be split into chunks (`critic_chunk_size`)."""
    cuda_graph_replay: bool = True
    """Its compiled graphs may be replayed as CUDA graphs (an algorithm whose graphs cannot says False)."""
    segment_buffer: bool = False
    """It stores BPTT segments of every agent (PPO on BPTT segments)."""
    full_log_probs: bool = False
    """Its policy can emit full log-probabilities (the recurrent token policy)."""
    token_policy: bool = False
    """The policy is the token-encoder one (`policy.kind=token`)."""
    token_sets: bool = False
    """The policy max-pools embedded token sets (the recurrent token policy of grid-arena)."""
    env_layer: bool = False
    """The env is manager-based (g1-track): it reads the env-side switches."""
    isaaclab: bool = False
    """The env is an Isaac Lab env config built through `syncfree.envs.adapters.isaaclab`."""
    env_switches: frozenset[str] = frozenset()
    """The switches the env itself reads (`VecEnv.env_switches`, e.g. MettaGrid's adapter's `cache_game_config`)."""
    num_envs: int = 0
    """The envs the task's factory is asked for (grid-arena: simulations); 0 where not known."""
    host_cores: int = 0
    """The CPU cores this process may run on; 0 where not known."""
    device: str = "cpu"
    """The device type (`cpu`, `cuda`)."""
    adaptive_lr: bool = True
    """`ppo.schedule=adaptive`."""
    world_size: int = 1
    critic_rows: int = 0
    """The most rows one critic evaluation sees (the envs of a rollout step, the rows of a minibatch)."""
    full_log_probs_needed: bool = False
    """An enabled loss reads the policy's full log-probabilities (then they are emitted whatever the gate says)."""
    sequential_minibatches: bool = True
    """Minibatches are sequential rows (the prioritized sampler with `prio_alpha > 0` draws its own)."""
    auto_precision_modules: bool = True
    """The policy has layers `autocast=auto` runs in bfloat16 on a device with fast bfloat16 at this run's sizes:
    MLPs whose widest hidden layer times the rows of their largest call (`policy_rows`) reaches
    `syncfree.policy.actor_critic.AUTO_MIN_WORK` (the recurrent token encoder stays float32 under `auto`).
    Computed from the built policy where there is one (`syncfree.tasks.switch_scope`), else from the config."""
    policy_rows: int = 0
    """The most rows one call of the policy's networks sees (a rollout step's envs, a minibatch's rows)."""
    distillation: bool = False
    """The algorithm is student-teacher distillation (`distill.teacher`): no PPO loss, no critic, a fixed rate."""
    off_policy: bool = False
    """The algorithm is an off-policy learner with a replay buffer (`sac`, `td3`)."""
    n_step: int = 1
    """Steps its replay buffer sums into a sampled transition's return (`sac.n_step`, `td3.n_step`)."""
    native_bf16: bool = False
    """The device has fast bfloat16 matrix products, which `autocast=auto` asks for (CPUs with AVX512-BF16 or AMX;
    CUDA devices are not counted until measured there)."""


Inert = Callable[[Scope, "PerfConfig"], "str | None"]
"""A switch's applicability: why it changes nothing in a scope (with the other switches as set), or None."""


def _only_for(where: str, **wanted: Any) -> Inert:
    """Inert unless every named `Scope` field has the given value; `where` says in words where it acts."""
    def inert(scope: Scope, perf: PerfConfig) -> str | None:
        if any(getattr(scope, name) != value for name, value in wanted.items()):
            return f"acts only {where}"
        return None
    return inert


_FEEDFORWARD = _only_for("in the feed-forward algorithm (the recurrent one has its own action sampling)",
                         flat_rollouts=True)
_RECURRENT = _only_for("in the recurrent algorithm's segment buffer (grid-arena)", segment_buffer=True)
_ENV_LAYER = _only_for("in a manager-based env (g1-track)", env_layer=True)
_OFF_POLICY = _only_for("in the off-policy learners' replay buffer and updates (--algorithm sac or td3)",
                        off_policy=True)


def _n_step(scope: Scope, perf: PerfConfig) -> str | None:
    if not scope.off_policy:
        return _OFF_POLICY(scope, perf)
    return None if scope.n_step > 1 else "n_step=1: each sampled transition's return is its own reward"


def _loss_stats(scope: Scope, perf: PerfConfig) -> str | None:
    if scope.flat_rollouts or scope.off_policy:
        return None
    return ("acts only in the feed-forward algorithm (rsl_rl's update) and the off-policy learners; the recurrent one "
            "keeps its statistics on the device")
_ISAACLAB = _only_for("on Isaac Lab env configs (PhysX); syncfree's own physics has no partitions", isaaclab=True)


def _read_by_env(name: str, where: str) -> Inert:
    """Inert unless the env declares that it reads the switch `name` (`VecEnv.env_switches`)."""
    def inert(scope: Scope, perf: PerfConfig) -> str | None:
        return None if name in scope.env_switches else f"acts only {where}"
    return inert


_GAME_CONFIG = _read_by_env("cache_game_config", "in MettaGrid's adapter (grid-arena)")
_HOST_ADAPTERS = _read_by_env("host_env_worker", "in the Gymnasium and MettaGrid adapters (gym:<id>, grid-arena)")


def _env_worker(scope: Scope, perf: PerfConfig) -> str | None:
    if scope.num_envs == 1:
        return "one env (a MettaGrid simulation) cannot be split between two processes"
    if scope.host_cores == 1:
        return "this process may run on one CPU core only: the worker would take turns with it"
    return _HOST_ADAPTERS(scope, perf)

_DISTILLATION = _only_for("in student-teacher distillation (distill.teacher)", distillation=True)
_TOKEN_POLICY = _only_for("in the token-encoder policy (policy.kind=token)", token_policy=True)
_TOKEN_SETS = _only_for("in the recurrent token policy's encoder (grid-arena)", token_sets=True)


def _float32_token_sets(scope: Scope, perf: PerfConfig) -> str | None:
    if perf.autocast == "bf16":
        return "autocast=bf16 runs the token encoder's first layer conventionally, in bfloat16"
    return _TOKEN_SETS(scope, perf)


def _whole_step_graph(scope: Scope, perf: PerfConfig) -> str | None:
    """Inert where the minibatch update is one compiled graph (`compile=step`, feed-forward, one process, the
    optimized loss-statistics and learning-rate paths): its AdamW and gradients are the graph's own."""
    if (scope.whole_step_update and perf.compile == "step" and perf.device_loss_stats
            and (perf.device_adaptive_lr or not scope.adaptive_lr) and perf.grad_finite_from_norm != SEED_BEFORE
            and scope.world_size == 1):
        return "compile=step makes the whole minibatch update one graph with its own AdamW and gradients"
    return None


def _adaptive_lr(scope: Scope, perf: PerfConfig) -> str | None:
    if scope.distillation:
        return "distillation steps at a fixed rate (distill.learning_rate)"
    return None if scope.adaptive_lr else "the learning-rate schedule does not adapt (ppo.schedule=fixed or linear)"


def _critic_chunks(scope: Scope, perf: PerfConfig) -> str | None:
    if scope.distillation:
        return "distillation evaluates no critic"
    if not scope.chunked_critic:
        return "the recurrent policy evaluates its critic per row, unchunked"
    least = min(perf.critic_chunk_size, PerfConfig.switches_by_name()["critic_chunk_size"].metadata["baseline"])
    if scope.critic_rows and scope.critic_rows <= least:
        return f"no critic evaluation has more than {scope.critic_rows} rows, so neither value splits one"
    return None


def _cuda_graphs(scope: Scope, perf: PerfConfig) -> str | None:
    if scope.device != "cuda" or perf.compile == "off":
        return "CUDA graphs replay compiled graphs on a CUDA device (compile=hot or step)"
    if not scope.cuda_graph_replay:
        return "the algorithm's compiled graphs run without CUDA graphs"
    return None


def _gate(scope: Scope, perf: PerfConfig) -> str | None:
    if not scope.full_log_probs:
        return "only the recurrent policy has full log-probabilities to gate"
    if scope.full_log_probs_needed:
        return "an enabled loss reads the full log-probabilities: they are emitted either way"
    return None


def _autocast(scope: Scope, perf: PerfConfig) -> str | None:
    """`bf16` lowers what it names everywhere; `auto` (and so its comparison with `off`) only where the device has
    fast bfloat16 and the policy has layers `auto` lowers."""
    if perf.autocast == "bf16":
        return None
    if not scope.auto_precision_modules:
        if not scope.token_sets:
            return (f"autocast=auto keeps this policy in float32: no call reaches its bfloat16 threshold (at most "
                    f"{scope.policy_rows:,} rows; bf16 lowers it anyway)")
        return "autocast=auto keeps this policy in float32 (its token encoder was slower in bfloat16; bf16 lowers it)"
    if not scope.native_bf16:
        where = ("on CUDA devices, until measured there" if scope.device == "cuda"
                 else "here: this CPU has no bfloat16 matrix instructions")
        return f"autocast=auto resolves to float32 {where} (bf16 lowers the MLPs anyway)"
    return None


def _sequential_cache(scope: Scope, perf: PerfConfig) -> str | None:
    if not scope.segment_buffer:
        return _RECURRENT(scope, perf)
    if not scope.sequential_minibatches:
        return "the prioritized sampler draws its own rows and weights"
    return None


SEED_BEFORE = "seed_before"
"""The value of a switch whose seed's code before its change did more than the conventional baseline: that code,
a second named off path (`PerfConfig.preset("seed_before")`; the bench's "seeds' before" row)."""


def switch(*, baseline: Any, optimized: Any, seed: str, requires: dict[str, Any] | None = None,
           process_wide: bool = False, variants: tuple[Any, ...] = (), check: bool = False,
           inert: Inert | None = None, default: Any = None, seed_before: Any = None) -> Any:
    """A perf switch: defaults to its optimized value (or `default`, a value that picks one of the two for the
    run, such as `compile=auto`) and records both polarities, its origin, the values of
    other switches its optimized value needs (`requires`), whether it changes the whole process for good
    (`process_wide`: then trainers in one process cannot compare its two values), and other values worth a bench
    row of their own (`variants`, with the same `requires`). `check`: not an optimization but a debugging check
    that both presets leave at one value (the conventional code's), so the bench has no row for it. `inert`: where
    it changes nothing (None: it acts everywhere). `seed_before`: the value that runs the seed's own code before its
    change, where that code differs from the conventional baseline (None: the baseline is the seed's before)."""
    return field(default=optimized if default is None else default,
                 metadata={"baseline": baseline, "optimized": optimized, "seed": seed, "requires": requires or {},
                           "process_wide": process_wide, "variants": variants, "check": check, "inert": inert,
                           "seed_before": baseline if seed_before is None else seed_before})


RETIRED = {
    "cached_batch_metadata": "the gridworld seed's cached batch/bptt metadata tensors serve policies that receive "
                             "flattened minibatches; syncfree's minibatches keep their [rows, bptt] shape, so "
                             "nothing read them",
}
"""Switches that existed once and why they went: a stored config that sets one loads with a warning."""


@dataclass
class PerfConfig:
    """Performance switches. Each one's off path is the conventional (rsl_rl-style) implementation."""

    deferred_episode_stats: bool = switch(baseline=False, optimized=True, seed="humanoid: defer_episode_buffer_updates")
    """Keep finished-episode returns and lengths on the device and move them to the host once per
    iteration. Off: read them with `nonzero()` + `.cpu()` at every step where an episode ends."""

    deferred_nonfinite_check: bool = switch(baseline=False, optimized=True, seed="rsl_rl check_for_nan, deferred")
    """Accumulate a per-env non-finite flag on the device and read it once per iteration. Off: test
    observations and rewards with `isfinite(...).all()` on the host at every step."""

    grad_finite_from_norm: bool | Literal["seed_before"] = switch(baseline=False, optimized=True,
                                                                  seed="humanoid: fast_gradient_finite_check",
                                                                  seed_before=SEED_BEFORE)
    """Judge gradient finiteness from the gradient norm the clip computes and skip a bad step without a host read
    (fused AdamW's `found_inf`; one read with the plain optimizer). Off: rsl_rl 5.5.1, which checks nothing: a
    non-finite gradient reaches AdamW. `seed_before`: the humanoid pipeline's check before its change, which did
    more than rsl_rl: every parameter's gradient tested with `isfinite(...).all()`, one host read each, and the step
    skipped (and counted) when one is not finite (the minibatch update then runs as under `compile=hot`)."""

    fused_adamw: bool = switch(baseline=False, optimized=True, seed="humanoid: optim adamw_torch_fused",
                               inert=_whole_step_graph)
    """Use PyTorch's fused AdamW kernel. Off: AdamW with PyTorch's default (foreach/for-loop) implementation.
    Inert under `compile=step` (the default) where the whole minibatch update is one graph with its own AdamW."""

    device_adaptive_lr: bool = switch(baseline=False, optimized=True, seed="rsl_rl adaptive schedule, on device",
                                      inert=_adaptive_lr)
    """Keep the KL-adaptive learning rate in a float64 device tensor updated with `torch.where`. Off: compare
    the KL on the host every minibatch and write a Python float into the optimizer. Inert on a schedule that does
    not adapt (`ppo.schedule=fixed`: the presets of grid-arena, point-mass, CartPole and pendulum; `linear`: those
    of the Gymnasium tasks other than Humanoid)."""

    device_loss_stats: bool = switch(baseline=False, optimized=True, seed="rsl_rl loss logs, on device",
                                     inert=_loss_stats)
    """Sum the update's statistics over the minibatches on the device and read them once per iteration, with the
    iteration's host transfer. Off: rsl_rl 5.5.1's update, which reads the three losses it logs (surrogate, value,
    entropy) with `.item()` at every minibatch and sums them on the host; the statistics rsl_rl does not log (KL,
    clip fraction, gradient norm) stay on the device. The off-policy learners' off path reads every statistic they
    log with `.item()` at every gradient step (Stable-Baselines3's logging). The recurrent algorithm keeps its
    statistics on the device."""

    validate_distributions: bool = switch(baseline=False, optimized=False, seed="torch.distributions validation",
                                          check=True, inert=_FEEDFORWARD)
    """A check, off in both presets as in rsl_rl 5.5.1 (`Normal.set_default_validate_args(False)`): on, sample
    and score through `torch.distributions` with argument validation, which reads the host 3 times per step and
    per minibatch and refuses non-finite distribution parameters. Off: the same formulas as pure tensor
    functions."""

    zero_grad_set_to_none: bool = switch(baseline=False, optimized=True, seed="gridworld: zero_grad(set_to_none=True)",
                                         inert=_whole_step_graph)
    """Free gradients between minibatches instead of filling them with zeros (the gridworld code's before; torch
    >= 2's plain `zero_grad()`, which rsl_rl calls, already frees them). Inert under `compile=step` where the
    update computes its gradients functionally."""

    deterministic: bool = switch(baseline=True, optimized=False, seed="gridworld: deterministic mode off")
    """`torch.use_deterministic_algorithms(True)`; costs speed on GPUs, needed only for bit-exact GPU reruns."""

    compile: Literal["off", "auto", "hot", "step"] = switch(baseline="off", optimized="step", default="auto",
                                                            seed="torch.compile of the hot loop",
                                                            requires={"validate_distributions": False},
                                                            variants=("hot",))
    """`hot`: `torch.compile` (whole graphs, `fullgraph=True`) the rollout step's trainer side (act, storage writes,
    normalizer updates, episode and non-finite bookkeeping, as two graphs around the env step), the env step of envs
    that offer it (the torch tasks, `VecEnv.compile_step`) where it compiles as one graph (where it does not, `auto`
    runs it eagerly and `hot` or `step` set by the user is refused naming the line), the advantages, and each
    minibatch's forward and losses (its backward is compiled with it). `step`: the same, and the whole minibatch update
    (gather, forward, losses, gradients by `torch.func`, adaptive learning rate, clip, AdamW with the skip on non-finite
    gradients) as one graph (`syncfree.algo.minibatch_step`); with `device_loss_stats` or `device_adaptive_lr` off,
    whose conventional paths read the host inside the minibatch update, and with several processes (the gradient
    all-reduce), the update is compiled as in `hot`. The first iteration pays the compile time. Needs
    `validate_distributions=false` (validation reads the host inside the graph). Off: eager PyTorch. The recurrent
    algorithm (grid-arena) compiles the policy's rollout step (token encoder, core, heads, sampling) and each
    minibatch's forward and losses over its rows (the backward with it); `step` compiles it as `hot` does (the
    whole-step graph with AdamW is the feed-forward algorithm's). SAC and TD3: `hot` compiles the critics' loss and the
    actor's (each with its backward); `step` makes each gradient step one graph (losses, gradients by `torch.func`,
    Adam(W) steps, the targets' soft update, statistics: `syncfree.algo.offpolicy_step`), compiled as in `hot` with
    several processes, `muon` or `schedule_free_adamw`, or `device_loss_stats` off. `auto` (the default): `step` when
    the run's iterations reach the break-even measured for its task on this kind of device
    (`syncfree.train.compile_choice`, `benchmarks/compile_payback.py`) and early stopping (`callbacks.stop_when`,
    `callbacks.patience`) cannot end it sooner, else `off` (SAC and TD3: by their own figures, over the iterations
    that take gradient steps; eager on a device they were not measured on); the start line says
    which and why, and the run's config records the mode chosen."""

    autocast: Literal["off", "auto", "bf16"] = switch(baseline="off", optimized="auto",
                                                     seed="mixed precision (bf16 autocast)", variants=("bf16",),
                                                     inert=_autocast)
    """`bf16`: the hidden layers of the policy's MLPs (actor, critic; the token policy's encoders, decoder and
    critic) run under `torch.autocast` in bfloat16, forward and backward, with float32 parameters, optimizer state
    and output layers. `auto`: the same for calls large enough to gain (rows x widest layer >= 2**16) on CPUs with
    bfloat16 instructions (AVX512-BF16, AMX); float32 elsewhere, CUDA included until measured there. Not bitwise:
    outputs move by about 0.1-0.5 %. Off: float32 throughout. The recurrent gridworld policy: `bf16` runs its token
    encoder (value embedding and token MLP) so, its core and heads in float32; `auto` keeps it in float32, since on
    a 2-core AMD EPYC without bfloat16 instructions that encoder ran 9.8x slower in bfloat16 and it has not been
    measured elsewhere (`benchmarks/recurrent_encoder_modes.py`)."""

    retain_host_memory: bool = switch(baseline=False, optimized=True, seed="host allocator: no mmap/munmap per step",
                                      process_wide=True)
    """Keep freed host memory in the process (glibc's mmap and trim thresholds raised to 1 GiB) so large CPU
    tensors (activations, gradients) are reused instead of mapped and unmapped, with their page faults, at every
    minibatch. Process-wide and permanent once a trainer turns it on. Off: the C library's defaults."""

    cuda_graphs: Literal["off", "auto", "on"] = switch(baseline="off", optimized="auto",
                                                       seed="LeanRL: compile + CUDA graphs",
                                                       inert=_cuda_graphs)
    """With `compile=hot` on a CUDA device, replay the compiled graphs as CUDA graphs (`torch.compile`'s
    `reduce-overhead` mode; random numbers are drawn inside the graphs). `auto`: on for CUDA devices, off
    elsewhere; `on` on another device is an error."""

    # -- off-policy learners (sac, td3; inert for the others) -------------------------------------------

    replay_on_device: bool = switch(baseline=False, optimized=True,
                                    seed="FastTD3: replay buffer on the device, sampled there", inert=_OFF_POLICY)
    """Keep the replay buffer on the training device, allocated once: a rollout step writes into its rows and a
    batch is gathered into preallocated tensors by indices drawn on the device (`syncfree.algo.replay.DeviceReplay`).
    Off: Stable-Baselines3's `ReplayBuffer`, NumPy arrays on the host written with `.cpu().numpy()` at every step
    and indexed there, each batch moved to the device. The same batches bit for bit on the CPU."""

    vectorized_n_step: bool = switch(baseline=False, optimized=True,
                                     seed="n-step returns as one masked gather", inert=_n_step)
    """N-step returns of a batch (`n_step > 1`) from one gather of its `n` steps and one masked, discounted sum.
    Off: a Python loop over the `n` steps, gathering and accumulating one step at a time. Equal within float32
    rounding (the sums' order differs)."""

    fused_target_update: bool = switch(baseline=False, optimized=True,
                                       seed="CleanRL soft target update, as one _foreach_lerp_", inert=_OFF_POLICY)
    """Move every target parameter `tau` of the way to its network's with one `torch._foreach_lerp_`. Off:
    CleanRL's loop, `target.data.copy_(tau * p.data + (1 - tau) * target.data)` per parameter (4 ops each). Equal
    within float32 rounding (lerp rounds once)."""

    # -- env side and model (the humanoid tracking task; inert for the classic tasks) --------------------

    shared_obs_terms: bool = switch(baseline=False, optimized=True, seed="humanoid: sonic_shared_observation_cache",
                                    inert=_ENV_LAYER)
    """Compute a deterministic observation term once per step when several groups use it (cache cleared after
    every observation compute). Off: each group computes its own terms."""

    critic_chunk_size: int = switch(baseline=1024, optimized=4096, seed="humanoid: value_evaluate_chunk_size",
                                    inert=_critic_chunks)
    """Rows per critic forward when values are evaluated (rollout and update); larger batches are split into
    chunks of this size and concatenated."""

    log_env_actions: bool = switch(baseline=True, optimized=False, seed="humanoid: store_env_actions",
                                   inert=_ENV_LAYER)
    """Copy the actions to the host every step into the env's `extras["env_actions"]` (for callbacks)."""

    sampling_diagnostics: bool = switch(baseline=True, optimized=False,
                                        seed="humanoid: collect_adaptive_sampling_diagnostics",
                                        inert=_ENV_LAYER)
    """Read the min/max/mean of the adaptive-sampling distribution on the host every step."""

    reset_without_sync: bool = switch(baseline=False, optimized=True, seed="humanoid: avoid reset synchronization",
                                      inert=_ENV_LAYER)
    """Reset finished envs with masks (`torch.where`) and keep reset statistics on the device. Off: pick them with
    `nonzero()` behind a host `if len(ids) > 0`, read termination counts with `.item()`."""

    fast_history: bool = switch(baseline=False, optimized=True, seed="humanoid: sonic_fast_circular_buffer",
                                inert=_ENV_LAYER)
    """History buffers with the length as a Python int, a branchless first-push back-fill and no clone before the
    roll. Off: Isaac Lab 2.x's CircularBuffer (length read from a device tensor, `any()` branch, clone + roll)."""

    batched_command_metrics: bool = switch(baseline=False, optimized=True, seed="humanoid: sonic_fast_command_reset",
                                           inert=_ENV_LAYER)
    """Stack the command's reset metrics and keep them on the device until the iteration's transfer. Off: one
    `.item()` per metric at every reset."""

    physics_partitions: int = switch(baseline=8, optimized=1, seed="humanoid: gpu_max_num_partitions",
                                     inert=_ISAACLAB)
    """PhysX GPU partitions, applied to Isaac Lab env configs by `syncfree.envs.adapters.isaaclab`. Inert for
    syncfree's torch physics, which has no partitions."""

    cache_encoded_outputs: bool = switch(baseline=True, optimized=False, seed="humanoid: cache_encoded_outputs",
                                         inert=_TOKEN_POLICY)
    """Token-encoder policy: keep host copies of tokens and latents of every forward for diagnostics. Inert with
    the MLP policy."""

    cache_full_latent: bool = switch(baseline=True, optimized=False, seed="humanoid: cache_full_latent",
                                     inert=_TOKEN_POLICY)
    """Token-encoder policy: keep a device copy of the full latent of every forward. Inert with the MLP policy."""

    # -- recurrent trainer (grid-arena; inert for the others) --------------------------------------------

    gate_full_log_probs: bool = switch(baseline=False, optimized=True,
                                       seed="gridworld: emit full_log_probs only when a loss needs them",
                                       inert=_gate)
    """Compute, emit and store the policy's full log-probability table (`log_softmax` over the actions) only when
    an enabled loss declares that it needs it; the chosen action's log-prob and the entropy come from the logits
    and their log-normaliser either way. Off: the table computed, emitted and stored every rollout step."""

    preallocated_last_actions: bool | Literal["seed_before"] = switch(
        baseline=False, optimized=True, seed="gridworld: last actions sized to total agents", inert=_RECURRENT,
        seed_before=SEED_BEFORE)
    """Size the previous-action buffer to all agents when the buffer is built. Off: grown on demand when a slice of
    agents first reaches past its end (a new tensor and a copy; the recurrent algorithm steps all agents as one
    slice, so that is once, at the first rollout step: the switch saves start-up work, not per-step work).
    `seed_before`: the gridworld code before its change, which grew it the same way but decided whether to from
    the slice's largest agent id, read from the device at every store (`int(env_ids.max().item())`)."""

    cpu_time_index: bool = switch(baseline=False, optimized=True, seed="gridworld: CPU mirror of t_in_row",
                                  inert=_RECURRENT)
    """Read the rows' time index from a host mirror when storing a step. Off: from the device (`.item()`)."""

    cached_minibatch_indices: bool = switch(baseline=False, optimized=True,
                                            seed="gridworld: cached sequential indices and unit weights",
                                            inert=_sequential_cache)
    """Compute sequential minibatch row indices once and reuse one all-ones priority-weight tensor. Off: both
    rebuilt for every minibatch, as the gridworld seed's sampler did before its change: an `arange` and a `ones`
    (a minibatch that wraps past the last row also takes a modulo and a gather)."""

    token_embedding_tables: bool = switch(baseline=False, optimized=True,
                                          seed="exact: first encoder layer folded into per-field tables",
                                          inert=_float32_token_sets)
    """Recurrent token policy: the encoder's first layer folded into one `[256, hidden]` table per token field
    (coordinate, feature, value byte), recomputed from the parameters at every call; a token's pre-activation is
    the sum of its three rows, and the backward adds its gradient into them (`syncfree.policy.token_pool`). Equal
    up to the order of floating-point sums. Float32 only: inert under `autocast=bf16`, which runs the first layer
    conventionally in bfloat16 (`auto` keeps this encoder in float32). Off: the conventional encoder, embeddings
    summed per token and then the layer's matrix product on every token (the gridworld seed's)."""

    sparse_token_max: bool = switch(baseline=False, optimized=True,
                                    seed="exact: max-pool backward through the winning tokens",
                                    inert=_TOKEN_SETS)
    """Recurrent token policy: the encoder's last layer and its max over tokens as one function whose forward
    takes the values with `amax` and whose backward reaches each output's maximal token only, gathering and
    scattering one row per output (`syncfree.policy.token_pool`). The same values bit for bit; gradients equal up
    to the order of sums. Off: the layer on every token, then `max` with its indices, whose backward writes the
    gradient into a zero tensor over every token and runs the layer's two backward products over all of them."""

    # -- host simulators ------------------------------------------------------------------------------------

    cache_game_config: bool = switch(baseline=False, optimized=True,
                                     seed="repeated work: MettaGrid's game config converted once per run",
                                     inert=_GAME_CONFIG)
    """MettaGrid's adapter: convert the game config to MettaGrid's C++ form once and hand that to every new
    simulation (a MettaGrid episode is a new simulation; the config never changes within a run). Off: MettaGrid's
    own construction, which converts the same config again for every episode of every simulation (about 45 % of a
    restart's host time on the grid-arena preset)."""

    host_env_worker: bool = switch(baseline=False, optimized=True,
                                   seed="host time: a host simulator's envs stepped in two processes",
                                   inert=_env_worker)
    """A host simulator's adapter (Gymnasium's, `gym:<id>`, and MettaGrid's, grid-arena; 2 envs or more): the
    second half of the envs (MettaGrid: simulations) step in a worker process while the trainer's process steps the
    first half, results and actions in shared memory; the same episodes bit for bit. Off: every env steps in the
    trainer's process, one after another (Gymnasium's sync vector env; MettaGrid's simulations in a loop). Inert
    where the process may run on one core only (no worker is started there); the policy still waits for both
    halves."""

    # -- distillation ---------------------------------------------------------------------------------------

    whole_chunk_distillation: bool = switch(baseline=False, optimized=True,
                                            seed="repeated work: one student forward per optimizer step",
                                            inert=_DISTILLATION)
    """Student-teacher distillation: the `distill.gradient_length` rollout steps whose losses take one optimizer
    step are one student forward, one loss and one backward over all their rows (`gradient_length` x the loss over
    the chunk, which is the sum of the steps' equal-size means). Off: rsl_rl's `Distillation.update`, one forward and
    one loss per step, summed, so each optimizer step runs `gradient_length` small forwards and their backwards."""

    @classmethod
    def preset(cls, which: Literal["baseline", "optimized", "seed_before"]) -> PerfConfig:
        """All switches at their `baseline` or `optimized` value; `seed_before`: at the baseline, but at
        `SEED_BEFORE` where the seed's code before its change did more than the baseline."""
        return cls(**{f.name: f.metadata[which] for f in dataclasses.fields(cls)})

    @classmethod
    def switches(cls) -> list[dataclasses.Field[Any]]:
        return list(dataclasses.fields(cls))

    @classmethod
    def switches_by_name(cls) -> dict[str, dataclasses.Field[Any]]:
        return {f.name: f for f in dataclasses.fields(cls)}

    def inert_reason(self, name: str, scope: Scope) -> str | None:
        """Why switch `name` changes nothing in `scope` with the other switches as set here, or None when it acts."""
        inert = self.switches_by_name()[name].metadata["inert"]
        return inert(scope, self) if inert is not None else None

    def inert_switches(self, scope: Scope) -> dict[str, str]:
        """Every switch that changes nothing in `scope`, with the reason."""
        found = {f.name: self.inert_reason(f.name, scope) for f in self.switches()}
        return {name: reason for name, reason in found.items() if reason is not None}
