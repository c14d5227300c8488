"""Env steps/s of a Gymnasium task through syncfree's adapter with Gymnasium's two vector envs, `sync` (every env
stepped in this process, one after another) and `async` (one worker process per env), and with syncfree's split
(`worker`: half of the envs in this process, half in one worker process, `perf.host_env_worker`), timed
interleaved.

    python benchmarks/gym_vectorization.py --env_id Hopper-v5 --num_envs 16 --repeats 3 \
        --out benchmarks/results/gym-vectorization-hopper-cpu

Zero actions, 20 warm-up steps, then `--steps` timed steps per repeat; one torch thread in this process. Writes
`results.json` and `results.md` in `--out` (median and range over the repeats).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from syncfree.bench.report import save_results
from syncfree.envs.adapters.gymnasium import make_gymnasium

MODES = ("sync", "async", "worker")


def steps_per_s(env_id: str, num_envs: int, mode: str, steps: int) -> float:
    env = make_gymnasium(env_id, num_envs, seed=0, vectorization="sync" if mode == "worker" else mode,
                         worker=mode == "worker")
    try:
        env.reset()
        actions = torch.zeros(num_envs, env.action_spec.size) if env.action_spec.kind == "continuous" else \
            torch.zeros(num_envs, dtype=torch.int64)
        for _ in range(20):
            env.step(actions)
        start = time.perf_counter()
        for _ in range(steps):
            env.step(actions)
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env_id", default="Hopper-v5")
    parser.add_argument("--num_envs", type=int, nargs="+", default=[16])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gym-vectorization-hopper-cpu"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for n in args.num_envs:
        runs: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                runs[mode].append(steps_per_s(args.env_id, n, mode, args.steps))
        rows.append({"num_envs": n, **{mode: runs[mode] for mode in MODES}})
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    lines = [f"# {args.env_id}: Gymnasium's sync and async vector envs, and the split into a worker process, "
             "through the adapter", "",
             f"`python benchmarks/gym_vectorization.py --env_id {args.env_id} --num_envs "
             f"{' '.join(map(str, args.num_envs))} --steps {args.steps} --repeats {args.repeats}` on {machine}; env "
             "steps/s, median (min-max) over the repeats, timed interleaved.", "",
             "| envs | sync | async | worker | async / sync | worker / sync |", "|---|---|---|---|---|---|"]
    for row in rows:
        median = {m: statistics.median(row[m]) for m in MODES}
        cells = [f"{median[m]:,.0f} ({min(row[m]):,.0f}-{max(row[m]):,.0f})" for m in MODES]
        lines.append(f"| {row['num_envs']} | {' | '.join(cells)} | {median['async'] / median['sync']:.2f} | "
                     f"{median['worker'] / median['sync']:.2f} |")
    save_results(args.out, {"env_id": args.env_id, "machine": machine, "rows": rows}, "\n".join(lines), show=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
