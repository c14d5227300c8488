"""Compile time of one of `gpu_check.sh`'s compiled trainers at its size, in one process: the first iteration (which
compiles every graph), the next ones, and the graphs compiled, as JSON on one line.

    TORCHINDUCTOR_CACHE_DIR=DIR python benchmarks/compile_parts.py --task point-mass --num_envs 4096 --compile step

Run it twice on one cache folder for cold and warm caches. `--save_artifacts FILE` writes torch's portable cache
artifacts of what this process compiled (`torch.compiler.save_cache_artifacts`); `--load_artifacts FILE` loads them
into the caches before anything compiles (`load_cache_artifacts`), as a machine that was handed the file would."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from syncfree.core.compile import compile_counts
from syncfree.tasks import preset, with_algorithm
from syncfree.train.runner import Runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--num_envs", type=int, required=True)
    parser.add_argument("--compile", default="step", choices=["hot", "step"])
    parser.add_argument("--algorithm", default=None, help="e.g. sac, td3 (the task's own by default)")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--save_artifacts", type=Path, default=None)
    parser.add_argument("--load_artifacts", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = 0.0
    if args.load_artifacts is not None and args.load_artifacts.is_file():
        start = time.perf_counter()
        torch.compiler.load_cache_artifacts(args.load_artifacts.read_bytes())
        loaded = time.perf_counter() - start
    cfg = preset(args.task)
    cfg.seed, cfg.device, cfg.iterations = 1, "cpu", args.iterations
    if args.algorithm is not None:
        cfg = with_algorithm(cfg, args.algorithm)
        cfg.learner.learning_starts = 0  # gradient steps (and their graphs) from the first iteration
    cfg.env.num_envs = args.num_envs
    cfg.log.progress = False
    cfg.perf = dataclasses.replace(cfg.perf, compile=args.compile)
    start = time.perf_counter()
    runner = Runner(cfg)
    built = time.perf_counter() - start
    seconds = []
    for it in range(1, args.iterations + 1):
        start = time.perf_counter()
        runner.learn(until=it)
        seconds.append(time.perf_counter() - start)
        if it == 1:
            first = compile_counts()
    saved = 0
    if args.save_artifacts is not None:
        artifacts = torch.compiler.save_cache_artifacts()
        if artifacts is not None:
            args.save_artifacts.write_bytes(artifacts[0])
            saved = len(artifacts[0])
    print(json.dumps({"task": args.task, "algorithm": args.algorithm or cfg.algorithm, "num_envs": args.num_envs,
                      "compile": args.compile, "build_s": round(built, 2), "first_iteration_s": round(seconds[0], 2),
                      "later_iteration_s": round(min(seconds[1:]), 3) if len(seconds) > 1 else None,
                      "graphs_first_iteration": first, "graphs_after": compile_counts(),
                      "artifacts_loaded_s": round(loaded, 2), "artifacts_bytes": saved}))


if __name__ == "__main__":
    main()
