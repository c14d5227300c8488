"""`ppo.normalize_rewards`: Gym's reward normalization, on the device; the algorithm learns from the scaled rewards,
logs the env's, keeps the statistics in its checkpoint and reads nothing on the host for it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import grid_config, small_config
from syncfree.config import PerfConfig
from syncfree.core.counters import count_syncs
from syncfree.policy.normalizer import RewardScale
from syncfree.train import checkpoint
from syncfree.train.run import Run
from syncfree.train.runner import Runner


def gym_normalize_reward(rewards: np.ndarray, dones: np.ndarray, gamma: float, eps: float = 1e-8) -> np.ndarray:
    """Gym 0.23's `NormalizeReward` (the wrapper of CleanRL's MuJoCo PPO) over `[T, N]` steps, in float64, then
    its `TransformReward` clip to ±10; the running statistics start from no sample (Gym's start from a weight of
    1e-4 on mean 0, variance 1: a difference below 1e-4 relative after the first step)."""
    mean, var, count = 0.0, 1.0, 0.0
    returns, out = np.zeros(rewards.shape[1]), np.zeros_like(rewards)
    for t in range(rewards.shape[0]):
        returns = returns * gamma + rewards[t]
        batch_mean, batch_var, n = returns.mean(), returns.var(), returns.shape[0]
        delta, total = batch_mean - mean, count + n
        mean, var = mean + delta * n / total, (var * count + batch_var * n + delta**2 * count * n / total) / total
        count = total
        out[t] = np.clip(rewards[t] / np.sqrt(var + eps), -10, 10)
        returns[dones[t]] = 0.0
    return out


def test_reward_scale_matches_gyms_normalize_reward() -> None:
    g = torch.Generator().manual_seed(0)
    steps, envs, gamma = 200, 6, 0.99
    rewards = torch.randn(steps, envs, generator=g) * 3.0 + 1.0
    rewards[50, 2] = 1e4  # an outlier: its scaled value is clipped
    dones = torch.rand(steps, envs, generator=g) < 0.05
    scale = RewardScale(envs, gamma)
    got = torch.stack([scale(rewards[t], dones[t]) for t in range(steps)])
    expected = gym_normalize_reward(rewards.double().numpy(), dones.numpy(), gamma)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert got[50, 2] == 10.0
    assert int(scale.stats.count) == steps * envs


@pytest.mark.usefixtures("compile_enabled")
def test_compiled_reward_scale_equals_eager() -> None:
    """As the compiled record step runs it: one graph, the statistics updated in place."""
    g = torch.Generator().manual_seed(1)
    rewards, dones = torch.randn(20, 8, generator=g), torch.rand(20, 8, generator=g) < 0.1
    eager, compiled = RewardScale(8, 0.97), RewardScale(8, 0.97)
    step = torch.compile(compiled, fullgraph=True)
    for t in range(20):
        torch.testing.assert_close(step(rewards[t], dones[t]), eager(rewards[t], dones[t]), rtol=1e-6, atol=1e-7)
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)


def rollout(normalize: bool) -> Runner:
    """One iteration of CartPole (episodes end by failure only) with or without reward normalization."""
    cfg = small_config("cartpole")
    cfg.env.max_episode_length, cfg.ppo.steps_per_env, cfg.iterations = 1000, 32, 1
    cfg.ppo.normalize_rewards = normalize
    runner = Runner(cfg)
    runner.record = runner.learn()
    return runner


def test_the_algorithm_stores_the_scaled_rewards_and_logs_the_envs() -> None:
    scaled, plain = rollout(True), rollout(False)
    assert scaled.record["episodes"] == plain.record["episodes"] > 0
    assert scaled.record["mean_return"] == plain.record["mean_return"]  # the logged returns are the env's
    raw, dones = plain.algorithm.storage.rewards, plain.algorithm.storage.dones.bool()
    assert dones.any()
    replay = RewardScale(raw.shape[1], plain.cfg.ppo.gamma)
    expected = torch.stack([replay(raw[t], dones[t]) for t in range(raw.shape[0])])
    torch.testing.assert_close(scaled.algorithm.storage.rewards, expected, rtol=1e-6, atol=0)
    assert not torch.allclose(expected, raw)
    assert plain.algorithm.reward_scale is None


def test_the_scale_has_no_host_read_and_is_resumed(tmp_path: Path) -> None:
    cfg = small_config("pendulum")
    cfg.perf = PerfConfig.preset("optimized")
    cfg.perf.compile = "off"
    cfg.ppo.normalize_rewards, cfg.iterations = True, 2
    runner = Run(cfg, tmp_path)
    runner.learn()
    saved = {k: v.clone() for k, v in runner.runner.algorithm.reward_scale.state_dict().items()}
    assert int(saved["stats.count"]) > 0
    with torch.inference_mode(), count_syncs() as counts:
        runner.runner.rollout_step(0)
    assert counts.syncs == 0, (dict(counts.host_reads), dict(counts.sync_ops))

    resumed = Run(cfg, tmp_path / "resumed")
    resumed.runner.load_state_dict(checkpoint.load(tmp_path / "latest.pt"))
    for name, value in resumed.runner.algorithm.reward_scale.state_dict().items():
        assert torch.equal(value, saved[name]), name
    resumed.runner.reset_env()  # envs that start new episodes: the running returns restart, the statistics stay
    assert not resumed.runner.algorithm.reward_scale.returns.any() and saved["returns"].any()
    assert torch.equal(resumed.runner.algorithm.reward_scale.stats.var, saved["stats.var"])

    state = checkpoint.load(tmp_path / "latest.pt")
    del state["algorithm"]["reward_scale"]  # a checkpoint of a run without it: the statistics start new
    fresh = Run(cfg, tmp_path / "fresh")
    fresh.runner.load_state_dict(state)
    assert int(fresh.runner.algorithm.reward_scale.stats.count) == 0


def test_the_recurrent_algorithm_learns_from_scaled_rewards() -> None:
    pytest.importorskip("mettagrid")
    runs = {}
    for normalize in (True, False):
        cfg = grid_config(iterations=1)
        cfg.ppo.normalize_rewards = normalize
        runs[normalize] = Runner(cfg)
        runs[normalize].learn()
    scaled, plain = runs[True].algorithm, runs[False].algorithm
    assert int(scaled.reward_scale.stats.count) == scaled.num_envs * scaled.steps_per_env
    assert torch.equal(scaled.reward_total, plain.reward_total)  # the env's reward, summed as before
    assert not torch.equal(scaled.buffer.data["rewards"], plain.buffer.data["rewards"])
