"""`check_env`: what an env says of itself against what it returns, before anything is built or compiled on it.

A user's env that declares `obs_shapes = {"policy": (3,)}` and returns `[N, 1]` would otherwise train on wrong data
(the normalizer stretches the input to fit), and a reward of the wrong shape or dtype would end in a raw torch error
deep inside a compiled step. `check_env` resets the env and steps it a few times with neutral actions, and names
the first mismatch in one line: the field, what was expected and what came. The runner calls it on every env it is
given (`Runner(cfg, env=...)`, `syncfree.learn(env)`), before the policy is built; the built-in tasks' envs are
checked by the test suite instead.

Observation tensors may be the same buffers from step to step (the env protocol lets an env reuse them; the trainer
copies what it keeps), so reuse is not a mistake here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.api import ActionSpec, StepResult, VecEnv
from syncfree.errors import UserError

CHECK_STEPS = 3
"""Steps `check_env` takes by default."""


def check_env(env: VecEnv, steps: int = CHECK_STEPS) -> None:
    """Reset `env` and step it `steps` times with neutral actions (zeros; action 0); raise `UserError` naming the
    first field that does not match what the env declares (`num_envs`, `device`, `obs_shapes`, `action_spec`) or
    the `VecEnv` protocol (reward, terminated and truncated `[num_envs]`, float and bool; finite values). The env
    is left mid-episode: reset it before use."""
    name = type(env).__name__
    num_envs = _declared(env, "num_envs")
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise _mistake(name, "num_envs", "an integer >= 1", repr(num_envs))
    declared = _declared(env, "device")
    try:
        device = torch.device(declared)
    except (TypeError, RuntimeError):
        raise _mistake(name, "device", "a torch.device (or a name such as 'cpu')", repr(declared)) from None
    shapes = _declared(env, "obs_shapes")
    if not isinstance(shapes, Mapping) or not shapes or not all(
            isinstance(s, tuple) and all(isinstance(d, int) and d >= 1 for d in s) for s in shapes.values()):
        raise _mistake(name, "obs_shapes", "a dict of group name -> shape tuple, e.g. {'policy': (3,)}",
                       repr(shapes))
    spec = _declared(env, "action_spec")
    if not isinstance(spec, ActionSpec) or spec.kind not in ("continuous", "discrete") or spec.size < 1:
        raise _mistake(name, "action_spec", "ActionSpec('continuous' or 'discrete', size >= 1)", repr(spec))
    _check_obs(name, "reset()", env.reset(), shapes, num_envs, device)
    actions = (torch.zeros(num_envs, spec.size, device=device) if spec.kind == "continuous" else
               torch.zeros(num_envs, dtype=torch.int64, device=device))
    for _ in range(steps):
        result = env.step(actions)
        if not isinstance(result, StepResult):
            raise _mistake(name, "step()", "a StepResult(obs, reward, terminated, truncated, info)",
                           type(result).__name__)
        _check_obs(name, "step().obs", result.obs, shapes, num_envs, device)
        _check_vector(name, "step().reward", result.reward, num_envs, device, floating=True)
        for field in ("terminated", "truncated"):
            _check_vector(name, f"step().{field}", getattr(result, field), num_envs, device, floating=False)
        if not isinstance(result.info, dict):
            raise _mistake(name, "step().info", "a dict", type(result.info).__name__)


def _declared(env: VecEnv, attribute: str) -> Any:
    if not hasattr(env, attribute):
        raise _mistake(type(env).__name__, attribute, "declared on the env (a VecEnv attribute)", "missing")
    return getattr(env, attribute)


def _mistake(name: str, field: str, expected: str, got: str) -> UserError:
    return UserError(f"env {name}: {field}: expected {expected}, got {got}")


def _check_obs(name: str, where: str, obs: Any, shapes: Mapping[str, tuple[int, ...]], num_envs: int,
               device: torch.device) -> None:
    if not isinstance(obs, Mapping):
        raise _mistake(name, where, f"a dict of observation groups ({', '.join(shapes)})", type(obs).__name__)
    for group, shape in shapes.items():
        if group not in obs:
            raise _mistake(name, f"{where}[{group!r}]", f"the group obs_shapes declares, shape {(num_envs, *shape)}",
                           f"no such group (has {', '.join(map(str, obs)) or 'none'})")
        value = obs[group]
        field = f"{where}[{group!r}]"
        if not isinstance(value, Tensor):
            raise _mistake(name, field, "a tensor", type(value).__name__)
        if tuple(value.shape) != (num_envs, *shape):
            raise _mistake(name, field, f"shape {(num_envs, *shape)} (num_envs, *obs_shapes[{group!r}])",
                           f"shape {tuple(value.shape)}")
        _check_device(name, field, value, device)
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise _mistake(name, field, "finite values", "NaN or infinity")


def _check_vector(name: str, field: str, value: Any, num_envs: int, device: torch.device, floating: bool) -> None:
    if not isinstance(value, Tensor):
        raise _mistake(name, field, "a tensor", type(value).__name__)
    if tuple(value.shape) != (num_envs,):
        raise _mistake(name, field, f"shape ({num_envs},) (one per env)", f"shape {tuple(value.shape)}")
    if floating and not value.is_floating_point():
        raise _mistake(name, field, "a floating-point tensor", str(value.dtype))
    if not floating and value.dtype != torch.bool:
        raise _mistake(name, field, "a bool tensor", str(value.dtype))
    _check_device(name, field, value, device)
    if floating and not bool(torch.isfinite(value).all()):
        raise _mistake(name, field, "finite values", "NaN or infinity")


def _check_device(name: str, field: str, value: Tensor, device: torch.device) -> None:
    if value.device.type != device.type or (device.index is not None and value.device.index != device.index):
        raise _mistake(name, field, f"a tensor on {device} (env.device)", f"one on {value.device}")
