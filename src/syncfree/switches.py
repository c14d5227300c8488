"""`syncfree switches`: the performance switches with their baseline and optimized values, and, for a task, which
of them act on its preset and why the others change nothing there."""

from __future__ import annotations

from typing import Literal

import docstring_parser
import torch

from syncfree.core.device import resolve_device
from syncfree.core.switches import PerfConfig
from syncfree.tasks import preset, switch_scope, validated
from syncfree.train.compile_choice import resolve_compile


def listing(task: str | None = None, compile: Literal["off", "auto", "hot", "step"] | None = None,
            device: str | None = None, algorithm: str | None = None) -> str:
    """Every switch with its values, origin and doc; with `task`, marked live or inert (with the reason) on the
    task's preset, under `compile` and on `device` (default: the preset's), trained by the task's algorithm or
    `algorithm` (from the preset's settings it shares)."""
    docs = {p.arg_name: p.description for p in docstring_parser.parse_from_object(PerfConfig).params}
    inert: dict[str, str] | None = None
    lines = []
    if task:
        cfg = preset(task, algorithm=algorithm)
        cfg.perf.compile = compile or cfg.perf.compile
        cfg.device = device or cfg.device
        if algorithm is None:  # another algorithm's settings may need a value of the user's (a teacher)
            cfg = validated(cfg)
        # judged for the device asked for, present here or not; else where the preset would train
        where = torch.device(device) if device else resolve_device(cfg.device)
        cfg, _ = resolve_compile(cfg, where)
        inert = cfg.perf.inert_switches(switch_scope(cfg, where))
        lines.append(f"{task}, {cfg.algorithm} (perf.compile={cfg.perf.compile}, device={where}): "
                     f"{len(PerfConfig.switches()) - len(inert)} switches act, {len(inert)} change nothing\n")
    for f in PerfConfig.switches():
        mark = ""
        if inert is not None:
            mark = f"  INERT: {inert[f.name]}" if f.name in inert else "  live"
        kind = " (a check, not an optimization)" if f.metadata["check"] else ""
        if f.default != f.metadata["optimized"]:  # a default that chooses per run (compile=auto)
            kind += f" default={f.default}"
        if f.metadata["seed_before"] != f.metadata["baseline"]:
            kind += f" seed's before={f.metadata['seed_before']}"
        lines.append(f"{f.name}: baseline={f.metadata['baseline']} optimized={f.metadata['optimized']}{kind}  "
                     f"[{f.metadata['seed']}]{mark}\n    {' '.join((docs.get(f.name) or '').split())}")
    return "\n".join(lines)
