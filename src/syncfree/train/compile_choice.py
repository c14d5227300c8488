"""`perf.compile=auto`: compile the loop only when the run is long enough for the compile warm-up to pay back.

The figures are measured, per task preset, by `benchmarks/compile_payback.py` (eager and compiled seconds per
iteration, and the warm-up a first compiled iteration adds with empty compile caches) and shipped with the package
(`compile_payback.json`). A run of `iterations` compiles (`step`) when `iterations` reaches its task's break-even;
otherwise it runs eagerly (`off`). The choice depends only on the config and that table, so the same command chooses
the same way again; the run's `config.yaml` and checkpoints record the mode chosen, so a rerun from them or a resume
does not choose again.
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

from syncfree.config import TrainConfig

TABLE = Path(__file__).with_name("compile_payback.json")
"""Written by `benchmarks/compile_payback.py`."""


@dataclass(frozen=True)
class CompileChoice:
    """The compile mode a run uses and, when `perf.compile=auto` chose it, why (in words)."""

    mode: Literal["off", "auto", "hot", "step"]
    reason: str | None = None


@functools.cache
def payback_table() -> dict[str, Any]:
    """The measured figures: `{"machine": ..., "device": "cpu", "tasks": {task: {eager_s, compiled_s, warmup_s,
    break_even}}}`."""
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
    """The compile mode `cfg` runs under on `device`: its own unless it is `auto`."""
    if cfg.perf.compile != "auto":
        return CompileChoice(cfg.perf.compile)
    table = payback_table()
    if device.type != table["device"]:
        return CompileChoice("step", f"auto: no measured warm-up on {device.type}, compiled as the optimized preset")
    figures = table["tasks"].get(cfg.task)
    if figures is None:
        break_even = median_break_even(table["tasks"])
        measured = f"the median of the built-in presets' break-even, {break_even}"
    elif figures["break_even"] is None:
        return CompileChoice("off", f"auto: compiled iterations of {cfg.task}'s preset were not faster "
                                    f"({figures['compiled_s']:.2g} s against {figures['eager_s']:.2g} s eager)")
    else:
        break_even = figures["break_even"]
        measured = (f"a {figures['warmup_s']:.0f} s warm-up pays back after {break_even} "
                    f"({figures['eager_s']:.2g} -> {figures['compiled_s']:.2g} s per iteration at the preset's size)")
    if cfg.iterations >= break_even:
        return CompileChoice("step", f"auto: {cfg.iterations} iterations, {measured}")
    return CompileChoice("off", f"auto: {cfg.iterations} iterations, too few: {measured}")


def resolve_compile(cfg: TrainConfig, device: torch.device) -> tuple[TrainConfig, CompileChoice]:
    """`cfg` with `perf.compile=auto` replaced by the mode chosen (a copy; `cfg` itself is left as it is)."""
    choice = choose_compile(cfg, device)
    if choice.mode == cfg.perf.compile:
        return cfg, choice
    return dataclasses.replace(cfg, perf=dataclasses.replace(cfg.perf, compile=choice.mode)), choice
