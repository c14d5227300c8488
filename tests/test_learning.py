"""PPO solves CartPole: the deterministic policy holds the pole for >= 475 steps on average over 20 episodes,
trained as the README's first command trains it (`syncfree train`: eager under `perf.compile=auto` at the preset's
150 iterations), and with the compiled loop (`perf.compile=step` and `hot`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import syncfree
from syncfree.algo import FeedForwardPPO
from syncfree.cli import main
from syncfree.tasks import make_env, preset
from syncfree.train.runner import Runner


@pytest.mark.slow
@pytest.mark.usefixtures("compile_enabled")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_first_command_solves_cartpole(seed: int, tmp_path: Path) -> None:
    """`syncfree train --seed S` with nothing else (seeds 0-9 evaluate 500: benchmarks/results/cartpole-default-
    seeds-cpu), then `syncfree eval`'s evaluation of its last checkpoint."""
    assert main(["train", "--seed", str(seed), "--log.dir", str(tmp_path), "--log.run_name", "run",
                 "--log.progress", "false"]) == 0
    returns = syncfree.evaluate(tmp_path / "run" / "latest.pt")
    assert len(returns) == 20
    assert returns.mean() >= 475, returns


@pytest.mark.slow
@pytest.mark.usefixtures("compile_enabled")
@pytest.mark.parametrize(("seed", "autocast", "compile"),
                         [(0, "auto", "step"), (2, "auto", "hot"), (0, "bf16", "step")])
def test_cartpole_is_solved_within_500k_steps(seed: int, autocast: str, compile: str) -> None:
    """`auto` keeps CartPole's small batches in float32; `bf16` trains its hidden layers in bfloat16 throughout
    (learning parity of the mixed-precision switch)."""
    cfg = preset("cartpole")
    cfg.seed, cfg.log.progress, cfg.perf.autocast = seed, False, autocast
    cfg.perf.compile = compile  # the preset runs eagerly (a short run); learning must hold with the compiled loop
    trainer = Runner(cfg)
    trainer.learn()
    assert trainer.env_steps <= 500_000
    returns = FeedForwardPPO.evaluate(trainer.policy, make_env("cartpole", 20, seed=10_000 + seed))
    assert len(returns) == 20
    assert returns.mean() >= 475, returns


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("seed", [0, 1])
def test_grid_arena_beats_a_random_policy_within_40k_agent_steps(seed: int) -> None:
    """The recurrent policy on MettaGrid's `mines` map (the preset, 20 iterations = 40,960 agent steps) earns over
    twice a random policy's reward per agent per step (0.064, see `MettaGridSpec`) in its last two rollouts."""
    pytest.importorskip("mettagrid")
    cfg = preset("grid-arena")
    cfg.seed, cfg.iterations, cfg.log.progress = seed, 20, False
    trainer = Runner(cfg)
    rewards = []
    for it in range(1, cfg.iterations + 1):
        rewards.append(trainer.learn(until=it)["reward_per_agent_step"])
    assert trainer.env_steps == 40_960
    assert sum(rewards[-2:]) / 2 > 2 * 0.064, rewards
