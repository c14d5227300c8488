"""Gymnasium vector env -> syncfree `VecEnv`: trains syncfree on any `gymnasium.vector.VectorEnv` (Gymnasium >= 1.0).

The env must use same-step autoreset (`AutoresetMode.SAME_STEP`): a finished episode's last observation then
comes back in `infos["final_obs"]` (masked by `infos["_final_obs"]`) while the returned observation is already
the reset one, which is what syncfree's trainer expects. Gymnasium 1.x defaults to next-step autoreset, so build
the env with `make_gymnasium`, or pass `vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}`
to `gymnasium.make_vec`.

Gymnasium envs run on the host: every step moves the actions to the host in one copy and the results (observation,
final observation, reward, terminated, truncated) to `device` in one copy of one packed buffer (`HostPack`):
preallocated pinned buffers and non-blocking copies on CUDA; on the CPU the buffers are the tensors the trainer
reads and nothing is copied. Gymnasium envs cannot be saved (`saveable = False`): a resumed run restores the
trainer state exactly and starts new episodes.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from syncfree.envs.adapters.gymnasium_rows import GymnasiumRows, make_sync
from syncfree.envs.adapters.host_worker import HostWorker, SharedArrays
from syncfree.envs.adapters.staging import ActionStaging, HostPack, HostProfile, HostStaging
from syncfree.envs.api import ActionSpec, StepResult, VecEnv
from syncfree.errors import UserError

try:
    import gymnasium
    from gymnasium.spaces import Box, Discrete
    from gymnasium.vector import AutoresetMode
    from gymnasium.vector.utils import batch_space
except ImportError as e:  # pragma: no cover - exercised only without gymnasium
    raise ImportError("the Gymnasium adapter needs gymnasium >= 1.0: pip install gymnasium") from e


def _one_line(space: Any) -> str:
    return " ".join(str(space).split())


class GymnasiumVecEnv(HostStaging, VecEnv):
    """A Gymnasium vector env with Box observations and Box or Discrete actions.

    Observations: `obs = {"policy": x, "critic": x}` (the same tensor), float32 `[num_envs, dim]` on `device`,
    each observation flattened to one dimension.

    Actions: Discrete spaces take the policy's int64 choices (offset by the space's `start`). Box spaces follow
    syncfree's convention for continuous actions: the policy's unbounded outputs are clipped to [-1, 1] and mapped
    linearly onto the space's bounds, `low + (a + 1) / 2 * (high - low)`; dimensions with an infinite bound are
    passed through unscaled, clipped to the bound that is finite (if one is).

    `info["final_obs"]["critic"]` holds, on the rows where an episode ended, that episode's last observation
    (elsewhere: the returned observation): the trainer bootstraps time-outs from its value. `info["episode_return"]`
    and `info["episode_length"]` hold the finished episode's totals, kept in device tensors.

    `seed` seeds the first `reset()` only; later resets (e.g. on resume) continue the envs' random streams.
    `staged`: host buffers apart from the device tensors (default: on CUDA only; see `HostPack`).
    """

    saveable = False
    host_threads = True

    def __init__(self, vector_env: Any, device: torch.device | str = "cpu", seed: int | None = None,
                 staged: bool | None = None) -> None:
        if not isinstance(vector_env, gymnasium.vector.VectorEnv):
            raise UserError(f"Gymnasium adapter: {type(vector_env).__name__} is not a gymnasium.vector.VectorEnv")
        mode = vector_env.metadata.get("autoreset_mode")
        if isinstance(mode, str) and mode in {m.value for m in AutoresetMode}:
            mode = AutoresetMode(mode)
        if mode != AutoresetMode.SAME_STEP:
            got = mode.value if isinstance(mode, AutoresetMode) else "undeclared"
            raise UserError(f"Gymnasium adapter: {type(vector_env.unwrapped).__name__} uses autoreset mode {got}; "
                            "build it with vector_kwargs={'autoreset_mode': AutoresetMode.SAME_STEP} "
                            "(or use make_gymnasium)")
        obs_space, act_space = vector_env.single_observation_space, vector_env.single_action_space
        self.action_spec = action_spec_of(obs_space, act_space)
        self.vector_env = vector_env
        self.num_envs = n = vector_env.num_envs
        self.device = torch.device(device)
        self.max_episode_length = _max_episode_steps(vector_env)
        """The env spec's `max_episode_steps`, 0 when it declares none."""
        dim = math.prod(cast(Box, obs_space).shape)  # a Box: `action_spec_of` checked it
        self.obs_shapes = {"policy": (dim,), "critic": (dim,)}
        self._seed = seed
        self._act_shape = (n, *cast("tuple[int, ...]", act_space.shape))  # a Discrete's is ()
        cuda = self.device.type == "cuda"
        self._event = torch.cuda.Event() if cuda else None
        self._pack = pack = HostPack({"obs": ((n, dim), torch.float32), "final_obs": ((n, dim), torch.float32),
                                      "reward": ((n,), torch.float32), "terminated": ((n,), torch.bool),
                                      "truncated": ((n,), torch.bool)}, self.device, staged)
        self._obs, self._final_obs, self._reward, self._terminated, self._truncated = (
            pack.dev[name] for name in ("obs", "final_obs", "reward", "terminated", "truncated"))
        self._obs_np, self._final_obs_np, self._reward_np, self._terminated_np, self._truncated_np = (
            pack.array(name) for name in ("obs", "final_obs", "reward", "terminated", "truncated"))
        if self.action_spec.kind == "continuous":
            box = cast(Box, act_space)
            low, high = (np.broadcast_to(b, box.shape).reshape(-1).astype(np.float64) for b in (box.low, box.high))
            finite = np.isfinite(low) & np.isfinite(high)
            as_tensor = lambda x: torch.tensor(x, dtype=torch.float32, device=self.device)  # noqa: E731
            # a half-bounded dimension passes unscaled, clipped to its one bound
            self._clip_low = as_tensor(np.where(finite, -1.0, low))
            self._clip_high = as_tensor(np.where(finite, 1.0, high))
            low, high = np.where(finite, low, 0.0), np.where(finite, high, 0.0)
            self._scale = as_tensor(np.where(finite, (high - low) / 2, 1.0))
            self._offset = as_tensor(np.where(finite, (high + low) / 2, 0.0))
            act_dtype = torch.from_numpy(np.zeros(0, dtype=act_space.dtype)).dtype
            self._act = ActionStaging((n, self.action_spec.size), act_dtype, self.device, pack.staged)
        else:
            self._start = int(cast(Discrete, act_space).start)
            self._act = ActionStaging((n,), torch.int64, self.device, pack.staged)
        self._actions = self._act.dev
        self._actions_np = self._act.host.numpy().reshape(self._act_shape)
        self.host_profile = HostProfile(("actions", "simulator", "packing", "device"))
        zeros = lambda dtype: torch.zeros(n, dtype=dtype, device=self.device)  # noqa: E731
        self.episode_return, self.episode_length = zeros(torch.float32), zeros(torch.int64)
        self._final_return, self._final_length = zeros(torch.float32), zeros(torch.int64)
        self._done = zeros(torch.bool)
        self._obs_groups = {"policy": self._obs, "critic": self._obs}
        self._info = {"episode_return": self._final_return, "episode_length": self._final_length,
                      "final_obs": {"critic": self._final_obs}}

    def reset(self) -> dict[str, Tensor]:
        self._wait_for_copies()
        obs, _ = self.vector_env.reset(seed=self._seed)
        self._seed = None
        self._obs_np[...] = np.asarray(obs).reshape(self.num_envs, -1)
        self._pack.upload()
        self.episode_return.zero_()
        self.episode_length.zero_()
        return self._obs_groups

    def step(self, actions: Tensor) -> StepResult:
        profile = self.host_profile
        profile.start()
        if self.action_spec.kind == "continuous":
            torch.clamp(actions, self._clip_low, self._clip_high, out=self._actions)
            self._actions.mul_(self._scale).add_(self._offset)
        else:
            torch.add(actions, self._start, out=self._actions)
        self._act.download()
        self._wait_for_copies()  # the actions are on the host and the previous step's upload is done
        profile.lap("actions")
        obs, reward, terminated, truncated, infos = self.vector_env.step(self._actions_np)
        profile.lap("simulator")
        self._obs_np[...] = np.asarray(obs).reshape(self.num_envs, -1)
        self._reward_np[...] = reward
        self._terminated_np[...] = terminated
        np.greater(truncated, self._terminated_np, out=self._truncated_np)  # a time-out only where not terminal
        self._final_obs_np[...] = self._obs_np
        ended = infos.get("_final_obs")
        if ended is not None and ended.any():  # one stack of the finished envs' last observations
            rows = np.flatnonzero(ended)
            self._final_obs_np[rows] = np.stack(infos["final_obs"][rows]).reshape(len(rows), -1)
        self._pack.upload()
        profile.lap("packing")
        self.episode_return.add_(self._reward)
        self.episode_length.add_(1)
        done = torch.logical_or(self._terminated, self._truncated, out=self._done)
        self._final_return.copy_(self.episode_return)
        self._final_length.copy_(self.episode_length)
        self.episode_return.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0)
        profile.lap("device")
        profile.steps += 1
        return StepResult(self._obs_groups, self._reward, self._terminated, self._truncated, self._info)

    def close(self) -> None:
        self.vector_env.close()


