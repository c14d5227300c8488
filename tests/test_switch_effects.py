"""Every perf switch, proven by its effect: with the switch at its optimized value the effect is there (no host
read, one fused kernel, one critic call, a cache hit, ...), with it at its baseline value it is not.

The equivalence tests (test_switches.py, test_g1_switches.py, test_sequence_trainer.py, test_segments.py) show that
on and off compute the same thing; those pass as well when the optimized path is cut and both polarities take the
conventional one. These fail then. `EFFECT_TESTS` names one test per switch (here or in the test file that already
measures the effect), and the switch catalogue (docs/switches.md) lists them.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
from test_offpolicy import assert_statistics_unread_per_gradient_step
from torch.utils._python_dispatch import TorchDispatchMode

import conftest
from conftest import small_config
from syncfree.config import PerfConfig, TrainConfig
from syncfree.core import compile as compile_module
from syncfree.core.counters import Counts, count_syncs
from syncfree.core.device import set_deterministic
from syncfree.policy.actor_critic import MLP
from syncfree.policy.settings import TokenEncoderConfig
from syncfree.tasks import switch_scope
from syncfree.train.runner import Runner

pytestmark = pytest.mark.usefixtures("one_thread")

EFFECT_TESTS = {
    "deferred_episode_stats": "test_switch_effects.py::test_deferred_episode_stats_reads_no_finished_episode_per_step",
    "deferred_nonfinite_check": "test_switch_effects.py::test_deferred_nonfinite_check_reads_nothing_per_step",
    "grad_finite_from_norm": "test_switch_effects.py::test_grad_finite_from_norm_skips_a_non_finite_step_unread",
    "device_loss_stats": "test_switch_effects.py::test_device_loss_stats_reads_no_loss_per_minibatch",
    "fused_adamw": "test_switch_effects.py::test_fused_adamw_runs_one_fused_kernel_per_step",
    "device_adaptive_lr": "test_switch_effects.py::test_device_adaptive_lr_reads_no_kl_per_minibatch",
    "validate_distributions": "test_switch_effects.py::test_validate_distributions_reads_the_host_per_step",
    "zero_grad_set_to_none": "test_switch_effects.py::test_zero_grad_set_to_none_fills_no_gradient_with_zeros",
    "deterministic": "test_switch_effects.py::test_deterministic_turns_torch_deterministic_mode_on",
    "compile": "test_compile.py::test_compiled_phases_dispatch_a_fraction_of_eager_ops_and_compile_once",
    "autocast": "test_switch_effects.py::test_autocast_runs_the_hidden_layers_in_bfloat16",
    "retain_host_memory": "test_host_memory.py::test_retained_memory_is_reused_without_page_faults",
    "cuda_graphs": "test_switch_effects.py::test_cuda_graphs_compile_in_reduce_overhead_mode_on_cuda",
    "shared_obs_terms": "test_switch_effects.py::test_shared_obs_terms_compute_each_shared_term_once",
    "critic_chunk_size": "test_switch_effects.py::test_critic_chunk_size_sets_the_critic_calls_per_evaluation",
    "log_env_actions": "test_switch_effects.py::test_g1_env_switch_removes_its_host_reads",
    "sampling_diagnostics": "test_switch_effects.py::test_g1_env_switch_removes_its_host_reads",
    "reset_without_sync": "test_switch_effects.py::test_g1_env_switch_removes_its_host_reads",
    "fast_history": "test_switch_effects.py::test_g1_env_switch_removes_its_host_reads",
    "batched_command_metrics": "test_switch_effects.py::test_g1_env_switch_removes_its_host_reads",
    "physics_partitions": "test_isaaclab_settings.py::test_partitions_follow_the_switch",
    "cache_encoded_outputs": "test_switch_effects.py::test_token_policy_caches_are_kept_only_at_baseline",
    "cache_full_latent": "test_switch_effects.py::test_token_policy_caches_are_kept_only_at_baseline",
    "gate_full_log_probs": "test_switch_effects.py::test_gate_full_log_probs_computes_no_log_softmax_table",
    "preallocated_last_actions": "test_switch_effects.py::test_preallocated_last_actions_never_regrow",
    "cpu_time_index": "test_switch_effects.py::test_cpu_time_index_reads_no_device_index_per_step",
    "cached_minibatch_indices": "test_switch_effects.py::test_cached_minibatch_indices_build_nothing_per_minibatch",
    "token_embedding_tables": "test_switch_effects.py::test_token_embedding_tables_run_no_token_product_at_embedding_width",
    "sparse_token_max": "test_switch_effects.py::test_sparse_token_max_runs_the_last_layer_backward_on_winners_only",
    "cache_game_config": "test_switch_effects.py::test_cache_game_config_converts_the_game_config_once_per_run",
    "host_env_worker": "test_switch_effects.py::test_host_env_worker_steps_half_the_envs_here_while_the_worker_steps",
    "replay_on_device": "test_offpolicy.py::test_replay_on_device_reads_and_allocates_nothing_per_step_or_sample",
    "vectorized_n_step": "test_offpolicy.py::test_vectorized_n_step_dispatches_the_same_ops_whatever_n",
    "fused_target_update": "test_offpolicy.py::test_fused_target_update_runs_one_kernel_for_every_target",
    "whole_chunk_distillation":
        "test_distillation.py::test_whole_chunk_distillation_runs_one_student_forward_per_optimizer_step",
}
"""Switch -> its effect test (`file::function` under tests/)."""


def test_every_switch_names_an_effect_test_that_exists() -> None:
    assert set(EFFECT_TESTS) == {f.name for f in PerfConfig.switches()}
    for switch, where in EFFECT_TESTS.items():
        module, function = where.split("::")
        assert callable(getattr(importlib.import_module(module.removesuffix(".py")), function, None)), switch


def test_the_catalogue_names_every_switch_and_its_effect_test() -> None:
    catalogue = (Path(__file__).parents[1] / "docs" / "switches.md").read_text()
    for switch, where in EFFECT_TESTS.items():
        row = next((line for line in catalogue.splitlines() if line.startswith(f"| `{switch}` ")), None)
        assert row is not None, switch
        assert f"`{where.split('::')[1]}`" in row, switch


# --------------------------------------------------------------------------------------------------- helpers

def warm(cfg: TrainConfig) -> Runner:
    """A runner after one iteration (lazy buffers built, episode statistics flowing)."""
    cfg.iterations = 1
    runner = Runner(cfg)
    runner.learn()
    return runner


def one_switch(task: str, switch: str, optimized: bool, **config) -> TrainConfig:
    """The small preset with every switch optimized but `switch`, which is at its optimized or baseline value."""
    f = PerfConfig.switches_by_name()[switch]
    cfg = small_config(task, **{switch: f.metadata["optimized" if optimized else "baseline"]})
    for key, value in config.items():
        section, name = key.split("__")
        setattr(getattr(cfg, section), name, value)
    return cfg


def count_steps(runner: Runner, steps: int) -> Counts:
    with torch.inference_mode(), count_syncs() as counts:
        for t in range(steps):
            runner.rollout_step(t % runner.cfg.ppo.steps_per_env)
    return counts


def reads(counts: Counts) -> dict:
    return {**counts.host_reads, **counts.sync_ops}


# --------------------------------------------------------------------------------------- trainer switches

def test_deferred_episode_stats_reads_no_finished_episode_per_step() -> None:
    """cartpole, 10-step episodes: 12 steps see episodes end. Off, each step picks the finished ones with
    `nonzero()` and copies their returns to the host."""
    on = count_steps(warm(one_switch("cartpole", "deferred_episode_stats", True)), 12)
    off = count_steps(warm(one_switch("cartpole", "deferred_episode_stats", False)), 12)
    assert on.syncs == 0, reads(on)
    assert off.sync_ops["aten::nonzero"] == 12 and off.host_reads["cpu"] >= 1, reads(off)


def test_deferred_nonfinite_check_reads_nothing_per_step() -> None:
    on = count_steps(warm(one_switch("pendulum", "deferred_nonfinite_check", True)), 4)
    off = count_steps(warm(one_switch("pendulum", "deferred_nonfinite_check", False)), 4)
    assert on.syncs == 0, reads(on)
    assert off.host_reads["__bool__"] >= 2 * 4, reads(off)  # observations and rewards, every step


def poison_gradients(runner: Runner, algorithm: str) -> None:
    """Make every gradient of the next update non-finite: NaN returns for feed-forward PPO (its value loss is NaN,
    on both update paths); elsewhere a NaN gradient for the first parameter, by a hook."""
    if algorithm == "feed-forward":
        runner.algorithm.storage.returns.fill_(float("nan"))
    else:
        runner.algorithm.optim.params[0].register_hook(lambda grad: torch.full_like(grad, float("nan")))


@pytest.mark.parametrize("algorithm,compile", [("feed-forward", "off"), ("feed-forward", "step"),
                                               ("recurrent", "off"), ("distillation", "off")])
def test_grad_finite_from_norm_skips_a_non_finite_step_unread(algorithm: str, compile: str,
                                                             teacher_checkpoint: str) -> None:
    """Non-finite gradients at every optimizer step of an update. On, each step is skipped and counted, the
    parameters untouched, without a host read, on the eager path and on `compile=step`'s whole-minibatch function,
    in each algorithm that steps the policy optimizer; off (rsl_rl, which checks nothing) the NaN reaches AdamW and
    the parameters."""
    def nan_update(optimized: bool) -> tuple[Runner, Counts, int]:
        runner = warm(algorithm_config(algorithm, teacher_checkpoint, grad_finite_from_norm=optimized, compile=compile))
        skipped = int(runner.algorithm.optim.skipped_steps)
        poison_gradients(runner, algorithm)
        counts = count_update(runner)
        return runner, counts, int(runner.algorithm.optim.skipped_steps) - skipped

    (on, on_counts, on_skipped), (off, off_counts, off_skipped) = nan_update(True), nan_update(False)
    steps = optimizer_steps(on)
    assert on_counts.syncs == 0 and on_skipped == steps, (reads(on_counts), on_skipped)
    assert all(torch.isfinite(p).all() for p in on.algorithm.optim.params)
    assert off_counts.syncs == 0 and off_skipped == 0
    assert not all(torch.isfinite(p).all() for p in off.algorithm.optim.params)


@pytest.mark.parametrize("compile", ["off", "step"])
def test_the_seeds_before_of_the_gradient_check_reads_every_gradient(compile: str) -> None:
    """`grad_finite_from_norm=seed_before`, the humanoid pipeline's check before its change: on finite gradients one
    host read per parameter tensor per minibatch, where the baseline (rsl_rl) reads none; on NaN gradients each of
    the 4 steps is skipped and counted, as the optimized check skips them. Under `compile=step` the update falls
    back to the per-minibatch path, where the reads can be."""
    def update(nan: bool) -> tuple[Runner, Counts, int]:
        runner = warm(small_config("pendulum", grad_finite_from_norm="seed_before", compile=compile))
        assert runner.algorithm.whole_step is None
        skipped = int(runner.algorithm.optim.skipped_steps)
        if nan:
            runner.algorithm.storage.returns.fill_(float("nan"))
        counts = count_update(runner)
        return runner, counts, int(runner.algorithm.optim.skipped_steps) - skipped

    (finite, finite_counts, finite_skipped), (nan, nan_counts, nan_skipped) = update(False), update(True)
    tensors = len(list(finite.policy.parameters()))
    assert finite_counts.host_reads == {"__bool__": 4 * tensors} and finite_skipped == 0, reads(finite_counts)
    assert nan_skipped == 4 and all(torch.isfinite(p).all() for p in nan.policy.parameters())
    assert 4 <= nan_counts.host_reads["__bool__"] <= 4 * tensors
    baseline = count_update(warm(small_config("pendulum", grad_finite_from_norm=False, compile=compile)))
    assert baseline.syncs == 0, reads(baseline)


def count_update(runner: Runner) -> Counts:
    """A whole update on the last rollout (its minibatches as the run's `perf.compile` runs them: with `step`, the
    whole-minibatch function, here eagerly)."""
    with count_syncs() as counts:
        runner.algorithm.update(progress=0.0)
    return counts


@pytest.mark.parametrize("compile", ["off", "step"])
def test_device_loss_stats_reads_no_loss_per_minibatch(compile: str) -> None:
    """On either path a whole update (4 minibatches) reads no loss; off, each minibatch reads rsl_rl's three. The
    off-policy learners' gradient steps likewise (0 reads; off, one per statistic they log)."""
    on = count_update(warm(one_switch("pendulum", "device_loss_stats", True, perf__compile=compile)))
    off = count_update(warm(one_switch("pendulum", "device_loss_stats", False, perf__compile=compile)))
    assert on.syncs == 0, reads(on)
    assert off.host_reads == {"item": 3 * 4}, reads(off)  # surrogate, value and entropy, as rsl_rl logs them
    if compile == "off":  # the off-policy learners' gradient step (they run eagerly)
        for algorithm in ("sac", "td3"):
            assert_statistics_unread_per_gradient_step(algorithm)


