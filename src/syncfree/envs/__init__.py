"""Environments: the batched env protocol, built-in tasks and adapters."""

from syncfree.envs.api import ActionSpec, StepResult, TorchVecEnv, VecEnv
from syncfree.envs.tasks import TASKS, make_env

__all__ = ["TASKS", "ActionSpec", "StepResult", "TorchVecEnv", "VecEnv", "make_env"]
