"""The classic control tasks (CartPole, Pendulum) and the benchmark's toy (point-mass): batched torch envs with a
time limit a run may change."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
import torch

from syncfree.algo.configs import PPOTrainConfig
from syncfree.algo.settings import PPOConfig
from syncfree.config import TimeLimitEnvConfig, TrainConfig
from syncfree.envs.api import VecEnv
from syncfree.envs.builtin.classic import CartPole, Pendulum
from syncfree.envs.builtin.point_mass import PointMass, PointMassGoal, PointMassMaze
from syncfree.envs.render import (
    draw_cartpole,
    draw_pendulum,
    draw_point_mass,
    draw_point_mass_goal,
    draw_point_mass_maze,
)
from syncfree.tasks.configs import learner_config, off_policy_presets
from syncfree.tasks.spec import Drawer, Preset, TaskSpec


def classic_config(task: str) -> PPOTrainConfig:
    """PPO's defaults on a classic task, whose env section is a time limit a run may change."""
    return PPOTrainConfig(task=task, env=TimeLimitEnvConfig())


def cartpole_preset(task: str) -> PPOTrainConfig:
    cfg = classic_config(task)
    cfg.env.num_envs = 64
    # a fixed rate: the adaptive one sat at its 1e-2 ceiling after 91 % of the updates (the KL target never bound);
    # at a fixed 3e-3 cartpole-continuous failed 1 seed of 5, at 5e-3 and 1e-2 none
    cfg.ppo = PPOConfig(steps_per_env=32, num_epochs=5, num_minibatches=4, learning_rate=5e-3, gamma=0.99,
                        schedule="fixed")
    cfg.iterations = 150
    return cfg


def pendulum_preset(task: str) -> PPOTrainConfig:
    cfg = classic_config(task)
    cfg.env.num_envs = 256
    # a fixed rate: the adaptive one sat at a bound in 20 % of the iterations and let seed 0 collapse late
    cfg.ppo = PPOConfig(steps_per_env=32, num_epochs=5, num_minibatches=4, learning_rate=1e-3, gamma=0.95,
                        schedule="fixed")
    cfg.iterations = 300
    return cfg


def point_mass_preset(task: str) -> PPOTrainConfig:
    cfg = classic_config(task)
    cfg.env.num_envs = 4096
    cfg.policy.actor_hidden, cfg.policy.critic_hidden = [128, 128], [128, 128]
    # a fixed rate: adapting to a KL of 0.01 from 1e-3, the rate sat at its 1e-2 ceiling after 95 % of the
    # minibatches; a fixed 3e-3 scored highest of 1e-3, 3e-3, 5e-3 and 1e-2 on seeds 0-2
    cfg.ppo = PPOConfig(steps_per_env=24, num_epochs=5, num_minibatches=4, learning_rate=3e-3, schedule="fixed",
                        gamma=0.99)
    cfg.iterations = 50
    return cfg


def point_mass_goal_preset(task: str) -> PPOTrainConfig:
    """point-mass's settings at 1,024 envs and 32 steps, for exploration: PPO alone, or with random network
    distillation (`--rnd.enabled true`; the weight, its schedule and the networks below are what the docs' figures
    used: a bonus of weight 0.5 that fades to 0 by env step 1,500 of the run's 3,200)."""
    cfg = point_mass_preset(task)
    cfg.env.num_envs = 1024
    cfg.ppo.steps_per_env = 32
    cfg.iterations = 100
    cfg.rnd.weight, cfg.rnd.weight_schedule, cfg.rnd.final_step, cfg.rnd.final_value = 0.5, "linear", 1500, 0.0
    cfg.rnd.state_normalization = True
    cfg.rnd.num_outputs, cfg.rnd.predictor_hidden, cfg.rnd.target_hidden = 16, [64, 64], [64, 64]
    return cfg


def point_mass_maze_preset(task: str) -> PPOTrainConfig:
    """point-mass-goal's settings at 2,048 envs x 32 steps for 60 iterations, with RND's weight fading to 0 by env
    step 800 of the run's 1,920 (what the docs' figures used). No episode ends before its time limit in the maze, so
    the episodes start at random steps of it (`env.random_start`), lest every rollout hold the same part of every
    episode; the observations are not normalized, and GAE's lambda is 0.99, for a reward that comes late."""
    cfg = point_mass_goal_preset(task)
    cfg.env.num_envs = 2048
    cast(TimeLimitEnvConfig, cfg.env).random_start = True
    cfg.policy.normalize_obs = False
    cfg.ppo.lam = 0.99
    cfg.iterations = 60
    cfg.rnd.final_step = 800
    return cfg


