"""Counted budgets of the optimized trainer (deterministic, so they hold on any machine).

The allocation and op budgets are today's counts on the small preset: a change that adds work to the hot loop
exceeds them and must say why (or lower them when it removes work).
"""

from __future__ import annotations

import dataclasses

import pytest

from conftest import TEST_DEVICE, small_config
from syncfree.bench.timing import count_iteration
from syncfree.core.memory import live_tensor_storages
from syncfree.tasks import TASKS, preset
from syncfree.train.runner import Runner

BUDGETS = {
    # task: (allocations per rollout step, per minibatch; trainer-side ops per rollout step); per minibatch, 8 of
    # them are the second clip of `ppo.grad_clip=per_network` (its norms and factor)
    "pendulum": (99, 200, 102),
    "cartpole": (97, 182, 93),
}


def warm(task: str, iterations: int = 2, **perf) -> Runner:
    trainer = Runner(small_config(task, **perf))
    trainer.cfg.iterations = iterations
    trainer.learn()
    return trainer


@pytest.mark.parametrize("compile", ["off", "step"])  # `step`: the default path's functions, run eagerly here
@pytest.mark.parametrize("task", sorted(BUDGETS))
def test_sync_budget(task: str, compile: str) -> None:
    counts = count_iteration(warm(task, compile=compile))
    assert counts["syncs_per_step"] == 0
    assert counts["syncs_per_minibatch"] == 0
    assert counts["syncs_per_iteration"] == 1


def env_downloads(runner: Runner) -> int:
    """Copies of actions to the host so far by a host-simulated env's adapter (0 for a device-resident env)."""
    transfers = getattr(runner.env, "transfers", None)
    return transfers()["downloads"] if transfers is not None else 0


def small_task_config(task: str, compile: str = "off"):
    """A few envs and steps of every built-in task, all switches optimized (the counters see eager code: `step`
    runs the functions it would compile, the record step and the whole-minibatch update, eagerly)."""
    if task == "g1-track":
        cfg = preset(task, "small")
        cfg.env.max_episode_length = 6  # episodes end inside every iteration: the env logs its reset statistics
    elif task == "grid-arena":
        pytest.importorskip("mettagrid")
        cfg = preset(task)
        cfg.env.num_envs, cfg.env.max_steps = 2, 16
        cfg.ppo = dataclasses.replace(cfg.ppo, steps_per_env=8, bptt_horizon=4, num_epochs=2, num_minibatches=2)
    else:
        cfg = small_config(task)
    cfg.seed, cfg.device, cfg.log.progress, cfg.perf.compile = 1, TEST_DEVICE, False, compile
    return cfg


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("compile", ["off", "step"])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_built_in_task_reads_the_host_once_per_iteration(task: str, compile: str) -> None:
    """The named host transfer carries the algorithm's statistics, the monitors' buffers and the env's own log
    (g1-track's reset statistics included): one read per iteration, none per rollout step or minibatch, on the
    eager path and on `compile=step`'s."""
    runner = Runner(small_task_config(task, compile))
    runner.cfg.iterations = 2
    runner.learn()
    downloads = env_downloads(runner)
    counts = count_iteration(runner)
    # a host simulator on a CUDA device reads its actions back once per step (`HostStaging`): its one copy down
    actions_read = (env_downloads(runner) - downloads) / runner.cfg.ppo.steps_per_env
    assert actions_read == (1 if TEST_DEVICE == "cuda" and task == "grid-arena" else 0)
    assert counts["phases"]["env"]["syncs"] / runner.cfg.ppo.steps_per_env == actions_read
    assert (counts["syncs_per_step"] - actions_read, counts["syncs_per_minibatch"]) == (0, 0)
    assert counts["syncs_per_iteration"] - counts["phases"]["env"]["syncs"] == 1
    if task == "g1-track":  # the env's log went through the transfer
        runner.cfg.iterations += 1
        assert any(key.startswith("episode_reward/") for key in runner.learn())


@pytest.mark.parametrize("task", sorted(BUDGETS))
def test_storage_and_statistics_writes_allocate_nothing_per_env(task: str) -> None:
    phases = count_iteration(warm(task))["phases"]
    assert phases["store"]["allocations"] == 0
    # the iteration's one host transfer packs the statistics into a preallocated buffer: what allocates there is
    # the statistics themselves (means, counts, a finiteness flag per parameter tensor), whatever the number of envs
    assert phases["logging"]["syncs"] == 1
    wide = Runner(dataclasses.replace(small_config(task), env=dataclasses.replace(small_config(task).env, num_envs=64)))
    wide.cfg.iterations = 2
    wide.learn()
    wide_phases = count_iteration(wide)["phases"]
    assert wide_phases["logging"]["allocations"] == phases["logging"]["allocations"] < 100


@pytest.mark.parametrize("task", sorted(BUDGETS))
def test_allocations_and_ops_are_constant_after_warm_up_and_within_budget(task: str) -> None:
    trainer = warm(task)
    first, later = count_iteration(trainer), None
    for _ in range(3):
        later = count_iteration(trainer)
    for key in ("allocations_per_step", "allocations_per_minibatch", "ops_per_step", "ops_per_minibatch"):
        assert later[key] == first[key], key
    step_allocs, minibatch_allocs, trainer_ops = BUDGETS[task]
    assert first["allocations_per_step"] <= step_allocs
    assert first["allocations_per_minibatch"] <= minibatch_allocs
    assert first["trainer_ops_per_step"] <= trainer_ops


@pytest.mark.parametrize("compile", ["off", "step"])  # `step` runs its whole-minibatch function (eagerly here)
def test_live_memory_does_not_grow_after_warm_up(compile: str) -> None:
    trainer = warm("pendulum", iterations=2, compile=compile)
    after_warm_up = live_tensor_storages()
    trainer.cfg.iterations = 8
    trainer.learn()
    assert live_tensor_storages() == after_warm_up
