"""Gymnasium envs stepping into rows of shared arrays: the part of a `SplitVectorEnv` (the Gymnasium adapter's
`perf.host_env_worker`) that runs in either process. It imports no torch, so a worker starts with numpy and
Gymnasium only."""

from __future__ import annotations

from typing import Any

from syncfree.envs.adapters.host_worker import SharedArrays

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode
except ImportError as e:  # pragma: no cover - exercised only without gymnasium
    raise ImportError("the Gymnasium adapter needs gymnasium >= 1.0: pip install gymnasium") from e


def make_sync(env_id: str, num_envs: int, **kwargs: Any) -> Any:
    """Gymnasium's sync vector env of `num_envs` envs with same-step autoreset."""
    return gymnasium.make_vec(env_id, num_envs, vectorization_mode="sync",
                              vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, **kwargs)


class GymnasiumRows:
    """Envs `first` to `first + count - 1` of a `SplitVectorEnv`: a sync vector env of its own that reads its
    rows of the shared action array and writes its rows of the shared results, in whichever process it lives."""

    def __init__(self, arrays: SharedArrays, env_id: str, first: int, count: int, kwargs: dict[str, Any]) -> None:
        self.env = make_sync(env_id, count, **kwargs)
        self.envs = self.env.envs
        self.first = first
        self.steps = 0
        """Vector steps taken (each steps all `count` envs)."""
        rows = slice(first, first + count)
        self.obs, self.final_obs, self.reward, self.terminated, self.truncated, self.ended, self.actions = (
            arrays[name][rows] for name in SPLIT_FIELDS)

    def reset(self, seed: int | None) -> None:
        obs, _ = self.env.reset(seed=None if seed is None else seed + self.first)  # env i: seed + i, as unsplit
        self.obs[...] = obs

    def step(self) -> None:
        """Each env's step, and where its episode ended its reset, written straight into this part's rows: the
        calls, in the order, of Gymnasium's sync vector env with same-step autoreset, without what the adapter does
        not read (that env's merging of every env's info dict into arrays, its copies of the batch)."""
        self.steps += 1
        obs, final_obs, reward, terminated, truncated, ended = (
            self.obs, self.final_obs, self.reward, self.terminated, self.truncated, self.ended)
        actions = self.actions
        for i, env in enumerate(self.envs):
            observation, reward[i], terminated[i], truncated[i], _ = env.step(actions[i])
            ended[i] = terminated[i] or truncated[i]
            if ended[i]:
                final_obs[i] = observation
                observation, _ = env.reset()
            obs[i] = observation

    def close(self) -> None:
        self.env.close()


SPLIT_FIELDS = ("obs", "final_obs", "reward", "terminated", "truncated", "ended", "actions")
