"""`gym:<id>`: any registered Gymnasium env (e.g. `gym:Humanoid-v5`), stepped as CPU vector envs on the host.

A registered id runs the code its installed package registered; `gym:<module>:<id>` has Gymnasium import `<module>`
first (which registers the id), a module of the user's choosing (`syncfree.core.imports.allow_import`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from syncfree.algo.configs import PPOTrainConfig
from syncfree.algo.settings import PPOConfig
from syncfree.config import EnvConfig, TrainConfig
from syncfree.core.imports import allow_import
from syncfree.envs.adapters.host_worker import worth_a_worker
from syncfree.envs.api import VecEnv
from syncfree.errors import UserError
from syncfree.tasks.configs import learner_config, off_policy_presets
from syncfree.tasks.spec import BenchSizes, Drawer, Preset, TaskSource, TaskSpec

PREFIX = "gym:"
ACTION_MAP = ("not in the graph: the Gymnasium adapter clips each action to [-1, 1] and maps it onto the env's Box, "
              "low + (a + 1) / 2 * (high - low); a dimension with an infinite bound passes unscaled, clipped to its "
              "finite bound")
"""What `GymnasiumVecEnv` does to a continuous action (`TaskSpec.action_map`)."""

BENCH_PROFILES: dict[str, BenchSizes] = {
    "quick": dict(num_envs=[16, 64], scaling=[], ablations=False, repeats=3, iterations=1),
    "full": dict(num_envs=[16, 64], scaling=[4, 16, 64, 256], ablations=True, repeats=3, iterations=1),
    "gpu-smoke": dict(num_envs=[16, 64], scaling=[], ablations=False, repeats=3, iterations=1),
}
"""Sizes in Gymnasium envs, which step on the host one after another (the presets run 16)."""


def preset(task: str) -> PPOTrainConfig:
    """CleanRL's MuJoCo PPO settings; Humanoid's own (wider networks, longer rollouts, an adaptive rate)."""
    cfg = PPOTrainConfig(task=task)
    cfg.env.num_envs = 16  # Gymnasium envs step on the host, one core: few envs, longer rollouts
    if task.startswith(f"{PREFIX}Humanoid"):
        cfg.policy.actor_hidden, cfg.policy.critic_hidden = [256, 256], [256, 256]
        # global clip and reward normalization as CleanRL's MuJoCo PPO (global: it learned Humanoid-v5 better
        # here; without normalized rewards Hopper-v5 seed 0 reached 640 after 200k steps, with them 1,240); the rate
        # adapts once per update (per minibatch it sat at its 1e-5 floor in 25-32 % of the evaluations)
        cfg.ppo = PPOConfig(steps_per_env=64, num_epochs=5, num_minibatches=4, learning_rate=3e-4, gamma=0.99,
                            grad_clip="global", normalize_rewards=True, kl_adapt_every="update")
        cfg.iterations = 300
        return cfg
    # CleanRL's MuJoCo PPO (`ppo_continuous_action.py`): 2,048 steps per update (here 16 envs x 128), 10 epochs x
    # 32 minibatches of 64, [64, 64] tanh, the rate annealed from 3e-4 to 0, value loss x 0.5, one global
    # gradient norm clipped to 0.5, rewards normalized; 488 iterations = 1M env steps. On Hopper-v5 (seeds 0-4)
    # its training return was 2312 +- 202, the Humanoid preset's 1920 +- 368 (annealed: 2073 +- 453)
    cfg.policy.actor_hidden, cfg.policy.critic_hidden = [64, 64], [64, 64]
    cfg.policy.activation = "tanh"
    cfg.ppo = PPOConfig(steps_per_env=128, num_epochs=10, num_minibatches=32, learning_rate=3e-4,
                        schedule="linear", gamma=0.99, lam=0.95, value_loss_coef=0.5, max_grad_norm=0.5,
                        grad_clip="global", normalize_rewards=True)
    cfg.iterations = 488
    return cfg


def off_policy(algorithm: str) -> Preset:
    """SAC or TD3 on a Gymnasium env: 16 envs x 4 steps per iteration, 32 gradient steps of 256 (half a gradient
    step per env step), 3-step returns, [256, 256] ReLU networks as CleanRL's and Stable-Baselines3's, 10,000 random
    env steps first; 4,688 iterations = 300k env steps. SAC's 3-step returns (its default is 1) came level with
    PPO's return on Hopper-v5, where 1-step returns stayed below it, and returned more on HalfCheetah-v5
    (docs/off-policy.md)."""
    def preset(task: str) -> TrainConfig:
        cfg = learner_config(algorithm, task, EnvConfig(num_envs=16), 4688, steps_per_env=4,
                             updates_per_iteration=32, batch_size=256, learning_starts=10_000, gamma=0.99, n_step=3)
        cfg.policy.actor_hidden, cfg.policy.critic_hidden = [256, 256], [256, 256]
        cfg.policy.activation = "relu"
        return cfg

    return preset


def gymnasium_envs(task: str) -> Callable[..., VecEnv]:
    """The Gymnasium adapter's `make_gymnasium` (it imports Gymnasium: only when a task asks); one line naming the
    extra to install when Gymnasium is missing."""
    try:
        from syncfree.envs.adapters.gymnasium import make_gymnasium
    except ImportError:
        raise UserError(f"task {task}: Gymnasium is not installed: pip install 'syncfree[gym]'") from None
    return make_gymnasium


def resolve(task: str) -> TaskSpec:
    """The spec of `gym:<id>` (the env is looked up in Gymnasium's registry when it is made)."""
    env_id = task[len(PREFIX):]
    module = env_id.partition(":")[0] if ":" in env_id else ""

    def make_env(cfg: TrainConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
        if module:
            allow_import(task, "task", module)
        return gymnasium_envs(task)(env_id, num_envs, device, seed,
                                    worker=cfg.perf.host_env_worker and worth_a_worker(num_envs))

    def render(cfg: TrainConfig, device: torch.device, seed: int, width: int, height: int) -> tuple[VecEnv, Drawer]:
        if module:
            allow_import(task, "task", module)
        make_gymnasium = gymnasium_envs(task)
        from gymnasium.error import DependencyNotInstalled

        from syncfree.envs.render import gymnasium_frame

        env = make_gymnasium(env_id, 1, device, seed, render_mode="rgb_array")

        def draw() -> np.ndarray:
            try:
                return gymnasium_frame(env)
            except DependencyNotInstalled as e:  # a renderer's package (pygame for classic control): one line
                raise UserError(f"play: {task}: {e}") from None

        return env, draw

    return TaskSpec(task, f"the Gymnasium env {env_id}", EnvConfig, {"default": preset}, make_env, "ppo",
                    algorithm_presets=off_policy_presets(off_policy), render=render, bench_profiles=BENCH_PROFILES,
                    env_switches=frozenset({"host_env_worker"}), action_map=ACTION_MAP, imports=module)


SOURCES = (TaskSource(PREFIX, f"{PREFIX}<id>", "any registered Gymnasium env (e.g. gym:Humanoid-v5), as CPU vector "
                      "envs; its own time limit; own presets for --algorithm sac, td3", resolve,
                      needs=("gymnasium", "gym"), action_map=ACTION_MAP),)
