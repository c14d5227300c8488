"""A syncfree task behind rsl_rl's VecEnv interface: rsl_rl's own runner trains on it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("rsl_rl")

from rsl_rl.env import VecEnv as RslRlVecEnv
from rsl_rl.runners import OnPolicyRunner

from syncfree.envs.adapters.rsl_rl import SyncfreeToRslRl
from syncfree.errors import UserError
from syncfree.tasks import make_env


def rsl_rl_config(hidden: list[int]) -> dict:
    model = {"class_name": "MLPModel", "hidden_dims": hidden, "activation": "elu", "obs_normalization": True}
    return {
        "num_steps_per_env": 8, "save_interval": 100, "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "check_for_nan": True,
        "algorithm": {"class_name": "PPO", "learning_rate": 1e-3, "num_learning_epochs": 2, "num_mini_batches": 2,
                      "schedule": "adaptive", "desired_kl": 0.01, "gamma": 0.99, "lam": 0.95, "clip_param": 0.2,
                      "value_loss_coef": 1.0, "use_clipped_value_loss": True, "entropy_coef": 0.0,
                      "max_grad_norm": 1.0},
        "actor": {**model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0,
                                                "std_type": "log"}},
        "critic": model,
    }


def test_adapter_is_an_rsl_rl_vec_env_and_passes_time_outs() -> None:
    env = SyncfreeToRslRl(make_env("pendulum", 4, seed=0, max_episode_length=3))
    assert isinstance(env, RslRlVecEnv)
    assert (env.num_envs, env.num_actions, env.max_episode_length) == (4, 1, 3)
    obs = env.get_observations()
    assert set(obs.keys()) == {"policy", "critic"} and obs["policy"].shape == (4, 3)
    for t in range(3):
        obs, reward, dones, extras = env.step(torch.zeros(4, 1))
        assert reward.shape == (4,) and dones.dtype == torch.bool
        assert extras["time_outs"].all() == (t == 2) and dones.all() == (t == 2)


def test_adapter_steps_like_the_wrapped_env() -> None:
    direct, adapted = make_env("point-mass", 8, seed=5), SyncfreeToRslRl(make_env("point-mass", 8, seed=5))
    direct.reset()  # the adapter reset its env once to get the first observations
    actions = torch.randn(20, 8, 2, generator=torch.Generator().manual_seed(0))
    for a in actions:
        d = direct.step(a)
        obs, reward, dones, _ = adapted.step(a)
        assert torch.equal(d.obs["policy"], obs["policy"]) and torch.equal(d.reward, reward)
        assert torch.equal(d.terminated | d.truncated, dones)


def test_rsl_rl_runner_trains_on_a_syncfree_task() -> None:
    torch.manual_seed(0)
    env = SyncfreeToRslRl(make_env("point-mass", 32, seed=0))
    runner = OnPolicyRunner(env, rsl_rl_config([32, 32]), log_dir=None, device="cpu")
    before = [p.detach().clone() for p in runner.alg.actor.parameters()]
    runner.learn(num_learning_iterations=2)
    after = list(runner.alg.actor.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def pendulum_runner(num_envs: int, seed: int) -> OnPolicyRunner:
    """rsl_rl's runner with syncfree's pendulum preset (256 envs x 32 steps, 5 epochs x 4 minibatches, gamma 0.95)."""
    torch.manual_seed(seed)
    cfg = rsl_rl_config([64, 64])
    cfg["num_steps_per_env"] = 32
    cfg["algorithm"].update(num_learning_epochs=5, num_mini_batches=4, gamma=0.95)
    return OnPolicyRunner(SyncfreeToRslRl(make_env("pendulum", num_envs, seed=seed)), cfg, log_dir=None, device="cpu")


def test_rsl_rl_stores_each_action_beside_the_observation_it_acted_on() -> None:
    """rsl_rl keeps the observations it acted on by reference until after `env.step`: the adapter's must not
    change under it."""
    runner = pendulum_runner(8, seed=0)
    env, alg = runner.env, runner.alg
    obs = env.get_observations()
    acted_on = []
    with torch.inference_mode():
        for _ in range(runner.cfg["num_steps_per_env"]):
            acted_on.append(obs["policy"].clone())
            actions = alg.act(obs)
            obs, rewards, dones, extras = env.step(actions)
            alg.process_env_step(obs, rewards, dones, extras)
    assert torch.equal(alg.storage.observations["policy"], torch.stack(acted_on))


@pytest.mark.slow
def test_rsl_rl_learns_pendulum_through_the_adapter() -> None:
    """30 iterations (246k env steps) of rsl_rl's PPO. Its deterministic policy then returns about -240 over an
    episode (seeds 0-4: -169 to -241); a random policy returns about -1,200 to -1,500, and so did rsl_rl trained on
    aliased observations."""
    runner = pendulum_runner(256, seed=0)
    runner.learn(num_learning_iterations=30)
    policy = runner.get_inference_policy()
    env = SyncfreeToRslRl(make_env("pendulum", 64, seed=100))
    obs, total, ended = env.get_observations(), torch.zeros(64), torch.zeros(64, dtype=torch.bool)
    with torch.inference_mode():
        for _ in range(env.max_episode_length):
            obs, rewards, dones, _ = env.step(policy(obs))
            total += torch.where(ended, 0.0, rewards)
            ended |= dones
    assert ended.all() and total.mean() > -600, total.mean()


def test_discrete_tasks_are_refused_with_a_clear_message() -> None:
    with pytest.raises(UserError, match="discrete actions"):
        SyncfreeToRslRl(make_env("cartpole", 4))
