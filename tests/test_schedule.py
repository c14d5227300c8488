"""The adaptive learning rate, adapted after each minibatch (rsl_rl) or once per update (`ppo.kl_adapt_every`), and
the linear one (`ppo.schedule=linear`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from conftest import grid_config, small_config
from syncfree.algo.optim import MAX_LR, MIN_LR
from syncfree.config import TrainConfig
from syncfree.train.runner import Runner

BENCHMARKS = str(Path(__file__).resolve().parents[1] / "benchmarks")


def recorded_update(cfg: TrainConfig, desired_kl: float) -> tuple[float, list[float], list[float], float]:
    """One iteration of `cfg` with the KL target `desired_kl`: the learning rate before the update, the rate each
    minibatch's optimizer step used, each minibatch's KL, and the rate after the update."""
    cfg.ppo.schedule, cfg.ppo.desired_kl, cfg.iterations = "adaptive", desired_kl, 1
    if BENCHMARKS not in sys.path:
        sys.path.insert(0, BENCHMARKS)
    from lr_schedule_probe import record_minibatch_steps  # the probe's recorder, tested here as well

    trainer = Runner(cfg)
    optim = trainer.algorithm.optim
    used, kls = record_minibatch_steps(optim)
    before = float(optim.lr) if optim.lr_on_device else optim.learning_rate
    trainer.learn()
    return before, used, kls, float(trainer.algorithm.statistics()["learning_rate"])


def rule(lr: float, kl: float, target: float) -> float:
    if kl > 2 * target:
        return max(MIN_LR, lr / 1.5)
    return min(MAX_LR, lr * 1.5) if 0 < kl < target / 2 else lr


@pytest.mark.parametrize("lr_on_device", [True, False])
@pytest.mark.parametrize("desired_kl", [1e-9, 1.0])
def test_per_update_schedule_adapts_once_to_the_updates_mean_kl(desired_kl: float, lr_on_device: bool) -> None:
    cfg = small_config("pendulum", device_adaptive_lr=lr_on_device)
    cfg.ppo.kl_adapt_every = "update"
    before, used, kls, after = recorded_update(cfg, desired_kl)
    assert len(kls) == cfg.ppo.num_epochs * cfg.ppo.num_minibatches
    assert used == [before] * len(kls)  # every minibatch stepped at the rate the update began with
    assert after == pytest.approx(rule(before, sum(kls) / len(kls), desired_kl), rel=1e-12)
    assert after != before


@pytest.mark.parametrize("desired_kl", [1e-9, 1.0])
def test_per_minibatch_schedule_adapts_before_every_step(desired_kl: float) -> None:
    """rsl_rl's schedule, the default: the rate moves at each minibatch, before that minibatch's step."""
    before, used, kls, after = recorded_update(small_config("pendulum"), desired_kl)
    expected = before
    for kl, lr in zip(kls, used, strict=True):
        expected = rule(expected, kl, desired_kl)
        assert lr == pytest.approx(expected, rel=1e-12)
    assert after == pytest.approx(expected, rel=1e-12) and len(set(used)) == len(used)


def test_recurrent_algorithm_adapts_once_per_update() -> None:
    cfg = grid_config(iterations=1)
    cfg.ppo.kl_adapt_every = "update"
    before, used, kls, after = recorded_update(cfg, 1e-9)
    assert used == [before] * len(kls) and len(kls) == cfg.ppo.num_epochs * cfg.ppo.num_minibatches
    assert after == pytest.approx(before / 1.5, rel=1e-12)


def test_per_update_schedule_on_the_device_and_on_the_host_train_alike() -> None:
    """`device_adaptive_lr` stays bitwise with the per-update schedule: the same rates, the same parameters."""
    runs = []
    for lr_on_device in (True, False):
        cfg = small_config("pendulum", device_adaptive_lr=lr_on_device)
        cfg.ppo.kl_adapt_every, cfg.ppo.desired_kl = "update", 1.0  # raised at each of 3 updates
        trainer = Runner(cfg)
        trainer.learn()
        runs.append(trainer)
    on, off = runs
    assert float(on.algorithm.optim.lr) == off.algorithm.optim.learning_rate == pytest.approx(1e-3 * 1.5**3)
    for (name, a), b in zip(on.policy.state_dict().items(), off.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(("config", "in_parts"), [(small_config, False), (small_config, True), (grid_config, False)])
def test_linear_schedule_anneals_the_rate_towards_zero_over_the_run(config, in_parts: bool) -> None:
    """CleanRL's `anneal_lr`: update k of n steps at `learning_rate` x (1 - k / n), on both algorithms, also when
    the run is trained in parts (`learn(until=k)`); the logged rate is the one the update used."""
    cfg = config("pendulum") if config is small_config else config(iterations=4)
    cfg.ppo.schedule, cfg.iterations = "linear", 4
    trainer = Runner(cfg)
    optimizer = trainer.algorithm.optim.optimizer
    used = []
    step = optimizer.step

    def recording_step(*args, **kwargs):
        used.append(optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    optimizer.step = recording_step
    for until in range(1, cfg.iterations + 1) if in_parts else [cfg.iterations]:
        last = trainer.learn(until=until)["learning_rate"]
    per_update = cfg.ppo.num_epochs * cfg.ppo.num_minibatches
    expected = [cfg.ppo.learning_rate * (1 - k / 4) for k in range(4)]
    assert used == [lr for lr in expected for _ in range(per_update)]
    assert last == pytest.approx(expected[-1], rel=1e-12)
