"""Per-task presets: the hyperparameters `syncfree train --task T` starts from."""

from __future__ import annotations

from typing import Literal

from syncfree.config import PPOConfig, TrainConfig


def preset(task: str, size: Literal["default", "small"] = "default") -> TrainConfig:
    """Default hyperparameters per task; `small` is the quick preset tests use (g1-track)."""
    cfg = TrainConfig(task=task)
    if task.startswith("cartpole"):
        cfg.env.num_envs = 64
        # a fixed rate: the adaptive one sat at its 1e-2 ceiling after 91 % of the updates (the KL target never
        # bound); at a fixed 3e-3 cartpole-continuous failed 1 seed of 5, at 5e-3 and 1e-2 none
        cfg.ppo = PPOConfig(steps_per_env=32, num_epochs=5, num_minibatches=4, learning_rate=5e-3, gamma=0.99,
                            schedule="fixed")
        cfg.iterations = 150
        cfg.perf.compile = "off"  # a 14 s run: compiling (15-30 s here) would cost more than it saves
    elif task == "pendulum":
        cfg.env.num_envs = 256
        # a fixed rate: the adaptive one sat at a bound in 20 % of the iterations and let seed 0 collapse late
        cfg.ppo = PPOConfig(steps_per_env=32, num_epochs=5, num_minibatches=4, learning_rate=1e-3, gamma=0.95,
                            schedule="fixed")
        cfg.iterations = 300
    elif task == "point-mass":
        cfg.env.num_envs = 4096
        cfg.policy.actor_hidden, cfg.policy.critic_hidden = [128, 128], [128, 128]
        # a fixed rate: adapting to a KL of 0.01 from 1e-3, the rate sat at its 1e-2 ceiling after 95 % of the
        # minibatches; a fixed 3e-3 scored highest of 1e-3, 3e-3, 5e-3 and 1e-2 on seeds 0-2
        cfg.ppo = PPOConfig(steps_per_env=24, num_epochs=5, num_minibatches=4, learning_rate=3e-3, schedule="fixed",
                            gamma=0.99)
        cfg.iterations = 50
    elif task.startswith("gym:Humanoid"):  # Gymnasium envs step on the host, one core: few envs, longer rollouts
        cfg.env.num_envs = 16
        cfg.policy.actor_hidden, cfg.policy.critic_hidden = [256, 256], [256, 256]
        # global clip and reward normalization as CleanRL's MuJoCo PPO (global: it learned Humanoid-v5 better
        # here; without normalized rewards Hopper-v5 seed 0 reached 640 after 200k steps, with them 1,240); the rate
        # adapts once per update (per minibatch it sat at its 1e-5 floor in 25-32 % of the evaluations)
        cfg.ppo = PPOConfig(steps_per_env=64, num_epochs=5, num_minibatches=4, learning_rate=3e-4, gamma=0.99,
                            grad_clip="global", normalize_rewards=True, kl_adapt_every="update")
        cfg.iterations = 300
    elif task.startswith("gym:"):
        # CleanRL's MuJoCo PPO (`ppo_continuous_action.py`): 2,048 steps per update (here 16 envs x 128), 10 epochs x
        # 32 minibatches of 64, [64, 64] tanh, the rate annealed from 3e-4 to 0, value loss x 0.5, one global
        # gradient norm clipped to 0.5, rewards normalized; 488 iterations = 1M env steps. On Hopper-v5 (seeds 0-4)
        # its training return was 2312 +- 202, the Humanoid preset's 1920 +- 368 (annealed: 2073 +- 453)
        cfg.env.num_envs = 16
        cfg.policy.actor_hidden, cfg.policy.critic_hidden = [64, 64], [64, 64]
        cfg.policy.activation = "tanh"
        cfg.ppo = PPOConfig(steps_per_env=128, num_epochs=10, num_minibatches=32, learning_rate=3e-4,
                            schedule="linear", gamma=0.99, lam=0.95, value_loss_coef=0.5, max_grad_norm=0.5,
                            grad_clip="global", normalize_rewards=True)
        cfg.iterations = 488
    elif task == "grid-arena":
        cfg.env.num_envs = 16  # MettaGrid simulations (x 4 agents)
        cfg.policy.kind = "recurrent"
        cfg.ppo = PPOConfig(steps_per_env=32, num_epochs=4, num_minibatches=4, learning_rate=3e-3,
                            schedule="fixed", gamma=0.99, lam=0.95, entropy_coef=0.01, value_loss_coef=0.5,
                            max_grad_norm=0.5, bptt_horizon=16)
        cfg.iterations = 100
        cfg.save_every = 25
    elif task == "g1-track":
        cfg.env.num_envs = 4096
        cfg.policy.actor_hidden, cfg.policy.critic_hidden = [512, 256, 128], [512, 256, 128]
        cfg.policy.init_std = 0.5  # at 1.0 the action-rate penalty outweighs tracking and ending episodes pays
        # the rate adapts once per update: per minibatch it climbed from and fell back to its 1e-5 floor within
        # every update (at the floor after 95-100 % of them at 256 envs); per update it settles near 7e-5
        cfg.ppo = PPOConfig(steps_per_env=24, num_epochs=5, num_minibatches=4, learning_rate=1e-4, gamma=0.99,
                            entropy_coef=0.005, kl_adapt_every="update")
        cfg.iterations = 1000
        if size == "small":
            cfg.env.num_envs = 32
            cfg.policy.actor_hidden, cfg.policy.critic_hidden = [64, 64], [64, 64]
            cfg.ppo.steps_per_env, cfg.ppo.num_epochs, cfg.ppo.num_minibatches = 8, 1, 2
            cfg.iterations = 4
            cfg.perf.compile = "off"  # 4 iterations: compiling g1-track's graphs takes about a minute
    return cfg
