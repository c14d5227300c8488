"""Environments: the batched env protocol, syncfree's own envs and adapters (the tasks: `syncfree.tasks`)."""

from syncfree.envs.api import ActionSpec, StepResult, TorchVecEnv, VecEnv

__all__ = ["ActionSpec", "StepResult", "TorchVecEnv", "VecEnv"]
