"""PPO solves CartPole: the deterministic policy holds the pole for >= 475 steps on average over 20 episodes,
trained with the compiled hot loop (`perf.compile=hot`)."""

from __future__ import annotations

import pytest

from syncfree.config import preset
from syncfree.envs import make_env
from syncfree.train.evaluate import evaluate
from syncfree.train.trainer import Trainer


@pytest.mark.slow
@pytest.mark.usefixtures("compile_enabled")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cartpole_is_solved_within_500k_steps(seed: int) -> None:
    cfg = preset("cartpole")
    cfg.seed, cfg.log.progress = seed, False
    cfg.perf.compile = "hot"  # the preset runs eagerly (a short run); learning must hold with the compiled loop
    trainer = Trainer(cfg)
    trainer.learn()
    assert trainer.env_steps <= 500_000
    returns = evaluate(trainer.policy, make_env("cartpole", 20, seed=10_000 + seed))
    assert len(returns) == 20
    assert returns.mean() >= 475, returns
