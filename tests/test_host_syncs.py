"""No host read in an optimized rollout step or minibatch update; the baseline's reads are visible to the counter."""

from __future__ import annotations

import pytest
import torch

from conftest import TEST_DEVICE, small_config
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
    assert step.host_reads["__bool__"] >= 2  # non-finite checks: observations, rewards, dones
    assert step.sync_ops["aten::nonzero"] == 1  # finished-episode ids
    assert update.host_reads["item"] >= 3  # rsl_rl's loss logs
    assert update.host_reads["__bool__"] >= 1  # the KL compared with its target
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


def test_baseline_reads_match_rsl_rl_side_by_side(tmp_path) -> None:
    """rsl_rl 5.5.1's runner (through the adapter, logging on) and syncfree's baseline preset on point-mass, counted
    the same way, read the host alike: per env step 4 `check_for_nan` reads (two observation groups, reward,
    dones), the finished episodes' `nonzero()` and two `.cpu()`; per minibatch the KL compared with its target,
    AdamW's step counts and the 3 logged losses (`device_loss_stats` off)."""
    pytest.importorskip("rsl_rl")
    from rsl_rl.runners import OnPolicyRunner
    from test_rsl_rl_adapter import rsl_rl_config

    from syncfree.envs.adapters.rsl_rl import SyncfreeToRslRl
    from syncfree.tasks import make_env

    KL_TARGET = 1e3  # far above any KL: each compare with it takes the same branch in both

    def rsl_rl(steps: int, minibatches: int):
        cfg = rsl_rl_config([32, 32])
        cfg["num_steps_per_env"] = steps
        cfg["algorithm"].update(num_learning_epochs=1, num_mini_batches=minibatches, desired_kl=KL_TARGET)
        env = SyncfreeToRslRl(make_env("point-mass", 32, TEST_DEVICE, seed=0, max_episode_length=10))
        runner = OnPolicyRunner(env, cfg, log_dir=str(tmp_path / f"rsl_rl_{steps}_{minibatches}"), device=TEST_DEVICE)
        runner.learn(1)
        with count_syncs() as counts:
            runner.learn(1)
        return counts, len([*runner.alg.actor.parameters(), *runner.alg.critic.parameters()])

    def syncfree(steps: int, minibatches: int):
        cfg = small_config("point-mass")
        cfg.perf = PerfConfig.preset("baseline")
        cfg.ppo.steps_per_env, cfg.ppo.num_epochs, cfg.ppo.num_minibatches = steps, 1, minibatches
        cfg.ppo.desired_kl = KL_TARGET
        cfg.policy.actor_hidden = cfg.policy.critic_hidden = [32, 32]
        cfg.iterations = 1
        runner = Runner(cfg)
        runner.learn()
        runner.cfg.iterations = 2
        with count_syncs() as counts:
            runner.learn()
        return counts, len(list(runner.policy.parameters()))

    def per_step_and_minibatch(run):
        (a, params), (b, _), (c, _) = run(8, 2), run(16, 2), run(8, 4)
        step = {k: (b.host_reads[k] - a.host_reads[k]) / 8 for k in ("__bool__", "cpu", "item")}
        step["nonzero"] = (b.sync_ops["aten::nonzero"] - a.sync_ops["aten::nonzero"]) / 8
        minibatch = {k: (c.host_reads[k] - a.host_reads[k]) / 2 for k in ("__bool__", "item")}
        return step, minibatch, params

    theirs, ours = per_step_and_minibatch(rsl_rl), per_step_and_minibatch(syncfree)
    assert ours[0] == theirs[0] == {"__bool__": 4, "cpu": 2, "item": 0, "nonzero": 1}
    assert ours[2] == theirs[2] == 13  # parameter tensors: the same network
    # per minibatch: AdamW's step counts and the 3 logged losses (`item`); the KL compared with its target as
    # `kl > 2 * target`, `kl < target / 2`, `kl > 0` (`__bool__`: all three, as the target is far above the KL)
    assert ours[1] == theirs[1] == {"__bool__": 3, "item": 13 + 3}