def action_spec_of(obs_space: Any, act_space: Any) -> ActionSpec:
    """The action spec of an env with these spaces, or one line naming the space the adapter cannot map (it maps Box
    observations, Box or Discrete actions), before anything is laid out for them."""
    if not isinstance(obs_space, Box):
        raise UserError(f"Gymnasium adapter: observation space {_one_line(obs_space)} is not supported "
                        "(needs a Box)")
    if isinstance(act_space, Box):
        return ActionSpec("continuous", math.prod(act_space.shape))
    if isinstance(act_space, Discrete):
        return ActionSpec("discrete", int(act_space.n))
    raise UserError(f"Gymnasium adapter: action space {_one_line(act_space)} is not supported "
                    "(needs a Box or a Discrete)")


class SplitVectorEnv(gymnasium.vector.VectorEnv):
    """`num_envs` Gymnasium envs of `env_id` in two processes (`perf.host_env_worker`): the first `num_envs // 2`
    step in this process while the others step in a worker process (`HostWorker`), each part a sync vector env
    with same-step autoreset; results and actions live in shared memory, so a step moves no array through a pipe.
    Env i is seeded `seed + i` as in one sync vector env of `num_envs`, so both step the same episodes bit for bit.

    A `gymnasium.vector.VectorEnv` for the adapter: `step` returns the shared arrays themselves (overwritten by the
    next step, as Gymnasium's `copy=False`), and `infos` holds only `final_obs` (an array with a row per env)
    and its mask `_final_obs`, where an episode ended; the envs' own info keys are dropped."""

    def __init__(self, env_id: str, num_envs: int, **kwargs: Any) -> None:
        if num_envs < 2:
            raise UserError(f"SplitVectorEnv: num_envs={num_envs}; splitting needs at least 2 envs")
        probe = make_sync(env_id, 1, **kwargs)
        self.single_observation_space = probe.single_observation_space
        self.single_action_space = probe.single_action_space
        self.spec = getattr(probe.envs[0], "spec", None)
        probe.close()
        action_spec_of(self.single_observation_space, self.single_action_space)  # what the shared arrays lay out
        self.num_envs = num_envs
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

        def layout(space: Any) -> tuple[tuple[int, ...], str]:
            return (num_envs, *space.shape), np.dtype(space.dtype).str

        obs, flag = layout(self.single_observation_space), ((num_envs,), "|b1")
        self.arrays: SharedArrays | None = SharedArrays({
            "obs": obs, "final_obs": obs, "reward": ((num_envs,), "<f8"), "terminated": flag, "truncated": flag,
            "ended": flag, "actions": layout(self.single_action_space)})
        self.local_envs = local = num_envs // 2
        self.local: GymnasiumRows | None = None
        self.worker: HostWorker | None = None
        try:
            self.local = GymnasiumRows(self.arrays, env_id, 0, local, kwargs)
            self.worker = HostWorker(f"{env_id} envs {local}-{num_envs - 1}", self.arrays, GymnasiumRows, env_id,
                                     local, num_envs - local, kwargs)
        except BaseException:
            self.close()
            raise
        self._views = dict(self.arrays.arrays)
        """The shared arrays this process reads and writes (dropped at `close`, before the block is unmapped)."""

    def _both(self, method: str, *args: Any) -> None:
        """`method` on the worker's rows and on this process's at the same time."""
        worker = cast(HostWorker, self.worker)
        worker.call(method, *args)
        getattr(self.local, method)(*args)
        worker.wait()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if options:
            raise UserError("SplitVectorEnv: reset options are not supported")
        self._both("reset", seed)
        return self._views["obs"], {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        views = self._views
        np.copyto(views["actions"], np.asarray(actions).reshape(views["actions"].shape), casting="same_kind")
        self._both("step")
        ended = views["ended"]
        infos = {"final_obs": views["final_obs"], "_final_obs": ended} if ended.any() else {}
        return views["obs"], views["reward"], views["terminated"], views["truncated"], infos

    def close(self, **kwargs: Any) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        if self.local is not None:
            self.local.close()
            self.local = None
        if self.arrays is not None:
            self._views = {}
            self.arrays.close()
            self.arrays = None


def make_gymnasium(env_id: str, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
                   vectorization: str = "sync", staged: bool | None = None, worker: bool = False,
                   **kwargs: Any) -> GymnasiumVecEnv:
    """`gymnasium.make_vec(env_id, num_envs, ...)` with same-step autoreset, wrapped; `kwargs` go to `make_vec`
    (the env's constructor arguments, or `wrappers`). `seed` seeds the first reset (env i gets `seed + i`).
    `worker` (`perf.host_env_worker`, sync only, 2 envs or more): half of the envs step in a worker process while
    this process steps the other half (`SplitVectorEnv`), the same steps as unsplit."""
    if vectorization not in ("sync", "async"):
        raise UserError(f"make_gymnasium: vectorization={vectorization!r}; use 'sync' or 'async' (an env's own "
                        "vector entry point cannot be asked for same-step autoreset)")
    if worker and vectorization != "sync":
        raise UserError(f"make_gymnasium: worker=True splits a sync vector env; vectorization={vectorization!r}")
    vector_env: Any
    try:
        if worker:
            vector_env = SplitVectorEnv(env_id, num_envs, **kwargs)
        else:
            vector_env = gymnasium.make_vec(env_id, num_envs, vectorization_mode=vectorization,
                                            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, **kwargs)
    except gymnasium.error.Error as e:
        raise UserError(f"make_gymnasium: {env_id!r}: {_one_line(e)}") from None
    except ImportError as e:
        raise UserError(f"make_gymnasium: {env_id!r} needs a package that is not installed ({_one_line(e)}; "
                        "MuJoCo envs: pip install 'gymnasium[mujoco]')") from None
    return GymnasiumVecEnv(vector_env, device, seed, staged)


def _max_episode_steps(vector_env: Any) -> int:
    spec = getattr(vector_env, "spec", None)
    if spec is None and hasattr(vector_env, "envs"):
        spec = getattr(vector_env.envs[0], "spec", None)
    return int(getattr(spec, "max_episode_steps", None) or 0)
