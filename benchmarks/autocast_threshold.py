"""Where bfloat16 hidden layers start to gain: an MLP's forward and backward timed in float32 and under
`perf.autocast=bf16`, eagerly and compiled, over a grid of rows and widths; the ratio against rows x width is what
`autocast=auto`'s threshold (`syncfree.policy.actor_critic.AUTO_MIN_WORK`) is read from.

    OMP_NUM_THREADS=1 python benchmarks/autocast_threshold.py --out results.json

Each cell: syncfree's `MLP` (`--inputs` features, two hidden layers of the width, ReLU, one output: a critic's
shape), the gradient of its summed outputs with respect to its parameters (`torch.func.grad`), `--repeats` rounds of
`--calls` calls each, the two precisions interleaved round by round; the figure is float32's median seconds per call
over bfloat16's (above 1: bfloat16 is faster). Compiled: `torch.compile(fullgraph=True)` over that gradient. The
parameters are given detached, as the whole compiled steps of PPO and the off-policy learners use theirs (they
detach them inside the graph): compiled with parameters that record gradients of their own, the graph would also be
traced for a backward through the gradient and keep tensors for it (ReLU's boolean masks among them, which
inductor's CPU kernels write slowly). Freed host memory is kept for reuse, as training keeps it
(`perf.retain_host_memory`), so no call pays page faults for its activations.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def cell(rows: int, width: int, inputs: int, compiled: bool, calls: int, repeats: int) -> dict[str, Any]:
    from syncfree.policy.actor_critic import mlp, set_autocast

    torch.manual_seed(0)
    x = torch.randn(rows, inputs)
    steps = {}
    for precision in ("off", "bf16"):
        net = mlp(inputs, [width, width], 1, "relu")
        set_autocast(net, precision)
        params = {name: p.detach() for name, p in net.named_parameters()}

        def loss(p: dict[str, torch.Tensor], net: torch.nn.Module = net) -> torch.Tensor:
            return torch.func.functional_call(net, p, (x,)).sum()

        grad = torch.func.grad(loss)
        steps[precision] = (torch.compile(grad, fullgraph=True) if compiled else grad), params
    medians = interleaved_medians(steps, calls, repeats)
    off, bf16 = medians["off"], medians["bf16"]
    return {"rows": rows, "width": width, "work": rows * width, "compiled": compiled, "float32_ms": off * 1e3,
            "bfloat16_ms": bf16 * 1e3, "speedup": off / bf16}


def interleaved_medians(steps: dict[str, tuple[Callable[[Any], Any], Any]], calls: int,
                        repeats: int) -> dict[str, float]:
    """Each named step's median seconds per call of `step(params)`: 3 calls each first (warm-up and compile),
    then `repeats` rounds of `calls` calls, the steps interleaved round by round."""
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    for step, params in steps.values():
        for _ in range(3):
            step(params)
    for _ in range(repeats):
        for name, (step, params) in steps.items():
            start = time.perf_counter()
            for _ in range(calls):
                step(params)
            seconds[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(values) for name, values in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    p.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512])
    p.add_argument("--inputs", type=int, default=23, help="input features (HalfCheetah's 17 + 6 actions: 23)")
    p.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    prepare_timing()
    cells = []
    for mode in args.modes:
        for width in args.widths:
            for rows in args.rows:
                row = cell(rows, width, args.inputs, mode == "compiled", args.calls, args.repeats)
                cells.append(row)
                print(f"{mode:8} rows {rows:5} width {width:4} (rows x width {row['work']:,}): "
                      f"float32 {row['float32_ms']:.3f} ms, bfloat16 {row['bfloat16_ms']:.3f} ms, "
                      f"{row['speedup']:.2f}x", flush=True)
    write_cells(args, cells)
    return 0


def prepare_timing() -> None:
    """`OMP_NUM_THREADS` threads (1 by default), and freed host memory kept for reuse, as training keeps it
    (`perf.retain_host_memory`), so no call pays page faults for its activations."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from syncfree.core.memory import retain_freed_memory

    retain_freed_memory()


def write_cells(args: argparse.Namespace, cells: list[dict[str, Any]]) -> None:
    """The timed cells to `args.out` (nothing without it), with the machine, torch, the threads and the timing's
    settings."""
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({
            "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "inputs": args.inputs, "calls": args.calls,
            "repeats": args.repeats, "cells": cells}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
