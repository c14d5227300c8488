"""What `syncfree switches` calls inert changes nothing that runs: on every built-in task's small preset, each
switch reported inert there is flipped between its baseline and optimized values, and the run's parameters (bit
for bit) and one iteration's dispatched ops, host syncs and allocations stay as they were.

(The other direction, a live switch changing something, is each switch's effect test; `autocast`'s report is
also checked against the dtypes of what runs in `test_autocast.py`.)"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_budgets import small_task_config

from syncfree.bench.timing import count_iteration
from syncfree.config import PerfConfig
from syncfree.tasks import TASKS
from syncfree.train.runner import Runner


def trained(cfg) -> tuple[dict[str, torch.Tensor], dict[str, float], Runner]:
    runner = Runner(cfg)
    runner.cfg.iterations = 2
    runner.learn()
    counts = count_iteration(runner)
    totals = {key: counts[f"{key}_per_iteration"] for key in ("ops", "syncs", "allocations")}
    return {k: v.clone() for k, v in runner.policy.state_dict().items()}, totals, runner


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_switch_reported_inert_changes_nothing_that_runs(task: str) -> None:
    cfg = small_task_config(task)
    state, counts, runner = trained(cfg)
    inert = cfg.perf.inert_switches(runner.switch_scope())
    flipped = []
    for field in PerfConfig.switches():
        if field.name not in inert or field.metadata["check"]:  # a check is off in both presets: nothing to flip
            continue
        value = getattr(cfg.perf, field.name)
        other = field.metadata["baseline" if value == field.metadata["optimized"] else "optimized"]
        other_state, other_counts, _ = trained(dataclasses.replace(cfg, perf=dataclasses.replace(cfg.perf, **{
            field.name: other})))
        assert other_counts == counts, (field.name, inert[field.name])
        assert other_state.keys() == state.keys()
        assert all(torch.equal(other_state[k], v) for k, v in state.items()), (field.name, inert[field.name])
        flipped.append(field.name)
    assert flipped, "no switch is inert here: the test checks nothing"
