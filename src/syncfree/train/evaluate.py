"""Deterministic-policy evaluation: the first episode of each of N parallel environments."""

from __future__ import annotations

import numpy as np
import torch

from syncfree.envs import VecEnv
from syncfree.policy import ActorCritic


@torch.inference_mode()
def evaluate(policy: ActorCritic, env: VecEnv) -> np.ndarray:
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