@pytest.fixture(scope="module")
def teacher_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    return conftest.pendulum_teacher(tmp_path_factory.mktemp("teacher"))


OPTIMIZING_ALGORITHMS = ["feed-forward", "recurrent", "distillation"]
"""The algorithms that build the policy optimizer (`syncfree.algo.optim.PolicyOptimizer`) from the switches, each
its own wiring."""


def algorithm_config(algorithm: str, teacher: str, **perf: object) -> TrainConfig:
    """pendulum's small preset with every switch optimized but those given, for one algorithm: PPO with an MLP
    policy, PPO with the recurrent MLP policy, or distillation of an MLP student from `teacher`."""
    if algorithm == "recurrent":
        return conftest.recurrent_config(**perf)
    if algorithm == "distillation":
        return conftest.distill_config(teacher, **perf)
    return small_config("pendulum", **perf)


def optimizer_steps(runner: Runner) -> int:
    return runner.algorithm.minibatches_per_update


@pytest.mark.parametrize("algorithm", OPTIMIZING_ALGORITHMS)
def test_fused_adamw_runs_one_fused_kernel_per_step(algorithm: str, teacher_checkpoint: str) -> None:
    """On: one fused kernel per optimizer step, nothing read on the host. Off: PyTorch's default AdamW, a kernel
    per step of the formula and, on a CPU, each parameter tensor's step count read on the host (and the skip
    decision with it), in each algorithm that steps the policy optimizer."""
    on_runner = warm(algorithm_config(algorithm, teacher_checkpoint, fused_adamw=True))
    on = count_update(on_runner)
    off = count_update(warm(algorithm_config(algorithm, teacher_checkpoint, fused_adamw=False)))
    steps = optimizer_steps(on_runner)
    assert on.ops["aten::_fused_adamw_"] == steps and off.ops["aten::_fused_adamw_"] == 0
    assert off.num_ops > on.num_ops  # the foreach implementation: a kernel per step of the formula
    assert on.syncs == 0, reads(on)
    if conftest.TEST_DEVICE == "cpu":
        tensors = len(on_runner.algorithm.optim.params)
        assert off.host_reads == {"item": tensors * steps, "__bool__": steps}, reads(off)


