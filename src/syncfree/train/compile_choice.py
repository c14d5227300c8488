"""`perf.compile=auto`: compile the loop only when the run is long enough for the compile warm-up to pay back.

The figures are measured, per task preset, by `benchmarks/compile_payback.py` (eager and compiled seconds per
iteration, and the warm-up a first compiled iteration adds with empty compile caches) and shipped with the package
(`compile_payback.json`). A run of `iterations` compiles (`step`) when `iterations` reaches its task's break-even;
otherwise it runs eagerly (`off`). An off-policy learner's figures are its own, and its iterations are counted from
the first that takes gradient steps (its random steps and the filling of its buffer compile none of the gradient
step). A run that early stopping (`callbacks.stop_when`, `callbacks.patience`) may end sooner counts only the
iterations it is sure to run: the first at which the callbacks could stop it. The choice
depends only on the config and that table, so the same command chooses the same way again; the run's `config.yaml`
and checkpoints record the mode chosen, so a rerun from them or a resume does not choose again.

An env's step compiles with the trainer's functions only where it traces as one graph (`VecEnv.step_graph_break`):
where it does not, `auto` compiles the trainer's functions and runs the env eagerly, and a mode the user set is
refused in one line naming the line that breaks the graph.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from syncfree.algo import algorithm_named
from syncfree.config import CallbackConfig, TrainConfig
from syncfree.core.compile import GraphBreak, hot, missing_compiler
from syncfree.envs import VecEnv
from syncfree.errors import UserError

TABLE = Path(__file__).with_name("compile_payback.json")
"""Written by `benchmarks/compile_payback.py`."""


@dataclass(frozen=True)
class CompileChoice:
    """The compile mode a run uses and, where `perf.compile=auto` chose it or the env's step runs eagerly under it,
    why (in words)."""

    mode: Literal["off", "auto", "hot", "step"]
    reason: str | None = None
    env_break: GraphBreak | None = None
    """Where the env's step leaves one graph, when `auto` compiles the trainer's functions and runs it eagerly."""


@functools.cache
def payback_table() -> dict[str, Any]:
    """The measured figures: `{"machine": ..., "device": "cpu", "tasks": {task: {eager_s, compiled_s, warmup_s,
    break_even}}, "learners": {algorithm: {task: {...}}}}`: `tasks` each task's preset with its own algorithm,
    `learners` the presets of the algorithms measured apart (SAC, TD3), their iterations counted from the first
    that updates."""
    table: dict[str, Any] = json.loads(TABLE.read_text())
    return table


NEVER = 2**62
"""The break-even of a table in which compiling never paid back."""


def median_break_even(tasks: dict[str, dict[str, Any]]) -> int:
    """The break-even of a task without figures of its own: the median over the measured tasks (a task where
    compiled iterations were not faster counts as the longest)."""
    longest = max((f["break_even"] for f in tasks.values() if f["break_even"] is not None), default=NEVER)
    return int(statistics.median_low([f["break_even"] or longest for f in tasks.values()]))


def choose_compile(cfg: TrainConfig, device: torch.device) -> CompileChoice:
    """The compile mode `cfg` runs under on `device`: its own unless it is `auto`. Where compiled code would need a
    C++ compiler this machine lacks, `auto` runs eagerly and a mode the user set is refused in one line."""
    mode = cfg.perf.compile
    missing = missing_compiler(device) if mode != "off" else None
    if missing is not None and mode != "auto":
        raise UserError(f"perf.compile={mode}: torch builds its CPU kernels with a C++ compiler and none answers here "
                        f"(looked for: {missing}); install one (g++) or name it in CXX, or set perf.compile=off")
    if mode != "auto":
        return CompileChoice(mode)
    choice = payback_choice(cfg, device)
    if choice.mode != "off" and missing is not None:
        return CompileChoice("off", f"{choice.reason}, but no C++ compiler answers here (looked for: {missing}) "
                                    "to build torch's CPU kernels")
    return choice


def payback_choice(cfg: TrainConfig, device: torch.device) -> CompileChoice:
    """`auto`'s choice from the measured payback: `step` where the run is long enough for its warm-up."""
    algorithm = algorithm_named(cfg.algorithm) if cfg.algorithm else None
    table = payback_table()
    learner = cfg.algorithm if algorithm is not None and algorithm.own_payback else None
    if learner is not None and learner not in table.get("learners", {}):
        return CompileChoice("off", f"auto: {learner} runs eagerly (its compile warm-up is not measured)")
    if device.type != table["device"]:
        if learner is not None:
            return CompileChoice("off", f"auto: {learner}'s compiled gradient step has no measured warm-up on "
                                        f"{device.type}; --perf.compile step compiles it")
        return CompileChoice("step", f"auto: no measured warm-up on {device.type}, compiled as the optimized preset")
    by_task = table["learners"][learner] if learner is not None else table["tasks"]
    figures = by_task.get(cfg.task)
    whose, of = (f"{learner}'s ", f" of {learner}") if learner is not None else ("", "")
    if figures is None:
        break_even = median_break_even(by_task)
        measured = f"the built-in presets' median warm-up{of} pays back after {break_even} iterations"
    elif figures["break_even"] is None:
        return CompileChoice("off", f"auto: {cfg.task}'s compiled iterations{of} were not faster "
                                    f"({figures['compiled_s']:.2g} s against {figures['eager_s']:.2g} s)")
    else:
        break_even = figures["break_even"]
        measured = f"{whose or 'a '}{figures['warmup_s']:.0f} s warm-up pays back after {break_even} iterations"
    idle = cfg.iterations_before_learning()
    if idle:
        measured += f" that update (the first after {idle} without)"
    if cfg.iterations - idle < break_even:
        return CompileChoice("off", f"auto: {measured}")
    stop = earliest_stop(cfg.callbacks)
    if stop is None:
        return CompileChoice("step", f"auto: {measured}")
    first, setting = stop
    if first - idle < break_even:
        return CompileChoice("off", f"auto: {measured}; {setting} may stop the run at iteration {first}")
    return CompileChoice("step", f"auto: {measured}; {setting} stops none before {first}")


