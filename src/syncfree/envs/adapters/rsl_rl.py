"""syncfree env -> rsl_rl `VecEnv` (rsl-rl-lib >= 5): lets rsl_rl's `OnPolicyRunner` train on a syncfree task.

Needs the `bench` extra (`pip install 'syncfree[bench]'`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.api import VecEnv
from syncfree.envs.mirror import Mirror
from syncfree.errors import UserError

try:
    from rsl_rl.env import VecEnv as RslRlVecEnv
    from tensordict import TensorDict
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the rsl_rl adapter needs rsl-rl-lib: pip install 'syncfree[bench]'") from e


class SyncfreeToRslRl(RslRlVecEnv):
    """Observation groups become a TensorDict and time-outs `extras["time_outs"]`; rsl_rl's own logger sums
    rewards into episode returns.

    The observations handed to rsl_rl are copies. syncfree envs write each step's observations into the same
    buffers, while rsl_rl's PPO keeps a reference to the observations it acted on and copies them into its
    storage only after `env.step`: handed the buffers themselves, it would store every action beside the next
    step's observation and not learn. The copy is what an env that returns new tensors each step (Isaac Lab's)
    allocates anyway. Rewards, dones and time-outs are used by rsl_rl before the next step and are not copied.
    """

    def __init__(self, env: VecEnv) -> None:
        if env.action_spec.kind != "continuous":
            raise UserError(f"rsl_rl adapter: {type(env).__name__} has discrete actions; rsl_rl 5 samples continuous "
                            "actions only")
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.action_spec.size
        self.max_episode_length = env.max_episode_length
        self.device = env.device
        self.cfg: dict = {}
        self.episode_length_buf = getattr(env, "episode_length", torch.zeros(env.num_envs, dtype=torch.int64))
        self._obs = env.reset()

    def get_observations(self) -> TensorDict:
        return TensorDict({name: obs.clone() for name, obs in self._obs.items()}, batch_size=[self.num_envs],
                          device=self.device)

    def step(self, actions: Tensor) -> tuple[TensorDict, Tensor, Tensor, dict]:
        result = self.env.step(actions)
        self._obs = result.obs
        dones = result.terminated | result.truncated
        return self.get_observations(), result.reward, dones, {"time_outs": result.truncated}


def rsl_rl_augmentation(mirror: Mirror) -> Callable[..., tuple[Any, Any]]:
    """A syncfree `Mirror` as rsl_rl's symmetry `data_augmentation_func(env=, obs=, actions=)`: the originals
    followed by their reflection (every observation group, and the actions)."""

    def augment(env: Any = None, obs: Any = None, actions: Tensor | None = None) -> tuple[Any, Any]:
        groups = list(obs.keys()) if obs is not None else []  # iterating a TensorDict walks its rows, not its keys
        out_obs = None if obs is None else torch.cat([obs, TensorDict(
            {g: mirror.observations(g, obs[g]) for g in groups}, batch_size=obs.batch_size)])
        out_actions = None if actions is None else torch.cat([actions, mirror.actions(actions)])
        return out_obs, out_actions

    return augment