@pytest.mark.parametrize("algorithm,compile", [("feed-forward", "off"), ("feed-forward", "step"),
                                               ("recurrent", "off")])
def test_device_adaptive_lr_reads_no_kl_per_minibatch(algorithm: str, compile: str) -> None:
    """Each minibatch's KL adapts the rate on the device; off, it is compared on the host and a Python float
    written back, in both PPO algorithms (distillation steps at a fixed rate)."""
    on = warm(algorithm_config(algorithm, "", device_adaptive_lr=True, compile=compile))
    off = warm(algorithm_config(algorithm, "", device_adaptive_lr=False, compile=compile))
    assert on.cfg.ppo.schedule == "adaptive"
    assert count_update(on).syncs == 0
    assert count_update(off).syncs >= optimizer_steps(off)


def test_validate_distributions_reads_the_host_per_step() -> None:
    """A check, not an optimization: on, `torch.distributions` validates its arguments on the host."""
    on = count_steps(warm(small_config("pendulum", validate_distributions=True)), 2)
    off = count_steps(warm(small_config("pendulum")), 2)
    assert on.host_reads["__bool__"] >= 2 * 3 and off.syncs == 0, (reads(on), reads(off))


@pytest.mark.parametrize("algorithm", OPTIMIZING_ALGORITHMS)
def test_zero_grad_set_to_none_fills_no_gradient_with_zeros(algorithm: str, teacher_checkpoint: str) -> None:
    """On: no gradient zero-filled, the gradients freed between steps. Off: each optimizer step zero-fills every
    gradient the optimizer holds."""
    def zeroing(counts: Counts) -> int:
        return sum(n for op, n in counts.ops.items() if "zero_" in op)

    on = warm(algorithm_config(algorithm, teacher_checkpoint, zero_grad_set_to_none=True))
    off = warm(algorithm_config(algorithm, teacher_checkpoint, zero_grad_set_to_none=False))
    params = off.algorithm.optim.params
    # every step's gradients zero-filled (one `_foreach_zero_` over all of them); the rest is the update's bookkeeping
    assert zeroing(count_update(off)) - zeroing(count_update(on)) == optimizer_steps(off)
    assert all(p.grad is not None for p in params)  # kept, zeroed
    calls = {}
    for name, runner in (("on", on), ("off", off)):
        with count_syncs() as calls[name]:
            runner.algorithm.optim.zero_grad()  # what each of the update's steps calls first
    assert zeroing(calls["on"]) == 0 and zeroing(calls["off"]) == 1
    assert all(p.grad is None for p in on.algorithm.optim.params)