def earliest_stop(callbacks: CallbackConfig) -> tuple[int, str] | None:
    """The first iteration at which early stopping may end the run, and the setting that may; None: none is set.
    `stop_when` may be met by the first record with its metric; `patience` stops no sooner than `patience` records
    after the first that reports `save_best`'s metric; evaluation metrics (`eval_*`) come every `eval_every`
    iterations, the others every iteration."""
    def iteration_of(record: int, metric: str) -> int:
        return record * callbacks.eval_every if metric.startswith("eval_") else record

    found = []
    condition = callbacks.stop_condition()
    if condition is not None:
        found.append((iteration_of(1, condition[0]), "callbacks.stop_when"))
    if callbacks.patience:
        found.append((iteration_of(callbacks.patience + 1, callbacks.save_best), "callbacks.patience"))
    return min(found, default=None)


def resolve_compile(cfg: TrainConfig, device: torch.device) -> tuple[TrainConfig, CompileChoice]:
    """`cfg` with `perf.compile=auto` replaced by the mode chosen (a copy; `cfg` itself is left as it is)."""
    choice = choose_compile(cfg, device)
    if choice.mode == cfg.perf.compile:
        return cfg, choice
    return dataclasses.replace(cfg, perf=dataclasses.replace(cfg.perf, compile=choice.mode)), choice


def compile_env_step(env: VecEnv, choice: CompileChoice, cfg: TrainConfig, device: torch.device) -> CompileChoice:
    """Compile `env`'s step with the trainer's functions where it is one graph. Where it is not, a mode `auto` chose
    (or the run a resume continues chose) compiles the trainer's functions only and runs the env eagerly, the
    choice's reason naming the line that breaks the graph; a mode the user set is refused in one line naming it,
    before anything compiles."""
    perf = cfg.perf
    if perf.compile == "off":
        return choice
    found = env.step_graph_break()
    if found is None:
        env.compile_step(lambda fn, *static: hot(fn, perf, device, static))
        return choice
    name = type(env).__name__
    if choice.reason is None and not cfg.resume:
        raise UserError(f"perf.compile={perf.compile}: {name}'s step does not compile as one graph: "
                        f"{found.with_code()}; set perf.compile=auto to compile the trainer and run the env eagerly, "
                        "or perf.compile=off")
    eager = f"{name}'s step runs eagerly: its graph breaks at {found}"
    return dataclasses.replace(choice, reason=f"{choice.reason}; {eager}" if choice.reason else eager, env_break=found)
