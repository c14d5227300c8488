"""A checkpoint's fields checked against what this run would save, before anything is restored.

The run's own `state_dict()` is the schema: every field of a checkpoint must have the type, tensor dtype and shape
(and dict keys, list lengths) of the run's field of that name, and each value its range: iterations and counts
>= 0, a learning rate > 0, normalizer variances and Adam's second moments >= 0, finite floating-point values, random
states a generator accepts. Adam's moments are checked against the parameter of their index. The first field that
differs is one line naming it, what was expected and what was found; a checkpoint that passes restores whole.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from syncfree.errors import UserError
from syncfree.tasks import stored_algorithm

log = logging.getLogger("syncfree")

OPTIONAL = ("callbacks", "wandb_id")
"""Top-level fields a checkpoint of an earlier version may lack."""

IGNORED = ("config",)
"""Checked elsewhere: the config is parsed and validated as a config, then compared with the run's."""

ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")
"""AdamW's moments (syncfree's AdamW has no `amsgrad`)."""

MUON_MOMENTS = ("momentum_buffer",)
"""Muon's state per hidden matrix (`ppo.optimizer=muon`; its other parameters keep AdamW's)."""

SCHEDULE_FREE_STATE = (("z", "exp_avg_sq"), ("step", "weight_sum", "lr_max"))
"""Schedule-free AdamW's state per parameter: tensors shaped as it, and scalars >= 0."""

NON_NEGATIVE = (".var", ".count", "algorithm.skipped_steps", "exp_avg_sq", ".env_steps")
"""Tensors (by the end of their path) whose values are never negative."""


class Mismatch(UserError):
    pass


def describe(value: Any) -> str:
    """A value's kind in a line: `a float32 tensor of shape (64, 3)`, `a str`, `None`."""
    if isinstance(value, Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__} ({value!r})" if isinstance(value, (int, float, str)) and len(repr(value)) < 40 \
        else f"a {type(value).__name__}"


def check_fits(state: dict[str, Any], runner: Any, template: dict[str, Any], source: str, resume: bool) -> None:
    """A checkpoint fits `runner` (a `syncfree.train.runner.Runner`) before anything of it is restored: to resume,
    as many env rows per process as it was written with (the process count may differ: said in a line); the task's
    observation and action shapes and the env count; the run's algorithm, with the policy settings its weights mean
    something under (`Algorithm.check_resumable`); the env's state; every field as `template` has it
    (`check_checkpoint`)."""
    env, cfg = runner.env, runner.cfg
    if resume:
        saved = state.get("world_size", 1)
        if isinstance(saved, int) and saved != runner.world_size and runner.is_main:
            log.info("%s: written by %d process%s, resumed by %d: the trainer state (policy, optimizer, learning "
                     "rate, iteration, env steps) continues, rank 0 continues the saved envs and the other ranks "
                     "start new episodes; an iteration now collects %d x %s", source, saved, "es" if saved != 1 else "",
                     runner.world_size, runner.world_size, cfg.env.describe(env.num_envs))
        if state.get("num_envs") != env.num_envs:
            raise UserError(f"{source}: written with {state.get('num_envs')} env rows but this run has "
                            f"{cfg.env.describe(env.num_envs)} (env.num_envs={cfg.env.num_envs}); resume with the "
                            "same")
    expected = {"task": cfg.task, "obs_dims": runner.algorithm.obs_dims(env),
                "action_spec": (env.action_spec.kind, env.action_spec.size), "num_envs": env.num_envs}
    for key, value in expected.items():
        got = state.get(key)
        if isinstance(got, list):
            got = tuple(got)
        if got != value:
            raise UserError(f"{source}: {key} is {got!r} but this run has {value!r}")
    config = state.get("config")
    trained_by = stored_algorithm(config) if isinstance(config, dict) else "?"
    if trained_by != cfg.algorithm:
        raise UserError(f"{source}: trained by {trained_by} but this run trains by {cfg.algorithm} (--algorithm); a "
                        "resumed run keeps its algorithm, whose optimizer state the checkpoint holds")
    runner.algorithm.check_resumable(config, cfg, source)
    if env.saveable:
        env.check_state_dict(state.get("env"))
    algorithm = runner.algorithm
    check_checkpoint(state, template, source, {f"algorithm.{k}": v for k, v in algorithm.optimizer_params().items()},
                     optional=tuple(f"algorithm.{k}" for k in algorithm.optional_state))


