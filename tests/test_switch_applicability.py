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
    """The inert switches flipped together first (one run); only where that changes something, each alone, so that
    the failure names the switch."""
    cfg = small_task_config(task)
    state, counts, runner = trained(cfg)
    inert = cfg.perf.inert_switches(runner.switch_scope())
    others = {}
    for field in PerfConfig.switches():
        if field.name not in inert or field.metadata["check"]:  # a check is off in both presets: nothing to flip
            continue
        value = getattr(cfg.perf, field.name)
        others[field.name] = field.metadata["baseline" if value == field.metadata["optimized"] else "optimized"]
    assert others, "no switch is inert here: the test checks nothing"

    def same(flipped: dict[str, object]) -> bool:
        other_state, other_counts, _ = trained(dataclasses.replace(cfg, perf=dataclasses.replace(cfg.perf, **flipped)))
        return other_counts == counts and other_state.keys() == state.keys() and all(
            torch.equal(other_state[k], v) for k, v in state.items())

    if same(others):
        return
    for name, other in others.items():
        assert same({name: other}), (name, inert[name])
    raise AssertionError(f"the inert switches change the run together, none alone: {sorted(others)}")
