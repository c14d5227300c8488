"""The built-in tasks integrate Gymnasium's CartPole-v1 and Pendulum-v1 equations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from syncfree.envs.builtin.classic import CartPole, Pendulum, angle_normalize
from syncfree.tasks import make_env

N = 64


def gym_step(env: gym.Env, state: np.ndarray, action) -> tuple[np.ndarray, float, bool]:
    env.unwrapped.state = state.astype(np.float64).copy()
    env.unwrapped.steps_beyond_terminated = None
    _obs, reward, terminated, _, _ = env.step(action)
    return np.asarray(env.unwrapped.state, dtype=np.float64), float(reward), bool(terminated)


@pytest.mark.parametrize("continuous", [False, True])
def test_cartpole_matches_gymnasium(continuous: bool) -> None:
    rng = np.random.default_rng(0)
    states = rng.uniform([-2.5, -3, -0.25, -3], [2.5, 3, 0.25, 3], size=(N, 4)).astype(np.float32)
    ours = CartPole(N, continuous=continuous)
    ours.state.copy_(torch.from_numpy(states))
    if continuous:
        actions = rng.uniform(-1.5, 1.5, size=(N, 1)).astype(np.float32)
        reward, terminated = ours._advance(torch.from_numpy(actions))
    else:
        actions = rng.integers(0, 2, size=N)
        reward, terminated = ours._advance(torch.from_numpy(actions))
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    for i in range(N):
        if continuous:  # Gymnasium's CartPole is discrete: drive its equations with the same force
            env.force_mag = CartPole.force_mag * float(np.clip(actions[i, 0], -1, 1))
            expected, exp_reward, exp_term = gym_step(env, states[i], 1)
        else:
            expected, exp_reward, exp_term = gym_step(env, states[i], int(actions[i]))
        np.testing.assert_allclose(ours.state[i].numpy(), expected, rtol=1e-5, atol=1e-5)
        assert reward[i].item() == exp_reward
        assert terminated[i].item() == exp_term


def test_pendulum_matches_gymnasium() -> None:
    rng = np.random.default_rng(1)
    states = np.stack([rng.uniform(-3 * np.pi, 3 * np.pi, N), rng.uniform(-8, 8, N)], -1).astype(np.float32)
    actions = rng.uniform(-1.5, 1.5, size=(N, 1)).astype(np.float32)
    ours = Pendulum(N)
    ours.state.copy_(torch.from_numpy(states))
    reward, terminated = ours._advance(torch.from_numpy(actions))
    obs = ours._observe()["policy"]
    env = gym.make("Pendulum-v1").unwrapped
    env.reset(seed=0)
    for i in range(N):
        env.state = states[i].astype(np.float64).copy()
        torque = np.array([Pendulum.max_torque * np.clip(actions[i, 0], -1, 1)], dtype=np.float32)
        exp_obs, exp_reward, exp_term, _, _ = env.step(torque)
        np.testing.assert_allclose(ours.state[i].numpy(), env.state, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(obs[i].numpy(), exp_obs, rtol=1e-5, atol=1e-5)
        assert reward[i].item() == pytest.approx(exp_reward, rel=1e-5, abs=1e-5)
        assert not terminated[i].item() and not exp_term


def test_angle_normalize_matches_gymnasium() -> None:
    from gymnasium.envs.classic_control.pendulum import angle_normalize as gym_angle_normalize

    x = np.linspace(-20, 20, 101)
    np.testing.assert_allclose(angle_normalize(torch.from_numpy(x)).numpy(), gym_angle_normalize(x), atol=1e-12)


@pytest.mark.parametrize("task,low,high", [("cartpole", [-0.05] * 4, [0.05] * 4),
                                           ("pendulum", [-np.pi, -1.0], [np.pi, 1.0])])
def test_reset_distribution_matches_gymnasium(task: str, low: list[float], high: list[float]) -> None:
    env = make_env(task, 4096, seed=0)
    state = env.state.numpy()
    assert (state >= np.array(low)).all() and (state <= np.array(high)).all()
    np.testing.assert_allclose(state.mean(0), 0.0, atol=0.05 * max(high))
    np.testing.assert_allclose(state.std(0), np.array(high) / np.sqrt(3), rtol=0.05)


def test_time_limit_truncates_and_auto_resets() -> None:
    env = make_env("pendulum", 8, seed=0, max_episode_length=5)
    env.reset()
    for t in range(1, 6):
        step = env.step(torch.zeros(8, 1))
        assert not step.terminated.any()
        assert step.truncated.all() == (t == 5)
    assert torch.equal(step.info["episode_length"], torch.full((8,), 5))
    assert (env.episode_length == 0).all() and (env.episode_return == 0).all()


def test_termination_is_not_truncation_and_resets_only_finished_envs() -> None:
    env = make_env("cartpole", 4, seed=0)
    env.state[0, 2] = 0.5  # pole already past 12 degrees
    before = env.state[1:].clone()
    step = env.step(torch.ones(4, dtype=torch.int64))
    assert step.terminated.tolist() == [True, False, False, False]
    assert not step.truncated.any()
    assert env.state[0].abs().max() <= 0.05  # fresh initial state
    assert not torch.equal(env.state[1:], before)  # the others moved on
    assert step.info["episode_return"][0] == 1.0


def test_seeded_envs_reproduce_and_state_round_trips() -> None:
    a, b = make_env("cartpole", 16, seed=7), make_env("cartpole", 16, seed=7)
    assert torch.equal(a.state, b.state)
    actions = torch.randint(0, 2, (30, 16), generator=torch.Generator().manual_seed(0))
    for t in range(10):
        a.step(actions[t]), b.step(actions[t])
    saved = a.state_dict()
    c = make_env("cartpole", 16, seed=99)
    c.load_state_dict(saved)
    for t in range(10, 30):
        sa, sc = a.step(actions[t]), c.step(actions[t])
        assert torch.equal(sa.obs["policy"], sc.obs["policy"])
        assert torch.equal(sa.reward, sc.reward) and torch.equal(sa.terminated, sc.terminated)