def check_checkpoint(state: dict[str, Any], template: dict[str, Any], source: str,
                     optimizer_params: Mapping[str, Sequence[Tensor]] | None = None,
                     optional: Sequence[str] = ()) -> None:
    """Raise `UserError` (one line) at the first field of `state` that differs from `template`, this run's own
    `state_dict()`. `optimizer_params`: the parameters of each Adam optimizer whose state is in `state`, by its path
    (`algorithm.optimizer`), in the optimizer's order (its moments are shaped as they are); `optional`: paths either
    side may lack (an extension turned on or off since: `algorithm.rnd`), checked where both have them."""
    params = dict(optimizer_params or {})
    try:
        for key, expected in template.items():
            if key in IGNORED:
                continue
            if key not in state:
                if key in OPTIONAL:
                    continue
                raise Mismatch(f"{key}: missing")
            special = SPECIAL.get(key)
            if special is not None:
                special(state[key], expected, key)
            else:
                conform(state[key], expected, key, params, tuple(optional))
    except Mismatch as e:
        hint = next((h for prefix, h in HINTS.items() if str(e).startswith(prefix)), "")
        raise UserError(f"{source}: {e}{hint}") from None


HINTS = {"algorithm.replay_buffer.": " (a saved replay buffer has its run's buffer_size, env.num_envs and observation "
                                     "sizes; resume with save_buffer false to start with an empty one)"}
"""What a mismatch at a path (by its start) usually means, said after it."""


def conform(found: Any, expected: Any, path: str, params: Mapping[str, Sequence[Tensor]] | None = None,
            optional: tuple[str, ...] = ()) -> None:
    """`found` has `expected`'s structure, types, dtypes and shapes, and in-range values; an optimizer's state (a path
    of `params`) holds moments shaped as its parameters."""
    params = params or {}
    if path in params:
        _optimizer(found, path, params[path])
        return
    if isinstance(expected, Tensor):
        _tensor(found, expected.dtype, tuple(expected.shape), path)
    elif isinstance(expected, dict):
        if not isinstance(found, dict):
            raise Mismatch(f"{path}: expected a dict, found {describe(found)}")
        skip = {k for k in (*found, *expected) if f"{path}.{k}" in optional and (k in found) != (k in expected)}
        missing = [k for k in expected if k not in found and k not in skip]
        extra = [k for k in found if k not in expected and k not in skip]
        if missing or extra:
            raise Mismatch(f"{path}: " + "; ".join(part for part in (_listed("lacks", missing),
                                                                     _listed("has unexpected", extra)) if part))
        for key, value in expected.items():
            if key not in skip:
                conform(found[key], value, f"{path}.{key}", params, optional)
    elif isinstance(expected, (list, tuple)):
        if not isinstance(found, (list, tuple)) or len(found) != len(expected):
            raise Mismatch(f"{path}: expected {describe(expected)}, found {describe(found)}")
        for i, (f, e) in enumerate(zip(found, expected, strict=True)):
            conform(f, e, f"{path}[{i}]", params, optional)
    elif isinstance(expected, bool):
        _kind(found, bool, "a bool", path)
    elif isinstance(expected, int):
        _kind(found, int, "an integer", path)
        if path in ("iteration", "env_steps", "algorithm.env_steps") and found < 0:
            raise Mismatch(f"{path}: expected an integer >= 0, found {found}")
    elif isinstance(expected, float):
        _number(found, path)
    elif isinstance(expected, str):
        _kind(found, str, "a str", path)
    elif expected is None and found is not None:
        raise Mismatch(f"{path}: expected None, found {describe(found)}")
    if path.endswith(LEARNING_RATES):
        _learning_rate(found, path)


LEARNING_RATES = ("algorithm.lr",)
"""Tensors (by the end of their path) that are a learning rate: > 0."""


def _listed(what: str, keys: list[Any], most: int = 4) -> str:
    """`lacks 'a', 'b' (and 3 more)`, or "" for no keys."""
    if not keys:
        return ""
    more = f" (and {len(keys) - most} more)" if len(keys) > most else ""
    return f"{what} {', '.join(map(repr, keys[:most]))}{more}"


