"""g1-track: a Unitree G1 (29 joints) tracks whole-body reference motions (`syncfree.envs.builtin.g1_track`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from syncfree.algo.feedforward import FeedForwardPPO
from syncfree.config import PPOConfig, TimeLimitEnvConfig, TokenPolicyConfig, TrainConfig
from syncfree.envs.api import VecEnv
from syncfree.envs.builtin.g1_track.config import G1TrackOptions
from syncfree.tasks.spec import Drawer, TaskSpec


@dataclass
class G1TrackEnvConfig(G1TrackOptions, TimeLimitEnvConfig):
    """g1-track's envs: how many, their time limit, and the settings tracking pipelines tune."""

    def validate(self, max_encoders: int = 2) -> None:
        TimeLimitEnvConfig.validate(self)
        G1TrackOptions.validate(self, max_encoders)


@dataclass
class G1TrackConfig(TrainConfig):
    """Train a G1 to track reference motions, with an MLP or the universal-token policy."""

    POLICY_KINDS: ClassVar[tuple[str, ...]] = ("mlp", "token")

    env: G1TrackEnvConfig = field(default_factory=G1TrackEnvConfig)
    policy: TokenPolicyConfig = field(default_factory=TokenPolicyConfig)

    def validate(self) -> None:
        super().validate()
        if self.policy.kind == "token":  # at most as many encoder types as the token policy has encoders
            self.env.validate(len(self.policy.token.encoders))


def preset(task: str) -> G1TrackConfig:
    cfg = G1TrackConfig(task=task)
    cfg.env.num_envs = 4096
    cfg.policy.actor_hidden, cfg.policy.critic_hidden = [512, 256, 128], [512, 256, 128]
    cfg.policy.init_std = 0.5  # at 1.0 the action-rate penalty outweighs tracking and ending episodes pays
    # the rate adapts once per update: per minibatch it climbed from and fell back to its 1e-5 floor within
    # every update (at the floor after 95-100 % of them at 256 envs); per update it settles near 7e-5
    cfg.ppo = PPOConfig(steps_per_env=24, num_epochs=5, num_minibatches=4, learning_rate=1e-4, gamma=0.99,
                        entropy_coef=0.005, kl_adapt_every="update")
    cfg.iterations = 1000
    return cfg


def small_preset(task: str) -> G1TrackConfig:
    """The quick preset tests use."""
    cfg = preset(task)
    cfg.env.num_envs = 32
    cfg.policy.actor_hidden, cfg.policy.critic_hidden = [64, 64], [64, 64]
    cfg.ppo.steps_per_env, cfg.ppo.num_epochs, cfg.ppo.num_minibatches = 8, 1, 2
    cfg.iterations = 4
    cfg.perf.compile = "off"  # 4 iterations: compiling g1-track's graphs takes about a minute
    return cfg


def make_env(cfg: G1TrackConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
    from syncfree.envs.builtin.g1_track import make_g1_track

    return make_g1_track(num_envs, device, seed, cfg.env.max_episode_length, options=cfg.env,
                         tokenizer=cfg.policy.kind == "token", perf=cfg.perf)


def render(cfg: G1TrackConfig, device: torch.device, seed: int, width: int, height: int) -> tuple[VecEnv, Drawer]:
    from syncfree.envs.builtin.g1_track import G1TrackEnv
    from syncfree.envs.render import G1Renderer

    env = make_env(cfg, 1, device, seed)
    assert isinstance(env, G1TrackEnv)
    return env, G1Renderer(env, width, height)


TASKS = (
    TaskSpec("g1-track", "Unitree G1 (29 joints) tracks whole-body reference motions; physics: torch PD joints with "
             "the root driven along the reference (default), or MuJoCo / MuJoCo Warp with contacts (env.backend); "
             "adaptive start sampling", G1TrackConfig, {"default": preset, "small": small_preset}, make_env,
             FeedForwardPPO, env_layer=True, render=render),
)
