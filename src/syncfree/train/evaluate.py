"""Policy evaluation: the first episode of each of N parallel environments."""

from __future__ import annotations

import numpy as np
import torch

from syncfree.config import TrainConfig
from syncfree.envs import VecEnv
from syncfree.policy.actor_critic import PolicyBase
from syncfree.policy.recurrent import RecurrentTokenPolicy
from syncfree.train.runner import make_task_env


def sampled_action(policy: PolicyBase, actor_obs: torch.Tensor) -> torch.Tensor:
    """An action drawn from the policy's distribution, as the rollout draws it."""
    return policy.head.sample(policy.dist_params(actor_obs))[0]


@torch.inference_mode()
def evaluate(policy: PolicyBase, env: VecEnv, greedy: bool = True) -> np.ndarray:
    """Return of each env's first episode under the policy's deterministic action (mean or argmax; `greedy`) or
    sampled ones."""
    act = policy.act_deterministic if greedy else (lambda actor_obs: sampled_action(policy, actor_obs))
    obs = env.reset()
    first_return = torch.full((env.num_envs,), float("nan"), device=env.device)
    finished = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_length):  # every episode ends by its time limit
        step = env.step(act(policy.actor_input(obs)))
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
                  seed: int, greedy: bool = True) -> np.ndarray:
    """First-episode returns of the policy's deterministic (greedy) or sampled actions on `num_envs` fresh envs of the
    run's task (grid-arena: simulations, one return per agent), as `syncfree eval` plays a checkpoint. Sampled actions
    draw from torch's generator seeded with `seed`, its state outside the call left as it was."""
    env = make_task_env(cfg, num_envs, device, seed)
    cuda = list(range(torch.cuda.device_count())) if device.type == "cuda" else []  # manual_seed seeds them all
    try:
        with torch.random.fork_rng(devices=cuda, enabled=not greedy):
            if not greedy:
                torch.manual_seed(seed)
            if cfg.policy.kind == "recurrent":
                return evaluate_recurrent(policy, env, greedy)
            return evaluate(policy, env, greedy)
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()
