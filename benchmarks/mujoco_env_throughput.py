"""Env-only throughput of g1-track on the MuJoCo CPU backend against the torch PD backend.

    nice -n 10 python benchmarks/mujoco_env_throughput.py --num_envs 64 256 1024 --threads 2 \
        --out benchmarks/results/g1-track-mujoco-cpu

Per size: both backends built once, warmed up, then timed interleaved (torch, mujoco, torch, mujoco, ...), each
repeat stepping the env with random actions. Also timed: `MujocoPhysics.step()` alone (one `mujoco.rollout`
call per control step with its host copies), the physics floor of the MuJoCo env step. On a machine shared
with other jobs the best repeat (the least disturbed one) is the closest to the machine's own speed: the table
shows it beside the median.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import mujoco
import torch

from syncfree.envs.builtin.g1_track import G1TrackEnv, make_g1_track


def steps_per_s(env: G1TrackEnv, steps: int, physics_only: bool, generator: torch.Generator) -> float:
    actions = 0.3 * torch.randn(steps, env.num_envs, env.action_spec.size, generator=generator)
    start = time.perf_counter()
    for t in range(steps):
        if physics_only:
            env.physics.step()
        else:
            env.step(actions[t])
    return env.num_envs * steps / (time.perf_counter() - start)


def bench_size(num_envs: int, repeats: int) -> dict[str, dict[str, float]]:
    envs = {"torch": make_g1_track(num_envs, backend="torch"), "mujoco": make_g1_track(num_envs, backend="mujoco")}
    steps = max(5, 2048 // num_envs)
    generator = torch.Generator().manual_seed(0)
    for env in envs.values():
        env.reset()
        steps_per_s(env, 3, False, generator)
    runs: dict[str, list[float]] = {"torch": [], "mujoco": [], "mujoco physics only": []}
    for _ in range(repeats):
        runs["torch"].append(steps_per_s(envs["torch"], steps, False, generator))
        runs["mujoco"].append(steps_per_s(envs["mujoco"], steps, False, generator))
        runs["mujoco physics only"].append(steps_per_s(envs["mujoco"], steps, True, generator))
    envs["mujoco"].physics.close()
    return {name: {"best": max(v), "median": statistics.median(v), "worst": min(v)} for name, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_envs", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="MuJoCo rollout threads (default: the CPUs this process may use)")
    parser.add_argument("--torch_threads", type=int, default=1,
                        help="torch intra-op threads (default 1: the env's small ops gain nothing from more, and on "
                             "a shared machine a descheduled OpenMP thread stalls every op)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/g1-track-mujoco-cpu"))
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])  # MujocoPhysics: one thread per CPU
    results = {"machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
                           "mujoco": mujoco.__version__, "mujoco_threads": args.threads,
                           "torch_threads": args.torch_threads},
               "sizes": {str(n): bench_size(n, args.repeats) for n in args.num_envs}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["# g1-track env-only throughput: MuJoCo CPU backend vs torch PD backend", "",
             f"torch {torch.__version__} ({args.torch_threads} thread), mujoco {mujoco.__version__} "
             f"({args.threads} rollout threads), {args.repeats} interleaved repeats; env steps/s, best repeat (median). One env step = 4 "
             "physics steps of 5 ms.", "",
             "| envs | torch PD env | MuJoCo env | MuJoCo physics only | MuJoCo / torch (best) |",
             "|---|---|---|---|---|"]
    for n, r in results["sizes"].items():
        def cell(name: str, r=r) -> str:
            return f"{r[name]['best']:,.0f} ({r[name]['median']:,.0f})"
        ratio = r["mujoco"]["best"] / r["torch"]["best"]
        lines.append(f"| {n} | {cell('torch')} | {cell('mujoco')} | {cell('mujoco physics only')} | {ratio:.2f}× |")
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
