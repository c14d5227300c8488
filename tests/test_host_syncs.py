"""No host read in an optimized rollout step or minibatch update; the baseline's reads are visible to the counter."""

from __future__ import annotations

import pytest
import torch

from conftest import small_config
from syncfree.algo.storage import Batch
from syncfree.config import PerfConfig
from syncfree.core.counters import count_syncs, cuda_sync_errors
from syncfree.train.runner import Runner


def warm_trainer(task: str, which: str) -> Runner:
    cfg = small_config(task)
    cfg.perf = PerfConfig.preset(which)
    cfg.iterations = 1
    trainer = Runner(cfg)
    trainer.learn()
    return trainer


def count_rollout_step(trainer: Runner, strict: bool = False):
    with torch.inference_mode(), cuda_sync_errors(trainer.device if strict else torch.device("cpu")), \
            count_syncs() as counts:
        trainer.rollout_step(0)
    return counts


def count_minibatch(trainer: Runner, strict: bool = False):
    mb = Batch(*(x[:64] for x in trainer.algorithm.storage.flat()))
    with cuda_sync_errors(trainer.device if strict else torch.device("cpu")), count_syncs() as counts:
        trainer.algorithm.minibatch_update(mb)
    return counts


@pytest.mark.parametrize("task", ["cartpole", "cartpole-continuous", "pendulum"])
def test_optimized_rollout_step_and_minibatch_have_no_host_sync(task: str) -> None:
    trainer = warm_trainer(task, "optimized")
    step, update = count_rollout_step(trainer, strict=True), count_minibatch(trainer, strict=True)
    assert step.syncs == 0, (dict(step.host_reads), dict(step.sync_ops))
    assert update.syncs == 0, (dict(update.host_reads), dict(update.sync_ops))
    assert step.num_ops > 0 and update.num_ops > 0


def test_optimized_iteration_has_one_host_transfer() -> None:
    trainer = warm_trainer("pendulum", "optimized")
    trainer.cfg.iterations = 2
    with count_syncs() as counts:
        trainer.learn()
    assert counts.syncs == 1, (dict(counts.host_reads), dict(counts.sync_ops))


def test_baseline_reads_are_counted() -> None:
    """The conventional path reads on the host every step and every minibatch, and the counter sees it."""
    trainer = warm_trainer("pendulum", "baseline")
    step, update = count_rollout_step(trainer), count_minibatch(trainer)
    assert step.host_reads["__bool__"] >= 2  # validated distribution + non-finite checks
    assert step.sync_ops["aten::nonzero"] == 1  # finished-episode ids
    assert update.host_reads["__bool__"] >= len(list(trainer.policy.parameters()))  # per-parameter finiteness
    assert update.syncs > step.syncs


def test_counter_sees_each_kind_of_read() -> None:
    x = torch.arange(6.0)
    with count_syncs() as c:
        x.sum().item()
        x.tolist()
        bool(x[0] > 1)
        x.cpu().tolist()  # one transfer, then a host-side read
        x[x > 2]  # boolean mask: data-dependent shape
        x[torch.tensor([0, 1])]  # integer index: no sync
        torch.nonzero(x)
    assert dict(c.host_reads) == {"item": 1, "tolist": 1, "__bool__": 1, "cpu": 1}
    assert c.sync_ops["aten::nonzero"] == 1 and c.sync_ops["aten::index"] == 1
    assert c.syncs == 6