def _kind(found: Any, kind: type, words: str, path: str) -> None:
    if not isinstance(found, kind) or (kind is not bool and isinstance(found, bool)):
        raise Mismatch(f"{path}: expected {words}, found {describe(found)}")


def _number(found: Any, path: str) -> float:
    if not isinstance(found, (int, float)) or isinstance(found, bool) or not math.isfinite(found):
        raise Mismatch(f"{path}: expected a finite number, found {describe(found)}")
    return float(found)


def _tensor(found: Any, dtype: torch.dtype, shape: tuple[int, ...], path: str) -> Tensor:
    if not isinstance(found, Tensor):
        raise Mismatch(f"{path}: expected a {str(dtype).removeprefix('torch.')} tensor of shape {shape}, found "
                       f"{describe(found)}")
    if found.dtype != dtype or tuple(found.shape) != shape:
        raise Mismatch(f"{path}: expected a {str(dtype).removeprefix('torch.')} tensor of shape {shape}, found "
                       f"{describe(found)}")
    if found.is_floating_point() and not bool(torch.isfinite(found).all()):
        raise Mismatch(f"{path}: holds non-finite values")
    if path.endswith(NON_NEGATIVE) and found.numel() and bool((found < 0).any()):
        raise Mismatch(f"{path}: holds negative values (it never does)")
    return found


def _optimizer(found: Any, path: str, params: Sequence[Tensor], every: bool = True, adam_only: bool = False) -> None:
    """`torch.optim.AdamW`'s state dict: per parameter index, a step count and moments shaped as the parameter (or,
    not `adam_only`, Muon's momentum shaped as it, `MuonAdamW`'s, or `ScheduleFreeAdamW`'s state); `every`: of every
    parameter or none."""
    if not isinstance(found, dict) or not isinstance(found.get("state"), dict) or not isinstance(
            found.get("param_groups"), list):
        raise Mismatch(f"{path}: expected an optimizer state (a dict of state and param_groups), found "
                       f"{describe(found)}")
    indices = set(found["state"])
    if every and indices and indices != set(range(len(params))):  # empty before the first step, else all
        raise Mismatch(f"{path}.state: expected the moments of all {len(params)} parameters (indices 0-"
                       f"{len(params) - 1}) or none, found indices {sorted(map(repr, indices))[:8]}")
    for index, entry in found["state"].items():
        where = f"{path}.state[{index!r}]"
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(params):
            raise Mismatch(f"{where}: expected a parameter index in [0, {len(params)}), found {describe(index)}")
        param = params[index]
        if not adam_only and isinstance(entry, dict) and set(entry) == set(MUON_MOMENTS):
            for name in MUON_MOMENTS:
                _tensor(entry[name], param.dtype, tuple(param.shape), f"{where}.{name}")
            continue
        shaped, scalars = SCHEDULE_FREE_STATE
        if not adam_only and isinstance(entry, dict) and set(entry) == {*shaped, *scalars}:
            for name in shaped:
                _tensor(entry[name], param.dtype, tuple(param.shape), f"{where}.{name}")
            for name in scalars:
                value = entry[name]
                if not isinstance(value, Tensor) or value.dim() != 0 or not bool(torch.isfinite(value)) or \
                        float(value) < 0:
                    raise Mismatch(f"{where}.{name}: expected a number >= 0, found {describe(value)}")
            continue
        if not isinstance(entry, dict) or set(entry) != {"step", *ADAM_MOMENTS}:
            raise Mismatch(f"{where}: expected step, exp_avg and exp_avg_sq, found "
                           f"{sorted(entry) if isinstance(entry, dict) else describe(entry)}")
        step = entry["step"]
        if isinstance(step, Tensor):
            if step.dim() != 0 or not step.is_floating_point() or not bool(torch.isfinite(step).all()) or \
                    float(step) < 0:
                raise Mismatch(f"{where}.step: expected a count >= 0, found {describe(step)}")
        elif _number(step, f"{where}.step") < 0:
            raise Mismatch(f"{where}.step: expected a count >= 0, found {step!r}")
        for name in ADAM_MOMENTS:
            _tensor(entry[name], param.dtype, tuple(param.shape), f"{where}.{name}")


