"""Environments: the batched env protocol, syncfree's own envs and adapters (the tasks: `syncfree.tasks`).

The protocol's names are imported on first use, so that a module of `syncfree.envs` that needs no torch (a host
simulator's worker process imports `syncfree.envs.adapters.host_worker`) does not import it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from syncfree.envs.api import ActionSpec, StepResult, TorchVecEnv, VecEnv

__all__ = ["ActionSpec", "StepResult", "TorchVecEnv", "VecEnv"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from syncfree.envs import api

        return getattr(api, name)
    raise AttributeError(f"module 'syncfree.envs' has no attribute {name!r}")
