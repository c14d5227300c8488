"""Counted budgets of the optimized trainer (deterministic, so they hold on any machine).

The allocation and op budgets are today's counts on the small preset: a change that adds work to the hot loop
exceeds them and must say why (or lower them when it removes work).
"""

from __future__ import annotations

import pytest

from conftest import small_config
from syncfree.perf.bench import count_iteration
from syncfree.perf.memory import live_tensor_storages
from syncfree.train.trainer import Trainer

BUDGETS = {
    # task: (allocations per rollout step, per minibatch; trainer-side ops per rollout step)
    "pendulum": (100, 192, 102),
    "cartpole": (98, 174, 93),
}


def warm(task: str, iterations: int = 2, **perf) -> Trainer:
    trainer = Trainer(small_config(task, **perf))
    trainer.cfg.iterations = iterations
    trainer.learn()
    return trainer


@pytest.mark.parametrize("task", sorted(BUDGETS))
def test_sync_budget(task: str) -> None:
    counts = count_iteration(warm(task))
    assert counts["syncs_per_step"] == 0
    assert counts["syncs_per_minibatch"] == 0
    assert counts["syncs_per_iteration"] <= 2


@pytest.mark.parametrize("task", sorted(BUDGETS))
def test_storage_and_statistics_writes_allocate_nothing_per_env(task: str) -> None:
    phases = count_iteration(warm(task))["phases"]
    assert phases["store"]["allocations"] == 0
    assert phases["logging"]["allocations"] <= 1  # the iteration's one host transfer


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
