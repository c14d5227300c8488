"""rsl_rl `VecEnv` (rsl-rl-lib >= 5, e.g. Isaac Lab's `RslRlVecEnvWrapper`) -> syncfree `VecEnv`: syncfree's
trainer on an Isaac Lab task or any other env written for rsl_rl.

Needs tensordict (installed with rsl-rl-lib: `pip install 'syncfree[bench]'`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.api import ActionSpec, StepResult, VecEnv
from syncfree.errors import UserError


class RslRlVecEnv(VecEnv):
    """Wraps an object with rsl_rl 5's `VecEnv` interface: `num_envs`, `num_actions`, `max_episode_length`,
    `device`, `cfg`, `get_observations() -> TensorDict` of observation groups and
    `step(actions) -> (observations, rewards, dones, extras)`.

    - Observations: the `policy_group` group becomes syncfree's `policy` observation and the `critic_group` group
      its `critic` observation; when the env has no `critic_group` group, the critic sees the policy group. Each
      may also be a list of groups, concatenated in order (rsl_rl's `obs_groups`; every group must exist). Groups
      must be float32 tensors of shape `[num_envs, dim]`.
    - Episode ends: `extras["time_outs"]` marks time limits, so `truncated = dones & time_outs` and
      `terminated = dones & ~time_outs` (every done is a termination when the env gives no `time_outs`). The
      env resets finished episodes itself, as rsl_rl expects. Time-outs bootstrap from the value of the step's
      observation, as in rsl_rl (such envs do not return the final observation).
    - Actions: continuous, `num_actions` wide, passed on as the policy outputs them (as rsl_rl's runner does;
      clip them in the env, e.g. Isaac Lab's `clip_actions`).
    - `pop_log()`: the mean of each value seen in `extras["episode"]`, or else `extras["log"]`, since the last
      call (a tensor counts as its mean), as rsl_rl's logger reports them; summed on the device and moved to
      the host with the trainer's one transfer per iteration.
    - `reset()` calls the env's own `reset()` when it has one (Isaac Lab's wrapper does) and reads
      `get_observations()`. Such envs cannot be saved (`saveable = False`): a resumed run restores the trainer
      state exactly and starts new episodes.

    The first observations and step results are checked: a missing group, a value that is not a tensor or a
    tensor of the wrong shape is a `UserError` naming it.
    """

    saveable = False

    def __init__(self, env: Any, policy_group: str | Sequence[str] = "policy",
                 critic_group: str | Sequence[str] = "critic",
                 mirror_function: Callable[..., Any] | None = None) -> None:
        for name in ("num_envs", "num_actions", "max_episode_length", "device", "get_observations", "step"):
            if not hasattr(env, name):
                raise UserError(f"rsl_rl env {type(env).__name__}: no {name!r} (not an rsl_rl VecEnv)")
        self.env = env
        self.num_envs = n = int(env.num_envs)
        self.device = torch.device(env.device)
        max_len = env.max_episode_length
        self.max_episode_length = int(max_len.max()) if isinstance(max_len, Tensor) else int(max_len)
        self.action_spec = ActionSpec("continuous", int(env.num_actions))
        self.policy_groups = [policy_group] if isinstance(policy_group, str) else list(policy_group)
        self.critic_groups = [critic_group] if isinstance(critic_group, str) else list(critic_group)
        self.policy_group, self.critic_group = self.policy_groups[0], self.critic_groups[0]
        self._critic_optional = isinstance(critic_group, str)
        obs = self._check_obs(env.get_observations(), "get_observations()")
        if isinstance(critic_group, str) and critic_group not in _group_names(obs):
            self.critic_groups, self.critic_group = self.policy_groups, self.policy_group
        """The groups the critic sees: `critic_group`, or `policy_group` when the env has no such group."""
        self._group_widths = {g: obs[g].shape[1] for g in dict.fromkeys(self.policy_groups + self.critic_groups)}
        self.obs_shapes = {"policy": (sum(self._group_widths[g] for g in self.policy_groups),),
                           "critic": (sum(self._group_widths[g] for g in self.critic_groups),)}
        self._joined = {name: torch.zeros(n, *self.obs_shapes[name], device=self.device)
                        for name, groups in (("policy", self.policy_groups), ("critic", self.critic_groups))
                        if len(groups) > 1}
        """Buffers of the observations that concatenate several groups (one group is passed on as the env gave it)."""
        zeros = lambda dtype: torch.zeros(n, dtype=dtype, device=self.device)  # noqa: E731
        self._reward = zeros(torch.float32)
        self._terminated, self._truncated = zeros(torch.bool), zeros(torch.bool)
        self.episode_return, self.episode_length = zeros(torch.float32), zeros(torch.int64)
        self._final_return, self._final_length = zeros(torch.float32), zeros(torch.int64)
        self._info = {"episode_return": self._final_return, "episode_length": self._final_length}
        self._log_sums: dict[str, Tensor] = {}
        self._log_counts: dict[str, int] = {}
        self.log_names: dict[str, None] = {}
        """The names `extras["episode"]` / `extras["log"]` gave so far, in the order first seen (an ordered set): which
        entries of a record are the env's terms."""
        self._checked_step = False
        self._obs = self._groups(obs)
        self._mirror_function = mirror_function
        """rsl_rl's `data_augmentation_func(env=, obs=, actions=)`, the env's mirror (`mirror()`), if given."""

    def mirror(self) -> RslRlMirror | None:
        if self._mirror_function is None:
            return None
        groups = {"policy": self.policy_groups, "critic": self.critic_groups}
        return RslRlMirror(self._mirror_function, self.env, groups, self._group_widths)

    def reset(self) -> dict[str, Tensor]:
        if callable(getattr(self.env, "reset", None)):
            self.env.reset()
            self._obs = self._groups(self._check_obs(self.env.get_observations(), "get_observations()"))
        self.episode_return.zero_()
        self.episode_length.zero_()
        return self._obs

    def step(self, actions: Tensor) -> StepResult:
        obs, rewards, dones, extras = self.env.step(actions)
        if not self._checked_step:
            self._check_step(obs, rewards, dones, extras)
            self._checked_step = True
        self._reward.copy_(rewards)
        done, truncated = self._terminated, self._truncated
        torch.ne(dones, 0, out=done)
        time_outs = extras.get("time_outs")
        if time_outs is None:
            truncated.zero_()
        else:
            torch.ne(time_outs, 0, out=truncated).logical_and_(done)
        self.episode_return.add_(self._reward)
        self.episode_length.add_(1)
        self._final_return.copy_(self.episode_return)
        self._final_length.copy_(self.episode_length)
        self.episode_return.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0)
        done.logical_xor_(truncated)  # terminated = dones & ~time_outs
        log = extras.get("episode", extras.get("log"))
        if log:
            self._accumulate(log)
        self._obs = self._groups(obs)
        return StepResult(self._obs, self._reward, self._terminated, self._truncated, self._info)

    def pop_log(self) -> dict[str, Tensor]:
        out = {k: s.double() / self._log_counts[k] for k, s in self._log_sums.items()}
        self._log_sums, self._log_counts = {}, {}  # new sums: these may be inference tensors of the rollout
        return out

    # -- internals ---------------------------------------------------------------------------------------

    def _groups(self, obs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return {"policy": self._join(obs, self.policy_groups, "policy"),
                "critic": self._join(obs, self.critic_groups, "critic")}

    def _join(self, obs: Mapping[str, Tensor], groups: list[str], name: str) -> Tensor:
        """One group as the env returned it, or several concatenated into this adapter's buffer."""
        if len(groups) == 1:
            return obs[groups[0]]
        return torch.cat([obs[g] for g in groups], dim=-1, out=self._joined[name])

    def _accumulate(self, log: Mapping[str, Any]) -> None:
        for key, value in log.items():
            if isinstance(value, Tensor):
                value = value.detach()
                value = value if value.dim() == 0 and value.is_floating_point() else value.float().mean()
            elif not isinstance(value, (int, float)):
                continue  # strings and other non-numbers are not logged
            if key not in self._log_sums:
                self._log_sums[key], self._log_counts[key] = torch.zeros((), device=self.device), 0
                self.log_names[key] = None
            self._log_sums[key].add_(value)
            self._log_counts[key] += 1

    def _check_obs(self, obs: Any, source: str) -> Mapping[str, Any]:
        where = f"rsl_rl env {type(self.env).__name__}: {source}"
        if not isinstance(obs, Mapping) and not hasattr(obs, "keys"):
            raise UserError(f"{where} returned {type(obs).__name__}, not a TensorDict of observation groups")
        keys = _group_names(obs)
        if hasattr(self, "_group_widths"):  # after construction: every group the policy or the critic reads
            required = list(self._group_widths)
        else:  # a single critic group may be missing (the critic then sees the policy's)
            required = self.policy_groups + ([] if self._critic_optional else self.critic_groups)
        for group in required:
            if group not in keys:
                raise UserError(f"{where} has no observation group {group!r} "
                                f"(has {', '.join(map(str, keys)) or 'none'})")
        for group in dict.fromkeys(g for g in self.policy_groups + self.critic_groups if g in keys):
            value = obs[group]
            if not isinstance(value, Tensor):
                raise UserError(f"{where}: observation group {group!r} is a {type(value).__name__}, not a tensor "
                                "(concatenate its terms)")
            self._check_tensor(value, f"{where}: observation group {group!r}", 2, torch.float32)
            width = getattr(self, "_group_widths", {}).get(group)
            if width is not None and value.shape[1] != width:
                raise UserError(f"{where}: observation group {group!r} has shape {tuple(value.shape)}, "
                                f"expected {(self.num_envs, width)}")
        return obs

    def _check_step(self, obs: Any, rewards: Any, dones: Any, extras: Any) -> None:
        where = f"rsl_rl env {type(self.env).__name__}: step()"
        self._check_obs(obs, "step()")
        self._check_tensor(rewards, f"{where} rewards", 1)
        self._check_tensor(dones, f"{where} dones", 1)
        if not isinstance(extras, Mapping):
            raise UserError(f"{where} extras is a {type(extras).__name__}, not a dict")
        if extras.get("time_outs") is not None:
            self._check_tensor(extras["time_outs"], f"{where} extras['time_outs']", 1)

    def _check_tensor(self, value: Any, name: str, dims: int, dtype: torch.dtype | None = None) -> None:
        if not isinstance(value, Tensor):
            raise UserError(f"{name} is a {type(value).__name__}, not a tensor")
        expected = "[num_envs, dim]" if dims == 2 else "[num_envs]"
        if value.dim() != dims or value.shape[0] != self.num_envs:
            raise UserError(f"{name} has shape {tuple(value.shape)}; expected {expected} with num_envs={self.num_envs}")
        if dtype is not None and value.dtype != dtype:
            raise UserError(f"{name} has dtype {value.dtype}; expected {dtype}")
        if value.device.type != self.device.type:
            raise UserError(f"{name} is on {value.device}; the env's device is {self.device}")


def _group_names(obs: Any) -> list[str]:
    """Top-level group names of a TensorDict or a dict."""
    return list(obs.keys())


class RslRlMirror:
    """rsl_rl's symmetry function (`data_augmentation_func(env=, obs=, actions=)`, returning the originals followed by
    their augmentations) as a `Mirror`: a syncfree observation is split into the env's groups it concatenates, passed
    as a TensorDict, and the first augmentation taken (a function that returns more than one is refused: syncfree's
    symmetry takes one reflection)."""

    def __init__(self, function: Callable[..., Any], env: Any, groups: Mapping[str, Sequence[str]],
                 widths: Mapping[str, int]) -> None:
        self.function, self.env = function, env
        self.groups = {name: list(names) for name, names in groups.items()}
        self.widths = dict(widths)

    def observations(self, group: str, obs: Tensor) -> Tensor:
        from tensordict import TensorDict

        names = self.groups[group]
        parts = obs.split([self.widths[g] for g in names], dim=-1)
        mirrored, _ = self.function(env=self.env, obs=TensorDict(dict(zip(names, parts, strict=True)),
                                                                 batch_size=[obs.shape[0]]), actions=None)
        return torch.cat([self._reflection(mirrored[g], obs.shape[0], f"observation group {g!r}") for g in names],
                         dim=-1)

    def actions(self, actions: Tensor) -> Tensor:
        _, mirrored = self.function(env=self.env, obs=None, actions=actions)
        return self._reflection(mirrored, actions.shape[0], "actions")

    @staticmethod
    def _reflection(augmented: Tensor, rows: int, what: str) -> Tensor:
        if augmented.shape[0] != 2 * rows:
            raise ValueError(f"the function returned {augmented.shape[0]} rows of {what} for {rows} (one reflection "
                             f"is {2 * rows}: the originals, then their mirror)")
        return augmented[rows:]
