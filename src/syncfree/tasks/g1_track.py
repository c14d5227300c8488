"""g1-track: a Unitree G1 (29 joints) tracks whole-body reference motions (`syncfree.envs.builtin.g1_track`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch

from syncfree.algo.configs import PPOTrainConfig
from syncfree.algo.settings import PPOConfig
from syncfree.config import TimeLimitEnvConfig, TrainConfig
from syncfree.envs.api import VecEnv
from syncfree.envs.builtin.g1_track.config import G1TrackOptions
from syncfree.policy.settings import TokenPolicyConfig
from syncfree.tasks.configs import HUMANOID_RECIPE_ENVS, humanoid_recipe, off_policy_presets
from syncfree.tasks.spec import Drawer, Preset, TaskSpec


@dataclass
class G1TrackEnvConfig(G1TrackOptions, TimeLimitEnvConfig):
    """g1-track's envs: how many, their time limit, and the settings tracking pipelines tune."""

    def validate(self, max_encoders: int = 2) -> None:
        TimeLimitEnvConfig.validate(self)
        G1TrackOptions.validate(self, max_encoders)


def token_policy(cfg: TrainConfig) -> TokenPolicyConfig | None:
    """The universal-token policy's settings when the config trains it (its envs then observe the tokenizer's
    groups)."""
    policy = getattr(cfg, "policy", None)
    return policy if isinstance(policy, TokenPolicyConfig) and policy.kind == "token" else None


def check(cfg: TrainConfig) -> None:
    """The token policy has an encoder for each encoder type the envs assign."""
    policy = token_policy(cfg)
    if policy is not None:
        env_config(cfg).validate(len(policy.token.encoders))


def env_config(cfg: TrainConfig) -> G1TrackEnvConfig:
    """The env section, of g1-track's type (`make_task_env` checks it)."""
    return cast(G1TrackEnvConfig, cfg.env)


def preset(task: str) -> PPOTrainConfig:
    """Train a G1 to track reference motions, with an MLP or the universal-token policy."""
    cfg = PPOTrainConfig(task=task, env=G1TrackEnvConfig(), policy=TokenPolicyConfig())
    cfg.env.num_envs = 4096
    cfg.policy.actor_hidden, cfg.policy.critic_hidden = [512, 256, 128], [512, 256, 128]
    cfg.policy.init_std = 0.5  # at 1.0 the action-rate penalty outweighs tracking and ending episodes pays
    # the rate adapts once per update: per minibatch it climbed from and fell back to its 1e-5 floor within
    # every update (at the floor after 95-100 % of them at 256 envs); per update it settles near 7e-5
    cfg.ppo = PPOConfig(steps_per_env=24, num_epochs=5, num_minibatches=4, learning_rate=1e-4, gamma=0.99,
                        entropy_coef=0.005, kl_adapt_every="update")
    cfg.iterations = 1000
    return cfg


def off_policy(algorithm: str) -> Preset:
    """g1-track trained by SAC or TD3: FastSAC's and FastTD3's recipe (`humanoid_recipe`) at PPO's 4,096 envs, with a
    buffer of 1,048,576 transitions (256 steps of every env: a transition of g1-track's groups is 13 KB, so 13.8 GB);
    24,000 iterations, PPO's preset's 98M env steps."""
    def make(task: str) -> TrainConfig:
        return humanoid_recipe(algorithm, task, G1TrackEnvConfig(num_envs=HUMANOID_RECIPE_ENVS), 24_000, 1_048_576)

    return make


def small_preset(task: str) -> PPOTrainConfig:
    """The quick preset tests use."""
    cfg = preset(task)
    cfg.env.num_envs = 32
    cfg.policy.actor_hidden, cfg.policy.critic_hidden = [64, 64], [64, 64]
    cfg.ppo.steps_per_env, cfg.ppo.num_epochs, cfg.ppo.num_minibatches = 8, 1, 2
    cfg.iterations = 4
    cfg.perf.compile = "off"  # 4 iterations: compiling g1-track's graphs takes about a minute
    return cfg


def make_env(cfg: TrainConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
    from syncfree.envs.builtin.g1_track import make_g1_track

    env = env_config(cfg)
    return make_g1_track(num_envs, device, seed, env.max_episode_length, options=env,
                         tokenizer=token_policy(cfg) is not None, perf=cfg.perf)


def render(cfg: TrainConfig, device: torch.device, seed: int, width: int, height: int) -> tuple[VecEnv, Drawer]:
    from syncfree.envs.builtin.g1_track import G1TrackEnv
    from syncfree.envs.render import G1Renderer

    env = make_env(cfg, 1, device, seed)
    assert isinstance(env, G1TrackEnv)
    return env, G1Renderer(env, width, height)


TASKS = (
    TaskSpec("g1-track", "Unitree G1 (29 joints) tracks whole-body reference motions; physics: torch PD joints with "
             "the root driven along the reference (default), or MuJoCo / MuJoCo Warp with contacts (env.backend); "
             "adaptive start sampling", G1TrackEnvConfig, {"default": preset, "small": small_preset}, make_env, "ppo",
             env_layer=True, render=render, sections={"ppo": {"policy": TokenPolicyConfig}}, check=check,
             algorithm_presets=off_policy_presets(off_policy)),
)
