"""What the env protocol's tensors must be, checked on their metadata alone (shape, dtype, device: no host read).

`syncfree.check_env` checks any env's results with these; `TorchVecEnv` checks what its subclass returns with them
once, at the first reset and step, before anything reads it. A mistake is one line: the env, the output, what was
expected and what came.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

import torch
from torch import Tensor

from syncfree.errors import UserError


def mistake(name: str, field: str, expected: str, got: str) -> UserError:
    """The one line for an env `name` whose `field` is not what the protocol (or the env's declaration) says."""
    return UserError(f"env {name}: {field}: expected {expected}, got {got}")


def on_device(value: Tensor, device: torch.device) -> bool:
    """Whether `value` is on `device`; a device without an index (`cuda`) takes any of its kind."""
    return value.device.type == device.type and (device.index is None or value.device.index == device.index)


def check_device(name: str, field: str, value: Tensor, device: torch.device) -> None:
    if not on_device(value, device):
        raise mistake(name, field, f"a tensor on {device} (env.device)", f"one on {value.device}")


def check_vector(name: str, field: str, value: Any, num_envs: int, device: torch.device, floating: bool) -> None:
    """One value per env: a `[num_envs]` floating-point tensor (reward) or bool tensor (terminated, truncated)."""
    if not isinstance(value, Tensor):
        raise mistake(name, field, "a tensor", type(value).__name__)
    if tuple(value.shape) != (num_envs,):
        raise mistake(name, field, f"shape ({num_envs},) (one per env)", f"shape {tuple(value.shape)}")
    if floating and not value.is_floating_point():
        raise mistake(name, field, "a floating-point tensor", str(value.dtype))
    if not floating and value.dtype != torch.bool:
        raise mistake(name, field, "a bool tensor", str(value.dtype))
    check_device(name, field, value, device)


def is_obs_shapes(shapes: Any) -> TypeGuard[Mapping[str, tuple[int, ...]]]:
    """Whether `shapes` is what `obs_shapes` must be: a non-empty dict of group name -> shape tuple."""
    return isinstance(shapes, Mapping) and bool(shapes) and all(
        isinstance(s, tuple) and all(isinstance(d, int) and d >= 1 for d in s) for s in shapes.values())


def check_observations(name: str, where: str, obs: Any, shapes: Mapping[str, tuple[int, ...]], num_envs: int,
                       device: torch.device) -> None:
    """Every group `shapes` declares, `[num_envs, *shape]` on `device`: float32, which every policy takes, or uint8
    for a group of tokens (more than one dimension per env, as MettaGrid's `[tokens, 3]`)."""
    if not isinstance(obs, Mapping):
        raise mistake(name, where, f"a dict of observation groups ({', '.join(shapes)})", type(obs).__name__)
    for group, shape in shapes.items():
        if group not in obs:
            raise mistake(name, f"{where}[{group!r}]", f"the group obs_shapes declares, shape {(num_envs, *shape)}",
                          f"no such group (has {', '.join(map(str, obs)) or 'none'})")
        value = obs[group]
        field = f"{where}[{group!r}]"
        if not isinstance(value, Tensor):
            raise mistake(name, field, "a tensor", type(value).__name__)
        if tuple(value.shape) != (num_envs, *shape):
            raise mistake(name, field, f"shape {(num_envs, *shape)} (num_envs, *obs_shapes[{group!r}])",
                          f"shape {tuple(value.shape)}")
        tokens = len(shape) > 1
        if value.dtype != torch.float32 and not (tokens and value.dtype == torch.uint8):
            raise mistake(name, field, "torch.float32 or torch.uint8 (tokens)" if tokens else "torch.float32",
                          str(value.dtype))
        check_device(name, field, value, device)
