"""`check_env`: what an env says of itself against what it returns, before anything is built or compiled on it.

A user's env that declares `obs_shapes = {"policy": (3,)}` and returns `[N, 1]` would otherwise train on wrong data
(the normalizer stretches the input to fit), and a reward of the wrong shape or dtype would end in a raw torch error
deep inside a compiled step. `check_env` resets the env and steps it with neutral actions, and names the first
mismatch in one line: the field, what was expected and what came. An env that raises inside `reset` or `step` is one
line too, naming the error, where it was raised and the actions it was given. The runner calls it on every env it is
given (`Runner(cfg, env=...)`, `syncfree.learn(env)`), before the policy is built; the built-in tasks' envs are
checked by the test suite instead.

What would train right but not as the env's author may think is a warning: float64 rewards (the trainer keeps
float32), and envs that end no episode within the `max_episode_length` they declare.

Observation tensors may be the same buffers from step to step (the env protocol lets an env reuse them; the trainer
copies what it keeps), so reuse is not a mistake here.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from syncfree.envs.api import ActionSpec, StepResult, VecEnv
from syncfree.envs.contract import check_observations, check_vector, is_obs_shapes, mistake
from syncfree.errors import UserError, is_out_of_memory

log = logging.getLogger("syncfree")

CHECK_STEPS = 3
"""Steps `check_env` takes at least."""
LONGEST_CHECKED_EPISODE = 1000
"""The longest `max_episode_length` within which `check_env` looks for every env's episode to end (a longer one
would cost that many steps at every start)."""


def check_env(env: VecEnv, steps: int = CHECK_STEPS) -> None:
    """Reset `env` and step it with neutral actions (zeros; action 0) `steps` times, and on until every env has
    ended an episode or `max_episode_length` steps have passed (when the env declares one of at most
    `LONGEST_CHECKED_EPISODE`); raise `UserError` naming the first field that does not match what the env declares
    (`num_envs`, `device`, `obs_shapes`, `action_spec`) or the `VecEnv` protocol (reward, terminated and truncated
    `[num_envs]`, float and bool; float32 observations, or uint8 tokens; finite values), or an error the env raised
    (with the actions it was given). Float64 rewards and envs that end no episode within `max_episode_length` are a
    warning each. The env is left mid-episode: reset it before use."""
    name = type(env).__name__
    num_envs = _declared(env, "num_envs")
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise mistake(name, "num_envs", "an integer >= 1", repr(num_envs))
    declared = _declared(env, "device")
    try:
        device = torch.device(declared)
    except (TypeError, RuntimeError):
        raise mistake(name, "device", "a torch.device (or a name such as 'cpu')", repr(declared)) from None
    shapes = _declared(env, "obs_shapes")
    if not is_obs_shapes(shapes):
        raise mistake(name, "obs_shapes", "a dict of group name -> shape tuple, e.g. {'policy': (3,)}",
                      repr(shapes))
    spec = _declared(env, "action_spec")
    if not isinstance(spec, ActionSpec) or spec.kind not in ("continuous", "discrete") or spec.size < 1:
        raise mistake(name, "action_spec", "ActionSpec('continuous' or 'discrete', size >= 1)", repr(spec))
    _check_obs(name, "reset()", _call(name, "reset()", env.reset), shapes, num_envs, device)
    actions = (torch.zeros(num_envs, spec.size, device=device) if spec.kind == "continuous" else
               torch.zeros(num_envs, dtype=torch.int64, device=device))
    limit = getattr(env, "max_episode_length", None)
    limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and \
        1 <= limit <= LONGEST_CHECKED_EPISODE else 0
    ended = torch.zeros(num_envs, dtype=torch.bool, device=device)
    float64_rewards = False
    given = f"; it was given actions {_describe_actions(actions, spec)}"
    taken = 0
    while taken < steps or (taken < limit and not bool(ended.all())):
        result = _call(name, "step(actions)", env.step, actions, given=given)
        taken += 1
        if not isinstance(result, StepResult):
            raise mistake(name, "step()", "a StepResult(obs, reward, terminated, truncated, info)",
                          type(result).__name__)
        _check_obs(name, "step().obs", result.obs, shapes, num_envs, device)
        _check_vector(name, "step().reward", result.reward, num_envs, device, floating=True)
        for field in ("terminated", "truncated"):
            _check_vector(name, f"step().{field}", getattr(result, field), num_envs, device, floating=False)
        if not isinstance(result.info, dict):
            raise mistake(name, "step().info", "a dict", type(result.info).__name__)
        float64_rewards |= result.reward.dtype == torch.float64
        ended |= result.terminated | result.truncated
    if float64_rewards:
        log.warning("env %s: step().reward is float64; the trainer keeps rewards in float32, so the env computes "
                    "them in float64 for nothing", name)
    if limit and not bool(ended.all()):
        log.warning("env %s: %d of %d envs ran max_episode_length=%d steps (neutral actions) without ending an "
                    "episode: their returns are never logged and evaluation, which runs that many steps, scores them "
                    "NaN; end each episode at its time limit (truncated) or declare the limit the env keeps",
                    name, int((~ended).sum()), num_envs, limit)


def _declared(env: VecEnv, attribute: str) -> Any:
    if not hasattr(env, attribute):
        raise mistake(type(env).__name__, attribute, "declared on the env (a VecEnv attribute)", "missing")
    return getattr(env, attribute)


def _call(name: str, what: str, method: Callable[..., Any], *args: Any, given: str = "") -> Any:
    """`method(*args)`; an error it raises (other than a `UserError` or running out of memory, which have lines
    of their own) is one line naming `what` raised it, the error, where it was raised, and then `given`."""
    try:
        return method(*args)
    except UserError:
        raise
    except Exception as e:
        if is_out_of_memory(e):
            raise
        message = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        raise UserError(f"env {name}: {what} raised {type(e).__name__}"
                        f"{': ' + message if message else ''}{_raised_at(e)}{given}") from e


def _raised_at(error: BaseException) -> str:
    """Where `error` was raised: the innermost frame outside torch (the env's own code, as a rule)."""
    inside_torch = os.path.dirname(torch.__file__) + os.sep
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(inside_torch)]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (at {os.path.basename(frame.filename)}:{frame.lineno}, in {frame.name})"


def _describe_actions(actions: Tensor, spec: ActionSpec) -> str:
    """The actions `check_env` passes: shape, dtype, the first few values, and what `action_spec` made of them."""
    values = actions.flatten()[:4].tolist()
    more = ", ..." if actions.numel() > 4 else ""
    kind = f"{spec.size} choices" if spec.kind == "discrete" else f"size {spec.size}"
    return (f"of shape {tuple(actions.shape)} {actions.dtype} [{', '.join(map(str, values))}{more}] (action_spec "
            f"{spec.kind}, {kind})")


def _check_obs(name: str, where: str, obs: Any, shapes: Mapping[str, tuple[int, ...]], num_envs: int,
               device: torch.device) -> None:
    check_observations(name, where, obs, shapes, num_envs, device)
    for group in shapes:
        if obs[group].is_floating_point() and not bool(torch.isfinite(obs[group]).all()):
            raise mistake(name, f"{where}[{group!r}]", "finite values", "NaN or infinity")


def _check_vector(name: str, field: str, value: Any, num_envs: int, device: torch.device, floating: bool) -> None:
    check_vector(name, field, value, num_envs, device, floating)
    if floating and not bool(torch.isfinite(value).all()):
        raise mistake(name, field, "finite values", "NaN or infinity")
