"""Seconds per PPO iteration of a task's preset with each `ppo.optimizer`, compiled (`perf.compile=auto`, what a run
gets) and eager, one thread: what an optimizer costs in wall time beside what it learns.

    OMP_NUM_THREADS=1 python benchmarks/optimizer_iteration_time.py --task gym:Hopper-v5 --out times.json

Each configuration: 2 warm-up iterations, then 6 timed ones (the median is reported)."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from syncfree.config import with_values
from syncfree.tasks import preset
from syncfree.train.runner import Runner

OPTIMIZERS = ("adam", "muon", "schedule_free_adamw")


def iteration_seconds(task: str, optimizer: str, compile_mode: str, timed: int = 6) -> list[float]:
    cfg = with_values(preset(task), {"ppo.optimizer": optimizer, "perf.compile": compile_mode})
    cfg.iterations, cfg.log.progress, cfg.seed = 1000, False, 0
    runner = Runner(cfg)
    runner.learn(until=2)  # warm-up (compiles)
    times = []
    for it in range(3, 3 + timed):
        start = time.perf_counter()
        runner.learn(until=it)
        times.append(time.perf_counter() - start)
    runner.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="gym:Hopper-v5")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = {}
    for compile_mode in ("off", "auto"):
        for optimizer in OPTIMIZERS:
            times = iteration_seconds(args.task, optimizer, compile_mode)
            out[f"{optimizer} compile={compile_mode}"] = {"median_s": statistics.median(times),
                                                          "all": [round(t, 3) for t in times]}
            print(f"{optimizer}, compile={compile_mode}: median {statistics.median(times):.3f} s "
                  f"({', '.join(f'{t:.2f}' for t in times)})", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
