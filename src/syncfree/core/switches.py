"""The performance switches: every optimization of the hot loop, its conventional off path and its origin."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal


def switch(*, baseline: Any, optimized: Any, seed: str, requires: dict[str, Any] | None = None,
           process_wide: bool = False, variants: tuple[Any, ...] = ()) -> Any:
    """A perf switch: defaults to its optimized value and records both polarities, its origin, the values of
    other switches its optimized value needs (`requires`), whether it changes the whole process for good
    (`process_wide`: then trainers in one process cannot compare its two values), and other values worth a bench
    row of their own (`variants`, with the same `requires`)."""
    return field(default=optimized, metadata={"baseline": baseline, "optimized": optimized, "seed": seed,
                                              "requires": requires or {}, "process_wide": process_wide,
                                              "variants": variants})


@dataclass
class PerfConfig:
    """Performance switches. Each one's off path is the conventional (rsl_rl-style) implementation."""

    deferred_episode_stats: bool = switch(baseline=False, optimized=True, seed="humanoid: defer_episode_buffer_updates")
    """Keep finished-episode returns and lengths on the device and move them to the host once per
    iteration. Off: read them with `nonzero()` + `.cpu()` at every step where an episode ends."""

    deferred_nonfinite_check: bool = switch(baseline=False, optimized=True, seed="rsl_rl check_for_nan, deferred")
    """Accumulate a per-env non-finite flag on the device and read it once per iteration. Off: test
    observations and rewards with `isfinite(...).all()` on the host at every step."""

    grad_finite_from_norm: bool = switch(baseline=False, optimized=True, seed="humanoid: fast_gradient_finite_check")
    """Judge gradient finiteness from the clipped global norm and skip a bad step without a host read
    (fused AdamW's `found_inf`; one read with the plain optimizer). Off: per-parameter `isfinite` checks
    read on the host."""

    fused_adamw: bool = switch(baseline=False, optimized=True, seed="humanoid: optim adamw_torch_fused")
    """Use PyTorch's fused AdamW kernel. Off: AdamW with PyTorch's default (foreach/for-loop) implementation."""

    device_adaptive_lr: bool = switch(baseline=False, optimized=True, seed="rsl_rl adaptive schedule, on device")
    """Keep the KL-adaptive learning rate in a float64 device tensor updated with `torch.where`. Off: compare
    the KL on the host every minibatch and write a Python float into the optimizer."""

    validate_distributions: bool = switch(baseline=True, optimized=False, seed="torch.distributions validation")
    """Sample through `torch.distributions` with argument validation (host reads). Off: the same formulas as
    pure tensor functions."""

    zero_grad_set_to_none: bool = switch(baseline=False, optimized=True, seed="gridworld: zero_grad(set_to_none=True)")
    """Free gradients between minibatches instead of filling them with zeros."""

    deterministic: bool = switch(baseline=True, optimized=False, seed="gridworld: deterministic mode off")
    """`torch.use_deterministic_algorithms(True)`; costs speed on GPUs, needed only for bit-exact GPU reruns."""

    compile: Literal["off", "hot", "step"] = switch(baseline="off", optimized="step", seed="torch.compile of the hot loop",
                                                    requires={"validate_distributions": False}, variants=("hot",))
    """`hot`: `torch.compile` (whole graphs, `fullgraph=True`) the rollout step's trainer side (act, storage
    writes, normalizer updates, episode and non-finite bookkeeping, as two graphs around the env step), the env
    step of envs that offer it (the built-in torch tasks, `VecEnv.compile_step`), the advantages, and each
    minibatch's forward and losses (its backward is compiled with it). `step`: the same, and the whole minibatch
    update (gather, forward, losses, gradients by `torch.func`, adaptive learning rate, clip, AdamW with the skip on
    non-finite gradients) as one graph (`syncfree.algo.minibatch_step`); with `grad_finite_from_norm` or
    `device_adaptive_lr` off, whose conventional paths read the host between backward and step, and with several
    processes (the gradient all-reduce), the update is compiled as in `hot`. The first iteration pays the compile
    time. Needs `validate_distributions=false` (validation reads the host inside the graph). Off: eager PyTorch.
    The recurrent algorithm (grid-arena) runs eagerly whatever this says: compiled, its token encoder's forward and
    backward ran 1.24x slower than eager on the 2-core CPU (`benchmarks/recurrent_encoder_modes.py`)."""

    autocast: Literal["off", "auto", "bf16"] = switch(baseline="off", optimized="auto",
                                                     seed="mixed precision (bf16 autocast)")
    """`bf16`: the hidden layers of the policy's MLPs (actor, critic; the token policy's encoders, decoder and
    critic) run under `torch.autocast` in bfloat16, forward and backward, with float32 parameters, optimizer state
    and output layers. `auto`: the same for calls large enough to gain (rows x widest layer >= 2**17) on CPUs with
    bfloat16 instructions (AVX512-BF16, AMX); float32 elsewhere, CUDA included until measured there. Not bitwise:
    outputs move by about 0.1-0.5 %. Off: float32 throughout. The recurrent gridworld policy stays float32: under
    bfloat16 autocast its token encoder (embedding gathers, matrix products of width 32 and 64) ran 7.2x slower on
    the 2-core CPU (`benchmarks/recurrent_encoder_modes.py`)."""

    retain_host_memory: bool = switch(baseline=False, optimized=True, seed="host allocator: no mmap/munmap per step",
                                      process_wide=True)
    """Keep freed host memory in the process (glibc's mmap and trim thresholds raised to 1 GiB) so large CPU
    tensors (activations, gradients) are reused instead of mapped and unmapped, with their page faults, at every
    minibatch. Process-wide and permanent once a trainer turns it on. Off: the C library's defaults."""

    cuda_graphs: Literal["off", "auto", "on"] = switch(baseline="off", optimized="auto",
                                                       seed="LeanRL: compile + CUDA graphs")
    """With `compile=hot` on a CUDA device, replay the compiled graphs as CUDA graphs (`torch.compile`'s
    `reduce-overhead` mode; random numbers are drawn inside the graphs). `auto`: on for CUDA devices, off
    elsewhere; `on` on another device is an error."""

    # -- env side and model (the humanoid tracking task; inert for the classic tasks) --------------------

    shared_obs_terms: bool = switch(baseline=False, optimized=True, seed="humanoid: sonic_shared_observation_cache")
    """Compute a deterministic observation term once per step when several groups use it (cache cleared after
    every observation compute). Off: each group computes its own terms."""

    critic_chunk_size: int = switch(baseline=1024, optimized=4096, seed="humanoid: value_evaluate_chunk_size")
    """Rows per critic forward when values are evaluated (rollout and update); larger batches are split into
    chunks of this size and concatenated."""

    log_env_actions: bool = switch(baseline=True, optimized=False, seed="humanoid: store_env_actions")
    """Copy the actions to the host every step into the env's `extras["env_actions"]` (for callbacks)."""

    sampling_diagnostics: bool = switch(baseline=True, optimized=False,
                                        seed="humanoid: collect_adaptive_sampling_diagnostics")
    """Read the min/max/mean of the adaptive-sampling distribution on the host every step."""

    reset_without_sync: bool = switch(baseline=False, optimized=True, seed="humanoid: avoid reset synchronization")
    """Reset finished envs with masks (`torch.where`) and keep reset statistics on the device. Off: pick them with
    `nonzero()` behind a host `if len(ids) > 0`, read termination counts with `.item()`."""

    fast_history: bool = switch(baseline=False, optimized=True, seed="humanoid: sonic_fast_circular_buffer")
    """History buffers with the length as a Python int, a branchless first-push back-fill and no clone before the
    roll. Off: Isaac Lab 2.x's CircularBuffer (length read from a device tensor, `any()` branch, clone + roll)."""

    batched_command_metrics: bool = switch(baseline=False, optimized=True, seed="humanoid: sonic_fast_command_reset")
    """Stack the command's reset metrics and keep them on the device until the iteration's transfer. Off: one
    `.item()` per metric at every reset."""

    physics_partitions: int = switch(baseline=8, optimized=1, seed="humanoid: gpu_max_num_partitions")
    """PhysX GPU partitions, applied to Isaac Lab env configs by `syncfree.envs.adapters.isaaclab`. Inert for
    syncfree's torch physics, which has no partitions."""

    cache_encoded_outputs: bool = switch(baseline=True, optimized=False, seed="humanoid: cache_encoded_outputs")
    """Token-encoder policy: keep host copies of tokens and latents of every forward for diagnostics."""

    cache_full_latent: bool = switch(baseline=True, optimized=False, seed="humanoid: cache_full_latent")
    """Token-encoder policy: keep a device copy of the full latent of every forward."""

    # -- recurrent trainer (grid-arena; inert for the others) --------------------------------------------

    gate_full_log_probs: bool = switch(baseline=False, optimized=True,
                                       seed="gridworld: emit full_log_probs only when a loss needs them")
    """Emit (and store) the policy's full log-probabilities only when an enabled loss declares that it needs them.
    Off: always emitted, and stored every rollout step."""

    cached_batch_metadata: bool = switch(baseline=False, optimized=True, seed="gridworld: cached batch/bptt tensors")
    """Build the `batch`/`bptt` metadata tensors of rollout steps and minibatches once per shape. Off: per call."""

    preallocated_last_actions: bool = switch(baseline=False, optimized=True,
                                             seed="gridworld: last actions sized to total agents")
    """Size the previous-action buffer to all agents once. Off: grown on demand and reallocated every rollout."""

    cpu_time_index: bool = switch(baseline=False, optimized=True, seed="gridworld: CPU mirror of t_in_row")
    """Read the rows' time index from a host mirror when storing a step. Off: from the device (`.item()`)."""

    cached_minibatch_indices: bool = switch(baseline=False, optimized=True,
                                            seed="gridworld: cached sequential indices and unit weights")
    """Compute sequential minibatch row indices once and reuse one all-ones priority-weight tensor. Off: both
    rebuilt for every minibatch."""

    @classmethod
    def preset(cls, which: Literal["baseline", "optimized"]) -> PerfConfig:
        """All switches at their `baseline` or `optimized` value."""
        return cls(**{f.name: f.metadata[which] for f in dataclasses.fields(cls)})

    @classmethod
    def switches(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls))

    @classmethod
    def switches_by_name(cls) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(cls)}