def deterministic_settings() -> tuple[bool, bool, bool]:
    """What `perf.deterministic` sets for the whole process: torch's deterministic algorithms (on a CPU they also
    fill every new tensor), cuDNN's deterministic kernels, cuBLAS's fixed workspace."""
    return (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
            "CUBLAS_WORKSPACE_CONFIG" in os.environ)


def test_deterministic_turns_torch_deterministic_mode_on(monkeypatch, tmp_path: Path) -> None:
    """Off (optimized), none of the three settings the baseline makes; each place that applies the switch (a new
    trainer, its `learn`, which takes the setting back from other trainers of the process, the rsl_rl drop-in's
    `learn`) applies it."""
    from test_rsl_rl_runner import rsl_env, train_cfg

    from syncfree.rsl_rl import OnPolicyRunner

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    try:
        optimized = Runner(one_switch("cartpole", "deterministic", True))
        assert deterministic_settings() == (False, False, False)
        baseline = Runner(one_switch("cartpole", "deterministic", False))
        assert deterministic_settings() == (True, True, True)
        optimized.learn()
        assert deterministic_settings()[:2] == (False, False)
        baseline.learn()
        assert deterministic_settings() == (True, True, True)
        drop_ins = {on: OnPolicyRunner(rsl_env(), {**train_cfg(), "syncfree": {"perf.deterministic": on}},
                                       log_dir=str(tmp_path / str(on)), device="cpu") for on in (False, True)}
        monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
        drop_ins[False].learn(1)
        assert deterministic_settings() == (False, False, False)
        drop_ins[True].learn(1)
        assert deterministic_settings() == (True, True, True)
    finally:
        set_deterministic(False)


