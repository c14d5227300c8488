"""What building a policy reads of an env: its observation shapes and action spec (the algorithms build their
policies from these: `syncfree.algo`)."""

from __future__ import annotations

from typing import Protocol

from syncfree.envs.api import ActionSpec
from syncfree.errors import UserError


class EnvShape(Protocol):
    """What building a policy reads of an env (a `VecEnv`, or a checkpoint's record of one)."""

    obs_shapes: dict[str, tuple[int, ...]]
    action_spec: ActionSpec


def obs_dim(env: EnvShape, group: str) -> int:
    """The width of a flat observation group; one line naming the group when it is missing or not flat."""
    if group not in env.obs_shapes:
        raise UserError(f"env: observation group {group!r} missing (has {', '.join(env.obs_shapes)})")
    shape = env.obs_shapes[group]
    if len(shape) != 1:
        raise UserError(f"env: observation group {group!r} has shape {shape}; the MLP policy needs 1-D observations")
    return shape[0]