def check_optimizer_state(found: Any, params: Sequence[Tensor], path: str, every: bool = True) -> None:
    """`found` is an Adam(W) state dict for `params` (moments shaped as each, step counts >= 0), or one line
    (`UserError`) naming the first field that is not, under `path`. `every`: the moments of every parameter or
    none, as syncfree saves them; else of any (rsl_rl's Adam keeps none for a parameter that has had no
    gradient)."""
    _optimizer(found, path, params, every, adam_only=True)


def _learning_rate(found: Any, path: str) -> None:
    value = _tensor(found, torch.float64, (), path)
    if not float(value) > 0:
        raise Mismatch(f"{path}: expected a learning rate > 0, found {float(value)}")


def _rng(found: Any, expected: Any, path: str) -> None:
    """The random states, in the shapes this process has (CUDA's may differ: other devices), each one a generator
    accepts (set on a throwaway generator, nothing of this process's touched)."""
    if not isinstance(found, dict):
        raise Mismatch(f"{path}: expected a dict, found {describe(found)}")
    for key in ("torch", "python", "numpy"):
        if key not in found:
            raise Mismatch(f"{path}.{key}: missing")
    conform(found["torch"], expected["torch"], f"{path}.torch")
    conform(found["numpy"], expected["numpy"], f"{path}.numpy")
    python = found["python"]  # (version, 625 words, the cached Gaussian: None or a number)
    if not isinstance(python, (list, tuple)) or len(python) != 3:
        raise Mismatch(f"{path}.python: expected Python's random state (a tuple of 3), found {describe(python)}")
    conform(python[:2], expected["python"][:2], f"{path}.python")
    if python[2] is not None:
        _number(python[2], f"{path}.python[2]")
    trials: dict[str, Callable[[], Any]] = {
        "torch": lambda: torch.Generator().set_state(found["torch"]),
        "python": lambda: random.Random().setstate(found["python"]),
        "numpy": lambda: np.random.RandomState().set_state(
            (found["numpy"]["bit_generator"], found["numpy"]["keys"].numpy().astype(np.uint32),
             found["numpy"]["pos"], found["numpy"]["has_gauss"], found["numpy"]["cached_gaussian"])),
    }
    for key, trial in trials.items():
        try:
            trial()
        except (TypeError, ValueError, RuntimeError, OverflowError, KeyError) as e:
            raise Mismatch(f"{path}.{key}: not a random state ({type(e).__name__})") from None
    keys = found["numpy"]["keys"]
    if bool(((keys < 0) | (keys >= 2**32)).any()):
        raise Mismatch(f"{path}.numpy.keys: values outside [0, 2**32)")


def _episodes(found: Any, expected: Any, path: str) -> None:
    """The recent episodes' returns and lengths: lists of finite numbers (as many as finished, up to the window)."""
    if not isinstance(found, dict) or set(found) != set(expected):
        raise Mismatch(f"{path}: expected the keys {sorted(expected)}, found "
                       f"{sorted(found) if isinstance(found, dict) else describe(found)}")
    for key, values in found.items():
        if not isinstance(values, (list, tuple)):
            raise Mismatch(f"{path}.{key}: expected a list of numbers, found {describe(values)}")
        for i, value in enumerate(values):
            _number(value, f"{path}.{key}[{i}]")


def _callbacks(found: Any, expected: Any, path: str) -> None:
    if not isinstance(found, dict):
        raise Mismatch(f"{path}: expected a dict, found {describe(found)}")
    best, since = found.get("best"), found.get("since_best", 0)
    if best is not None:
        _number(best, f"{path}.best")
    _kind(since, int, "an integer", f"{path}.since_best")
    if since < 0:
        raise Mismatch(f"{path}.since_best: expected an integer >= 0, found {since}")


SPECIAL: dict[str, Callable[[Any, Any, str], None]] = {"rng": _rng, "episodes": _episodes, "callbacks": _callbacks}
"""Fields whose shape is not the template's: random states (the CUDA ones depend on the devices), recent episodes
(as many as finished), the callbacks' state."""