class DtypesOfMatmuls(TorchDispatchMode):
    """The input dtypes of the matrix products dispatched under it (under inference mode a linear layer reaches it
    as `linear`, else as `addmm` or `mm`: one count per layer either way)."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm):
            self.dtypes[args[-1].dtype] += 1
        elif func.overloadpacket is torch.ops.aten.linear:
            self.dtypes[args[0].dtype] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("algorithm", OPTIMIZING_ALGORITHMS)
def test_autocast_runs_the_hidden_layers_in_bfloat16(algorithm: str, teacher_checkpoint: str) -> None:
    """A rollout step's two networks (the actor and the critic; in distillation the student's actor and the
    teacher's, each wired on its own) under `bf16`: every hidden layer's product in bfloat16, each network's output
    layer in float32, each layer once; off, all in float32. In each algorithm, whose wiring is its own."""
    def rollout_dtypes(autocast: str) -> Counter:
        runner = Runner(algorithm_config(algorithm, teacher_checkpoint, autocast=autocast))
        with torch.inference_mode(), DtypesOfMatmuls() as mode:
            runner.rollout_step(0)
        return mode.dtypes

    on, off = rollout_dtypes("bf16"), rollout_dtypes("off")
    layers, outputs = off[torch.float32], 2
    assert off == Counter({torch.float32: layers}) and layers > outputs
    assert on == Counter({torch.bfloat16: layers - outputs, torch.float32: outputs})
    runner = Runner(algorithm_config(algorithm, teacher_checkpoint))
    acting = [runner.policy] if algorithm != "distillation" else [runner.policy.actor, runner.algorithm.teacher.actor]
    mlps = [m for network in acting for m in network.modules() if isinstance(m, MLP)]
    assert layers == sum(isinstance(layer, torch.nn.Linear) for m in mlps for layer in m)  # every layer ran once


def test_autocast_runs_the_recurrent_token_mlp_in_bfloat16() -> None:
    """grid-arena: the token encoder's matrix products (the value embedding, the MLP's two layers: the folded
    tables are float32 only) in bfloat16, the core and heads in float32."""
    pytest.importorskip("mettagrid")

    def matmul_dtypes(autocast: str) -> Counter:
        runner = Runner(grid_config(autocast=autocast, compile="off"))
        algorithm = runner.algorithm
        last = torch.zeros(algorithm.num_envs, dtype=torch.int64)
        with torch.no_grad(), DtypesOfMatmuls() as mode:
            runner.policy.step(runner.obs["policy"], algorithm.state, algorithm.done, last)
        return mode.dtypes

    on, off = matmul_dtypes("bf16"), matmul_dtypes("off")
    assert on[torch.bfloat16] == 3 and on[torch.float32] > 0
    assert off[torch.bfloat16] == 0 and off[torch.float32] > 0


def test_cuda_graphs_compile_in_reduce_overhead_mode_on_cuda(monkeypatch) -> None:
    """What the switch decides for a trainer on a CUDA device (simulated: the switch is asked about a CUDA device
    where the trainer runs on this one; `torch.compile` records its mode and hands the function back, to run
    eagerly): every function the trainer compiles in `reduce-overhead` mode, CUDA graphs, and the state the
    whole-step update writes in place (optimizer moments, learning rate, statistics, the rollout) marked static,
    which CUDA graph trees need to replay it. Off: the default mode, nothing marked. On a CPU `auto` is off. The
    replay itself is checked on a GPU by test_compile.py::test_cuda_graph_replays_draw_new_noise."""
    modes: list[str | None] = []
    marked: list[torch.Tensor] = []
    real = compile_module.use_cuda_graphs
    monkeypatch.setattr(compile_module.torch, "compile", lambda fn, **kwargs: modes.append(kwargs.get("mode")) or fn)
    assert compile_module.hot(lambda x: x, PerfConfig(compile="hot", cuda_graphs="auto"), torch.device("cpu"))(1) == 1
    assert modes == [None]
    monkeypatch.setattr(compile_module, "use_cuda_graphs", lambda perf, device: real(perf, torch.device("cuda")))
    monkeypatch.setattr(torch._dynamo, "mark_static_address", marked.append)
    for value, mode in (("auto", "reduce-overhead"), ("off", None)):
        modes.clear(), marked.clear()
        runner = Runner(small_config("cartpole", compile="step", cuda_graphs=value))
        runner.learn()
        assert modes and set(modes) == {mode}, (value, modes)
        written = [state[k] for state in runner.algorithm.optim.optimizer.state.values()
                   for k in ("exp_avg", "exp_avg_sq")] + [runner.algorithm.stats]
        rollout = list(runner.algorithm.storage.flat())  # views made per call: compared by address and shape
        if value == "auto":
            assert len(written) > 1 and {id(t) for t in written} <= {id(t) for t in marked}
            assert {(t.data_ptr(), t.shape) for t in rollout} <= {(t.data_ptr(), t.shape) for t in marked}
        else:
            assert marked == []
    # what `syncfree switches` reports agrees: live for this run on a CUDA device, inert on this CPU
    cfg = small_config("cartpole", compile="step")
    assert PerfConfig(compile="step").inert_reason("cuda_graphs", switch_scope(cfg, "cuda")) is None
    assert PerfConfig(compile="step").inert_reason("cuda_graphs", switch_scope(cfg, "cpu")) is not None


# ------------------------------------------------------------------------------------ env and model switches

def g1_config(switch: str, optimized: bool, **config) -> TrainConfig:
    cfg = one_switch("g1-track", switch, optimized, **config)
    cfg.env.max_episode_length = 6  # resets inside the counted steps
    return cfg


def test_shared_obs_terms_compute_each_shared_term_once() -> None:
    def observation_ops(optimized: bool) -> int:
        env = Runner(g1_config("shared_obs_terms", optimized)).env
        env.reset()
        with torch.inference_mode(), count_syncs() as counts:
            env.observations.compute()
        return counts.num_ops

    on, off = observation_ops(True), observation_ops(False)
    assert on < off, (on, off)


@pytest.mark.parametrize("switch,read", [("log_env_actions", "cpu"), ("sampling_diagnostics", "item"),
                                         ("reset_without_sync", "aten::nonzero"), ("fast_history", "__bool__"),
                                         ("batched_command_metrics", "item")])
def test_g1_env_switch_removes_its_host_reads(switch: str, read: str) -> None:
    """Every other switch optimized, 8 steps with resets: the one at its baseline value brings its own reads."""
    on = count_steps(warm(g1_config(switch, True)), 8)
    off = count_steps(warm(g1_config(switch, False)), 8)
    assert on.syncs == 0, reads(on)
    assert reads(off).get(read, 0) >= 1, reads(off)


def test_critic_chunk_size_sets_the_critic_calls_per_evaluation() -> None:
    """2,048 envs: the baseline's 1,024-row chunks take two critic calls per rollout step, the optimized 4,096 one
    (set through the config, as the policy builder passes it)."""
    def critic_calls(optimized: bool) -> int:
        runner = Runner(one_switch("point-mass", "critic_chunk_size", optimized, env__num_envs=2048))
        calls = []
        runner.policy.critic.register_forward_hook(lambda *args: calls.append(1))
        with torch.inference_mode():
            runner.rollout_step(0)
        return len(calls)

    assert critic_calls(True) == 1 and critic_calls(False) == 2


def test_token_policy_caches_are_kept_only_at_baseline() -> None:
    """The caches exist at their baseline values only, and cost only there: the optimized policy's act reads the
    host no time (the encoded outputs' cache copies tokens and latents to the host) and allocates one tensor fewer
    than with the decoder input's cache (its clone)."""
    def token_runner(**perf) -> tuple[Runner, Counts]:
        cfg = small_config("g1-track", **perf)
        cfg.policy.kind = "token"
        cfg.policy.token = TokenEncoderConfig(encoder_hidden=[32], decoder_hidden=[32, 32], critic_hidden=[32],
                                              reconstruction_hidden=[32])
        runner = Runner(cfg)
        actor_obs = runner.policy.actor_input(runner.obs)
        with torch.inference_mode():
            runner.policy.act(actor_obs, runner.obs["critic"])  # warm
            with count_syncs() as counts:
                runner.policy.act(actor_obs, runner.obs["critic"])
        return runner, counts

    optimized, plain = token_runner()
    assert optimized.policy.encoded_outputs == {} and optimized.policy.full_latent is None
    encoded, copying = token_runner(cache_encoded_outputs=True)
    assert encoded.policy.encoded_outputs["tokens"].device.type == "cpu" and encoded.policy.full_latent is None
    latent, cloning = token_runner(cache_full_latent=True)
    assert latent.policy.full_latent is not None and latent.policy.encoded_outputs == {}
    assert plain.syncs == 0 and copying.host_reads["cpu"] == 2, reads(copying)
    assert plain.allocations == cloning.allocations - 1, (plain.allocations, cloning.allocations)


# ------------------------------------------------------------------------------------- recurrent algorithm

def grid_config(**perf) -> TrainConfig:
    pytest.importorskip("mettagrid")
    return conftest.grid_config(iterations=1, **perf)


def test_gate_full_log_probs_computes_no_log_softmax_table() -> None:
    def log_softmax_calls(**perf) -> tuple[int, int, bool]:
        runner = warm(grid_config(**perf))
        step = count_steps(runner, 1)
        algo = runner.algorithm
        with count_syncs() as update:
            algo.minibatch_loss(algo.minibatch(0, algo.buffer.segments // 2, 1.0))[0].backward()
        return tables(step), tables(update), "full_log_probs" in algo.buffer.data

    def tables(counts: Counts) -> int:  # `log_softmax` as dispatched without autograd, `_log_softmax` with it
        return counts.ops["aten::log_softmax"] + counts.ops["aten::_log_softmax"]

    assert log_softmax_calls() == (0, 0, False)
    assert log_softmax_calls(gate_full_log_probs=False) == (1, 1, True)


def test_cache_game_config_converts_the_game_config_once_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the task's env factory: MettaGrid's conversion of the game config to C++ runs once per run with the
    switch on, and once for every simulation started (the first episodes and each restart) with it off."""
    import mettagrid.config.mettagrid_c_config as mettagrid_c_config

    convert = mettagrid_c_config.convert_to_cpp_game_config
    calls = Counter[str]()

    def counted(game):
        calls["convert"] += 1
        return convert(game)

    monkeypatch.setattr(mettagrid_c_config, "convert_to_cpp_game_config", counted)

    def conversions_and_starts(cache: bool) -> tuple[int, int]:
        calls.clear()
        cfg = grid_config(cache_game_config=cache)
        cfg.iterations = 3  # 24 steps of 16-step episodes: every simulation restarts at least once
        runner = Runner(cfg)
        runner.learn()
        started = runner.env._sims.started
        runner.env.close()
        return calls["convert"], started

    assert conversions_and_starts(True)[0] == 1
    converted, started = conversions_and_starts(False)
    assert started >= 2 * grid_config().env.num_envs and converted == started


def test_host_env_worker_steps_half_the_envs_here_while_the_worker_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through each task family's env factory and a training run (`gym:CartPole-v1`, 4 envs; grid-arena, 2
    simulations): with the switch on, the trainer's process steps half of the envs, every one of its steps runs
    while the worker's call is in flight, and the worker stepped the other half as often; off, this process steps
    every env and no worker exists. Counted at the part that steps here (the worker's fresh interpreter runs the
    same classes unpatched). The split's Gymnasium rows step each env themselves: Gymnasium's sync vector env,
    which the switch off steps through, is not stepped with it on."""
    pytest.importorskip("mettagrid")
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv
    from gymnasium.vector import SyncVectorEnv

    from syncfree.envs.adapters import gymnasium as gym_adapter
    from syncfree.envs.adapters import host_worker, mettagrid_sims
    from syncfree.envs.adapters import mettagrid as grid_adapter
    from syncfree.tasks import preset

    monkeypatch.setattr(host_worker, "usable_cores", lambda: 2)  # the factories split only with a second core
    stepped = Counter[str]()
    split: object = None

    def count(cls: type, size) -> None:
        step = cls.step

        def counted(self, *args):
            worker = getattr(split, "worker", None)
            stepped["here"] += size(self)
            stepped["overlapped"] += size(self) if worker is not None and worker._pending else 0
            return step(self, *args)

        monkeypatch.setattr(cls, "step", counted)

    count(CartPoleEnv, lambda env: 1)
    vector_steps = Counter[str]()
    sync_step = SyncVectorEnv.step
    monkeypatch.setattr(SyncVectorEnv, "step", lambda self, *args: (vector_steps.update(["sync"]),
                                                                    sync_step(self, *args))[1])
    count(mettagrid_sims.Simulations, lambda sims: sims.num_simulations)
    gym_cfg = preset("gym:CartPole-v1")
    gym_cfg.env.num_envs, gym_cfg.seed, gym_cfg.log.progress = 4, 0, False
    gym_cfg.ppo.steps_per_env, gym_cfg.ppo.num_epochs, gym_cfg.ppo.num_minibatches = 8, 1, 2
    grid_cfg = grid_config()

    def run(cfg: TrainConfig, worker: bool) -> tuple[Runner, object]:
        nonlocal split
        cfg.perf = dataclasses.replace(cfg.perf, compile="off", host_env_worker=worker)
        runner = Runner(cfg)
        env = runner.env
        split = env.vector_env if isinstance(env, gym_adapter.GymnasiumVecEnv) else env._sims
        stepped.clear()  # what building and the first reset did
        vector_steps.clear()
        runner.learn()
        return runner, split

    for cfg, parts in ((gym_cfg, gym_adapter.SplitVectorEnv), (grid_cfg, grid_adapter._SplitSimulations)):
        cfg.iterations = 2
        steps, envs = cfg.iterations * cfg.ppo.steps_per_env, cfg.env.num_envs
        runner, on = run(cfg, True)
        assert isinstance(on, parts) and stepped == {"here": envs // 2 * steps, "overlapped": envs // 2 * steps}
        assert vector_steps["sync"] == 0
        on.worker.call("__getattribute__", "steps")
        assert on.worker.wait() == steps
        runner.env.close()
        runner, off = run(cfg, False)
        runner.env.close()
        assert not isinstance(off, parts) and stepped == {"here": envs * steps, "overlapped": 0}
        assert vector_steps["sync"] == (steps if cfg is gym_cfg else 0)


def test_preallocated_last_actions_never_regrow() -> None:
    pre = Runner(grid_config(preallocated_last_actions=True)).algorithm.buffer
    grown = Runner(grid_config(preallocated_last_actions=False)).algorithm.buffer
    assert pre.last_actions.shape[0] == pre.total_agents and grown.last_actions.shape[0] == 0
    pointer = pre.last_actions.data_ptr()
    with count_syncs() as pre_counts:
        pre.previous_actions(slice(0, pre.total_agents))
    with count_syncs() as grown_counts:
        grown.previous_actions(slice(0, grown.total_agents))
    assert pre_counts.allocations == 0 and pre.last_actions.data_ptr() == pointer
    assert grown_counts.allocations == 1 and grown.last_actions.shape[0] == grown.total_agents


def test_the_seeds_before_of_the_last_actions_reads_the_size_at_every_store() -> None:
    """`preallocated_last_actions=seed_before`, the gridworld code before its change: the size the buffer needs read
    from the device at every rollout step (`int(env_ids.max().item())`), where the baseline grows it from the
    slice's end, known on the host."""
    before = count_steps(warm(grid_config(preallocated_last_actions="seed_before")), 4)
    baseline = count_steps(warm(grid_config(preallocated_last_actions=False)), 4)
    assert before.host_reads == {"item": 4} and baseline.syncs == 0, (reads(before), reads(baseline))


def test_cpu_time_index_reads_no_device_index_per_step() -> None:
    on = count_steps(warm(grid_config(cpu_time_index=True)), 4)
    off = count_steps(warm(grid_config(cpu_time_index=False)), 4)
    assert on.syncs == 0 and off.host_reads["item"] == 4, (reads(on), reads(off))


def test_cached_minibatch_indices_build_nothing_per_minibatch() -> None:
    def second_minibatch_ops(cached: bool) -> Counter:
        buffer = warm(grid_config(cached_minibatch_indices=cached)).algorithm.buffer
        count = buffer.segments // 2
        buffer.sequential_indices(1, count), buffer._unit_weights(count)
        with count_syncs() as counts:
            buffer.sequential_indices(1, count), buffer._unit_weights(count)
        return counts.ops

    assert sum(second_minibatch_ops(True).values()) == 0
    # off: the gridworld seed's sampler before its change, and nothing slower: one `arange` and one `ones`
    assert second_minibatch_ops(False) == Counter({"aten::arange": 1, "aten::ones": 1})


class TokenWork(TorchDispatchMode):
    """What one minibatch's forward and backward does over every token (`tokens` = rows x steps x tokens read):
    its matrix products with an operand of that size (their shapes), the tensors it makes of `tokens` x `width`
    elements, per width, its ops, and its matrix-product FLOPs."""

    def __init__(self, tokens: int, widths: tuple[int, ...]) -> None:
        super().__init__()
        self.tokens, self.widths = tokens, widths
        self.products: list[list[tuple[int, ...]]] = []
        self.made: Counter = Counter()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        self.ops[func._schema.name] += 1
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm) and any(
                self.tokens in shape for shape in shapes):
            self.products.append(shapes)
        for o in out if isinstance(out, (tuple, list)) else (out,):
            for width in self.widths:
                if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel() == self.tokens * width:
                    self.made[width] += 1
        return out


def minibatch_token_work(**perf) -> tuple[TokenWork, int, dict[str, int]]:
    """The token work of the grid trainer's first minibatch (loss and backward, as `update` runs them), its
    matrix-product FLOPs, and the sizes: tokens, rows (rows x steps), E (embedding), H (first layer), C (last)."""
    from torch.utils.flop_counter import FlopCounterMode

    runner = warm(grid_config(**perf))
    algo, encoder = runner.algorithm, runner.policy.encoder
    minibatch = algo.minibatch(0, algo.buffer.segments // 2, 1.0)
    rows = minibatch.data["obs"].shape[:2].numel()
    sizes = {"tokens": minibatch.data["obs"].shape[:3].numel(), "rows": rows, "E": encoder.coordinate.embedding_dim,
             "H": encoder.mlp[0].out_features, "C": encoder.mlp[2].out_features}
    work = TokenWork(sizes["tokens"], (sizes["E"], sizes["C"]))
    with FlopCounterMode(display=False) as flops, work:
        algo.minibatch_loss(minibatch)[0].backward()
    return work, flops.get_total_flops(), sizes


def test_token_embedding_tables_run_no_token_product_at_embedding_width() -> None:
    """Off, the first layer multiplies every token's embedding sum ([tokens, E] x [E, H]), forward and twice
    backward, and the value embedding is a product too; on, no product reaches a token at width E and no
    [tokens, E] tensor (an embedding per token) exists: three [256, E] x [E, H] tables, forward and backward,
    replace them. The matrix-product FLOPs drop by exactly that difference."""
    on, on_flops, n = minibatch_token_work(token_embedding_tables=True)
    off, off_flops, _ = minibatch_token_work(token_embedding_tables=False)
    E, H, tokens = n["E"], n["H"], n["tokens"]
    at_embedding_width = lambda work: [s for s in work.products if any(E in shape for shape in s)]  # noqa: E731
    assert at_embedding_width(on) == [] and on.made[E] == 0
    assert len(at_embedding_width(off)) == 5 and off.made[E] >= 3  # first layer 3, value embedding 2
    per_token = 6 * E * H + 4 * E  # first layer: forward, input and weight gradients; value: forward, weight
    tables = 18 * 256 * E * H + 4 * 256 * E  # three tables: forward, and both gradients of each product
    assert off_flops - on_flops == per_token * tokens - tables


def test_sparse_token_max_runs_the_last_layer_backward_on_winners_only() -> None:
    """Off, `max`'s backward writes the gradient into a zero [rows, tokens, C] tensor and the last layer's two
    backward products run over every token; on, the only product over the tokens is the forward one, no `max`
    (with indices) runs, and the weight gradient is one product over each output's winning token. The
    matrix-product FLOPs drop by exactly that difference."""
    on, on_flops, n = minibatch_token_work(sparse_token_max=True)
    off, off_flops, _ = minibatch_token_work(sparse_token_max=False)
    H, C, tokens, rows = n["H"], n["C"], n["tokens"], n["rows"]
    assert len(on.products) == 1 and len(off.products) == 3, (on.products, off.products)
    assert on.ops["aten::max"] == 0 and off.ops["aten::max"] == 1
    assert on.ops["aten::amax"] >= 1
    assert off_flops - on_flops == 4 * tokens * H * C - 2 * rows * C * H
    # a rollout step takes no gradient: `amax` alone, no winning token looked for, and no index tensor made
    steps = {optimized: count_steps(warm(grid_config(sparse_token_max=optimized)), 2) for optimized in (True, False)}
    assert steps[True].ops["aten::max"] == 0 and steps[True].ops["aten::amin"] == 0 and steps[False].ops["aten::max"]
    assert steps[False].allocations - steps[True].allocations == 2  # `max`'s indices, once per step