def pendulum_off_policy(algorithm: str) -> Preset:
    """Pendulum trained by SAC or TD3: 256 envs x 4 steps per iteration into the replay buffer, 32 gradient steps
    of 256, 3-step returns, pendulum's discount; 240 iterations (245,760 env steps, a tenth of PPO's preset)."""
    def preset(task: str) -> TrainConfig:
        return learner_config(algorithm, task, TimeLimitEnvConfig(num_envs=256), 240, gamma=0.95, n_step=3)

    return preset


def point_mass_off_policy(algorithm: str) -> Preset:
    """point-mass trained by SAC or TD3: 1,024 envs x 2 steps per iteration, 32 gradient steps of 1,024, 3-step
    returns, 100 iterations (204,800 env steps, 4 % of PPO's preset)."""
    def preset(task: str) -> TrainConfig:
        cfg = learner_config(algorithm, task, TimeLimitEnvConfig(num_envs=1024), 100, steps_per_env=2,
                             batch_size=1024, n_step=3, learning_starts=10_240)
        cfg.policy.actor_hidden, cfg.policy.critic_hidden = [128, 128], [128, 128]
        return cfg

    return preset


Picture = Callable[[list[float], int, int], np.ndarray]
"""Draws env 0's state at a width and height."""


ClassicEnv = CartPole | Pendulum | PointMass | PointMassGoal
"""An env of the classic tasks: its physical state is the tensor `state` ([num_envs, dims])."""


def classic_task(name: str, description: str, env_type: Callable[..., ClassicEnv], preset: Preset,
                 picture: Picture, off_policy: Callable[[str], Preset] | None = None) -> TaskSpec:
    """A task of `env_type` (a torch env whose only option is the time limit), drawn by `picture`; `off_policy`
    gives its SAC and TD3 presets."""
    def make_env(cfg: TrainConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
        return env_type(num_envs, device, seed, time_limit(cfg))

    def render(cfg: TrainConfig, device: torch.device, seed: int, width: int, height: int) -> tuple[VecEnv, Drawer]:
        env = env_type(1, device, seed, time_limit(cfg))
        return env, lambda: picture(env.state[0].tolist(), width, height)

    return TaskSpec(name, description, TimeLimitEnvConfig, {"default": preset}, make_env, "ppo", render=render,
                    algorithm_presets=off_policy_presets(off_policy) if off_policy else {})


def time_limit(cfg: TrainConfig) -> int:
    """The time limit the config gives the env (0: the env's own)."""
    return cast(TimeLimitEnvConfig, cfg.env).max_episode_length


def continuous_cartpole(num_envs: int, device: torch.device, seed: int, max_episode_length: int) -> CartPole:
    return CartPole(num_envs, device, seed, max_episode_length, continuous=True)


TASKS = (
    classic_task("cartpole", "CartPole-v1 dynamics, 2 discrete actions, 500-step limit", CartPole, cartpole_preset,
                 draw_cartpole),
    classic_task("cartpole-continuous", "CartPole-v1 dynamics, force in [-10, 10] N, 500-step limit",
                 continuous_cartpole, cartpole_preset, draw_cartpole),
    classic_task("pendulum", "Pendulum-v1 swing-up, torque in [-2, 2] N·m, 200-step limit", Pendulum,
                 pendulum_preset, draw_pendulum, pendulum_off_policy),
    classic_task("point-mass", "2-D point mass pushed to the origin, 2 continuous actions, 200-step limit (the "
                 "benchmark's toy task)", PointMass, point_mass_preset, draw_point_mass, point_mass_off_policy),
    classic_task("point-mass-goal", "the point mass with drag, paid 1 per step inside a small goal 3.5 m away and 0 "
                 "elsewhere, 200-step limit: an exploration task (try --rnd.enabled true)", PointMassGoal,
                 point_mass_goal_preset, draw_point_mass_goal),
    classic_task("point-mass-maze", "the point mass in a U-shaped corridor, paid 1 per step inside a goal at its far "
                 "end and 0 elsewhere, 200-step limit: an exploration task no constant force solves (try "
                 "--rnd.enabled true)", PointMassMaze, point_mass_maze_preset, draw_point_mass_maze),
)
