"""Policy evaluation: the first episode of each of N parallel environments."""

from __future__ import annotations

import numpy as np
import torch

from syncfree.config import TrainConfig
from syncfree.envs import VecEnv
from syncfree.policy.actor_critic import PolicyBase
from syncfree.policy.recurrent import RecurrentTokenPolicy
from syncfree.train.runner import make_task_env


@torch.inference_mode()
def evaluate(policy: PolicyBase, env: VecEnv) -> np.ndarray:
    """Return of each env's first episode under the policy's deterministic action (mean or argmax)."""
    obs = env.reset()
    first_return = torch.full((env.num_envs,), float("nan"), device=env.device)
    finished = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_length):  # every episode ends by its time limit
        step = env.step(policy.act_deterministic(policy.actor_input(obs)))
        done = step.terminated | step.truncated
        first_return = torch.where(done & ~finished, step.info["episode_return"], first_return)
        finished |= done
        obs = step.obs
    return first_return.cpu().numpy()


@torch.inference_mode()
def evaluate_recurrent(policy: RecurrentTokenPolicy, env: VecEnv, greedy: bool = True) -> np.ndarray:
    """Return of each agent's first episode (every row of `env`), acting with the most likely action (`greedy`)
    or sampling."""
    n = env.num_envs
    obs = env.reset()["policy"]
    state = policy.initial_state(n, env.device)
    done = torch.ones(n, dtype=torch.bool, device=env.device)
    last = torch.zeros(n, dtype=torch.int64, device=env.device)
    first_return = torch.full((n,), float("nan"), device=env.device)
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_length):  # every episode ends by its time limit
        out, state = policy.step(obs, state, done, last if policy.last_action is not None else None, greedy=greedy)
        step = env.step(out.actions)
        done = step.terminated | step.truncated
        first_return = torch.where(done & ~finished, step.info["episode_return"], first_return)
        finished |= done
        obs, last = step.obs["policy"], out.actions
    return first_return.cpu().numpy()


def evaluate_task(cfg: TrainConfig, policy: PolicyBase | RecurrentTokenPolicy, num_envs: int, device: torch.device,
                  seed: int) -> np.ndarray:
    """First-episode returns of the policy's deterministic (greedy) actions on `num_envs` fresh envs of the run's task
    (grid-arena: simulations, one return per agent), as `syncfree eval` plays a checkpoint."""
    env = make_task_env(cfg, num_envs, device, seed)
    try:
        return evaluate_recurrent(policy, env) if cfg.policy.kind == "recurrent" else evaluate(policy, env)
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()
